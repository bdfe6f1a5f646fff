package stats

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
)

func shardOf(c *loop.Ctx) { c.String(200, strconv.Itoa(c.Loop().Index())) }

// spreadConns opens n connections to addr, sends one GET path on each and returns the
// loops named in the answers (shardOf's body), one per connection.
func spreadConns(t *testing.T, addr, path string, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		resp, body := dial(t, addr).Get(path)
		require.Equal(t, 200, resp.StatusCode)
		k, err := strconv.Atoi(body)
		require.NoError(t, err, "body %q", body)
		out[i] = k
	}
	return out
}

func TestShardsStatsPagesShowEachShardAndTotal(t *testing.T) {
	const shards, conns = 3, 30
	s, addr := startServer(t, loop.Config{Shards: shards}, func(s *loop.Server) {
		s.Handle("GET /shard", shardOf)
		Mount(s, "/debug/baton")
	})
	served := make([]int, shards)
	for _, k := range spreadConns(t, addr, "/shard", conns) {
		served[k]++
	}
	base := "http://" + addr + "/debug/baton/"

	// routes: the total of GET /shard is every request; each shard's row has its own.
	code, page := getJSON(t, base+"routes")
	require.Equal(t, 200, code)
	count := func(routes any) float64 {
		for _, r := range routes.([]any) {
			if r := r.(map[string]any); r["route"] == "GET /shard" {
				return r["count"].(float64)
			}
		}
		return 0
	}
	assert.EqualValues(t, conns, count(page["routes"]))
	for i, row := range shardRows(t, page, shards) {
		assert.EqualValues(t, served[i], count(row["routes"]), "shard %d", i)
	}

	// admission: parsed_total adds up over the shards (the stats requests included).
	code, page = getJSON(t, base+"admission")
	require.Equal(t, 200, code)
	sum := 0.0
	for _, row := range shardRows(t, page, shards) {
		sum += row["parsed_total"].(float64)
	}
	assert.Equal(t, sum, page["parsed_total"].(float64))
	assert.GreaterOrEqual(t, sum, float64(conns))

	for _, kind := range []string{"loop", "tasks", "offload"} {
		code, page = getJSON(t, base+kind)
		require.Equal(t, 200, code, kind)
		shardRows(t, page, shards)
	}
	_, page = getJSON(t, base+"loop")
	started := 0.0
	for _, row := range shardRows(t, page, shards) {
		started += row["tasks_started"].(float64)
	}
	assert.Equal(t, started, page["tasks_started"].(float64))

	// The text view: the totals, then one section per shard.
	resp, err := http.Get(base + "loop?format=text")
	require.NoError(t, err)
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(text), "== total over 3 shards ==")
	assert.Contains(t, string(text), "== shard 2 ==")

	// The dashboard: each shard has a hub; a frame carries the totals.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"events", nil)
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, frame := nextEvent(t, bufio.NewReader(resp.Body), "")
	resp.Body.Close()
	var fr struct {
		Admission accounting.AdmissionStats `json:"admission"`
	}
	require.NoError(t, json.Unmarshal(frame, &fr))
	assert.GreaterOrEqual(t, fr.Admission.Parsed, uint64(conns), "the frame sums the shards")

	// The same pages from StatsHandler on another listener.
	admin := httptest.NewServer(Handler(s))
	defer admin.Close()
	code, page = getJSON(t, admin.URL+"/debug/baton/routes")
	require.Equal(t, 200, code)
	assert.EqualValues(t, conns, count(page["routes"]))
	shardRows(t, page, shards)

	// Snapshot: totals and each shard.
	snap, err := Take(context.Background(), s, AllViews)
	require.NoError(t, err)
	require.Len(t, snap.Shards, shards)
	var parsed uint64
	for i, sh := range snap.Shards {
		assert.Nil(t, sh.Shards)
		parsed += sh.Admission.Parsed
		assert.GreaterOrEqual(t, sh.Admission.Parsed, uint64(served[i]))
	}
	assert.Equal(t, parsed, snap.Admission.Parsed)
	for _, r := range snap.Routes {
		if r.Route == "GET /shard" {
			assert.EqualValues(t, conns, r.Count)
		}
	}

	// docs/accounting.md defines the shard fields of the pages; docs/health.md the checks'.
	doc, err := os.ReadFile("../../docs/accounting.md")
	require.NoError(t, err)
	for _, f := range []string{"`shards`", "`shard`"} {
		assert.True(t, strings.Contains(string(doc), f), "docs/accounting.md does not define %s", f)
	}
	doc, err = os.ReadFile("../../docs/health.md")
	require.NoError(t, err)
	for _, f := range []string{"`shards`", "`stalled_shards`", "`failing_shards`"} {
		assert.True(t, strings.Contains(string(doc), f), "docs/health.md does not define %s", f)
	}
}
