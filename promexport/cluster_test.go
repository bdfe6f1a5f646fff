package promexport

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/stats"
)

// handoffNode starts node id of dir with a handoff key, accepting handoffs of rooms that
// count their ticks, with its stats pages and /metrics mounted.
func handoffNode(t *testing.T, dir directory.Opener, id string) *loop.Server {
	t.Helper()
	key := []byte(strings.Repeat("k", 32))
	s := loop.New(looptest.Config(t, loop.Config{}))
	require.NoError(t, room.UseDirectory(s, dir, room.NodeConfig{Directory: directory.Config{Node: id}, HandoffKey: key}))
	require.NoError(t, room.AcceptHandoffs(s, func(name string) (room.Config[int], error) {
		st := &struct{ Ticks int }{}
		cfg := room.Config[int]{Name: name, Period: 20 * time.Millisecond, Tick: func(*room.Room[int], *room.Tick[int]) { st.Ticks++ }}
		cfg.Snapshot, cfg.Restore = room.JSONState[int](st)
		return cfg, nil
	}))
	stats.Mount(s, "/debug/baton")
	s.Handle("GET /metrics", Handler(Registry(s)), loop.Exempt())
	looptest.Start(t, s)
	return s
}

// The cluster section's handoff figures are exported: three rooms moved from node a to
// node b and one handed to a node that does not exist (it fails; the room stays) make
// a's started, completed and failed counters 4, 3 and 1 and b's accepted 3; b's gap histogram counts
// the 3 gaps with their sum, its buckets and its max agree with the stats page, and both
// expositions pass promtool check metrics. A server that is not a node exports no
// baton_cluster_ family.
func TestHandoffFiguresExported(t *testing.T) {
	dir := directory.NewEmbedded()
	a, b := handoffNode(t, dir, "a"), handoffNode(t, dir, "b")
	var rooms []*room.Room[int]
	for i := range 4 {
		cfg := room.Config[int]{Name: fmt.Sprintf("m%d", i), Period: 20 * time.Millisecond, Tick: func(*room.Room[int], *room.Tick[int]) {}}
		cfg.Snapshot, cfg.Restore = room.JSONState[int](&struct{}{})
		var r *room.Room[int]
		var err error
		looptest.OnLoop(t, a.Loop(0), func() { r, err = room.New(a.Loop(0), cfg) })
		require.NoError(t, err)
		rooms = append(rooms, r)
	}
	errs := make(chan error, 4)
	looptest.OnLoop(t, a.Loop(0), func() {
		a.Loop(0).Go("test:move", func(tk *loop.Task) {
			for i, r := range rooms {
				if _, err := r.Claimed(tk); err != nil {
					errs <- err
					continue
				}
				to := "b"
				if i == 3 {
					to = "nowhere" // fails: the room stays on a
				}
				_, err := r.Handoff(tk, to)
				errs <- err
			}
		})
	})
	for range 3 {
		require.NoError(t, <-errs)
	}
	require.ErrorIs(t, <-errs, directory.ErrUnknownNode)

	cl := &http.Client{Timeout: 10 * time.Second}
	scrape := func(s *loop.Server) (string, map[string]*dto.MetricFamily) {
		code, text := get(t, cl, "http://"+s.Addr().String()+"/metrics")
		require.Equal(t, 200, code, text)
		return text, parse(t, text)
	}
	// b's first ticks of the rooms record the gaps: wait for the three.
	var textB string
	var mb map[string]*dto.MetricFamily
	deadline := time.Now().Add(10 * time.Second)
	for {
		textB, mb = scrape(b)
		if h := mb["baton_cluster_handoff_gap_seconds"]; h != nil && h.Metric[0].GetHistogram().GetSampleCount() == 3 {
			break
		}
		require.True(t, time.Now().Before(deadline), "b did not record 3 gaps:\n%s", textB)
		time.Sleep(10 * time.Millisecond)
	}
	textA, ma := scrape(a)
	assert.EqualValues(t, 4, value(ma, "baton_cluster_handoffs_started_total", nil), "a")
	assert.EqualValues(t, 3, value(ma, "baton_cluster_handoffs_completed_total", nil))
	assert.EqualValues(t, 1, value(ma, "baton_cluster_handoffs_failed_total", nil))
	assert.EqualValues(t, 0, value(ma, "baton_cluster_handoffs_accepted_total", nil))
	assert.EqualValues(t, 3, value(mb, "baton_cluster_handoffs_accepted_total", nil), "b")
	assert.EqualValues(t, 0, value(mb, "baton_cluster_handoffs_started_total", nil))

	// The histogram and max against b's stats page.
	code, page := get(t, cl, "http://"+b.Addr().String()+"/debug/baton/cluster")
	require.Equal(t, 200, code)
	var pg struct {
		Handoffs struct {
			GapsTotal int64   `json:"gaps_total"`
			GapSum    int64   `json:"gap_sum_ns"`
			GapMax    int64   `json:"gap_max_ns"`
			GapP50    int64   `json:"gap_p50_ns"`
			Bounds    []int64 `json:"gap_bounds_ns"`
			LE        []int64 `json:"gap_le"`
		} `json:"handoffs"`
	}
	require.NoError(t, json.Unmarshal([]byte(page), &pg), page)
	h := mb["baton_cluster_handoff_gap_seconds"].Metric[0].GetHistogram()
	assert.EqualValues(t, pg.Handoffs.GapsTotal, h.GetSampleCount())
	assert.InDelta(t, time.Duration(pg.Handoffs.GapSum).Seconds(), h.GetSampleSum(), 1e-9)
	require.Len(t, h.Bucket, len(pg.Handoffs.Bounds)+1, "the page's bounds and +Inf")
	assert.True(t, math.IsInf(h.Bucket[len(h.Bucket)-1].GetUpperBound(), 1))
	assert.EqualValues(t, 3, h.Bucket[len(h.Bucket)-1].GetCumulativeCount())
	for i, bk := range h.Bucket[:len(pg.Handoffs.Bounds)] {
		assert.InDelta(t, time.Duration(pg.Handoffs.Bounds[i]).Seconds(), bk.GetUpperBound(), 1e-12)
		assert.EqualValues(t, pg.Handoffs.LE[i], bk.GetCumulativeCount())
		// Each bucket counts exactly the gaps at most its bound: the max is the last gap
		// to enter, so a bound at least the max holds all three, one below it fewer.
		if time.Duration(pg.Handoffs.Bounds[i]) >= time.Duration(pg.Handoffs.GapMax) {
			assert.EqualValues(t, 3, bk.GetCumulativeCount(), "bucket le=%v", bk.GetUpperBound())
		} else {
			assert.Less(t, bk.GetCumulativeCount(), uint64(3), "bucket le=%v", bk.GetUpperBound())
		}
	}
	assert.InDelta(t, time.Duration(pg.Handoffs.GapMax).Seconds(), value(mb, "baton_cluster_handoff_gap_max_seconds", nil), 1e-9)
	assert.Positive(t, pg.Handoffs.GapMax)
	mean := h.GetSampleSum() / 3
	t.Logf("b: 3 gaps, mean %.1f ms, p50 %v, max %v (the stats page)", mean*1e3, time.Duration(pg.Handoffs.GapP50), time.Duration(pg.Handoffs.GapMax))

	for name, text := range map[string]string{"a": textA, "b": textB} {
		exit, out := runPromtool(t, text, "check", "metrics")
		require.Equal(t, 0, exit, "%s: promtool check metrics:\n%s", name, out)
		require.Empty(t, strings.TrimSpace(out), name)
	}

	// A server that is not a node: no cluster family.
	_, base := newServer(t, loop.Config{})
	_, text := get(t, cl, base+"/metrics")
	assert.NotContains(t, text, "baton_cluster_")
}

