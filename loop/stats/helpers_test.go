package stats

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// modes are the two modes every behaviour is checked in.
var modes = []struct {
	name string
	cfg  func(loop.Config) loop.Config
}{
	{"single-thread", func(c loop.Config) loop.Config { return c }},
	{"multi-thread", func(c loop.Config) loop.Config { c.MultiThread = true; return c }},
}

// startServer starts a server of cfg after setup and returns it and its address; it is
// closed when the test ends.
func startServer(t testing.TB, cfg loop.Config, setup func(*loop.Server)) (*loop.Server, string) {
	t.Helper()
	s := loop.New(looptest.Config(t, cfg))
	if setup != nil {
		setup(s)
	}
	return s, strings.TrimPrefix(looptest.Start(t, s), "http://")
}

// dial opens a keep-alive connection to addr.
func dial(t testing.TB, addr string) *looptest.Conn { return looptest.Dial(t, addr) }

func mustStatus(t testing.TB, resp *http.Response, code int) {
	t.Helper()
	require.Equal(t, code, resp.StatusCode)
}

// getJSON fetches url and decodes its JSON object.
func getJSON(t testing.TB, url string) (int, map[string]any) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	var page map[string]any
	if resp.StatusCode == 200 {
		require.NoError(t, json.Unmarshal(body, &page), string(body))
	}
	return resp.StatusCode, page
}

// shardRows returns a page's "shards" rows, checking there is one per loop in order.
func shardRows(t testing.TB, page map[string]any, n int) []map[string]any {
	t.Helper()
	raw, ok := page["shards"].([]any)
	require.True(t, ok, "no shards array: %v", page)
	require.Len(t, raw, n)
	rows := make([]map[string]any, n)
	for i, r := range raw {
		rows[i] = r.(map[string]any)
		require.EqualValues(t, i, rows[i]["shard"])
	}
	return rows
}