// The cluster section's seat figures are exported: resume tokens refused by room.Admit
// (forged, and for a room the node does not run) count in
// baton_cluster_seats_refused_total as on the stats page, the other seat counters are 0,
// and the exposition passes promtool check metrics.
func TestSeatFiguresExported(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	n := loop.New(looptest.Config(t, loop.Config{}))
	require.NoError(t, room.UseDirectory(n, directory.NewEmbedded(), room.NodeConfig{Directory: directory.Config{Node: "p"}, HandoffKey: key}))
	n.Handle("GET /play/{room}", func(c *loop.Ctx) {
		name := c.PathValue("room")
		if _, _, ok := room.Admit(c, name, func(l *loop.Loop) (*room.Room[int], error) {
			return room.New(l, room.Config[int]{Name: name, Period: 20 * time.Millisecond, Tick: func(*room.Room[int], *room.Tick[int]) {}})
		}); ok {
			c.String(200, "seated\n")
		}
	})
	stats.Mount(n, "/debug/baton")
	n.Handle("GET /metrics", Handler(Registry(n)), loop.Exempt())
	base := looptest.Start(t, n)
	cl := &http.Client{Timeout: 10 * time.Second}
	for _, tok := range []string{"garbage", "AQ.AAAA", strings.Repeat("x", 40)} {
		code, body := get(t, cl, base+"/play/den?resume="+tok)
		require.Equal(t, 401, code, body)
	}
	var pg struct {
		Seats map[string]float64 `json:"seats"`
	}
	code, page := get(t, cl, base+"/debug/baton/cluster")
	require.Equal(t, 200, code)
	require.NoError(t, json.Unmarshal([]byte(page), &pg), page)
	require.EqualValues(t, 3, pg.Seats["refused"], page)
	code, text := get(t, cl, base+"/metrics")
	require.Equal(t, 200, code)
	mf := parse(t, text)
	assert.EqualValues(t, pg.Seats["refused"], value(mf, "baton_cluster_seats_refused_total", nil))
	for _, k := range []string{"resumed", "held", "removed", "replaced"} {
		assert.EqualValues(t, pg.Seats[k], value(mf, "baton_cluster_seats_"+k+"_total", nil), k)
		assert.Zero(t, pg.Seats[k], k)
	}
	exit, out := runPromtool(t, text, "check", "metrics")
	require.Equal(t, 0, exit, "promtool check metrics:\n%s", out)
}
