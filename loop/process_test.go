package loop

import (
	"encoding/json"
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// processFigures is what the loop page says about the process.
type processFigures struct {
	Goroutines int   `json:"goroutines"`
	RSSBytes   int64 `json:"rss_bytes"`
	OpenFDs    int   `json:"open_fds"`
}

// TestLoopPageProcessFigures: the loop page shows the process's goroutines, resident
// memory and open file descriptors (issue 27, item 17), in JSON and text, with one loop
// and with shards. Each figure follows what the test does to the process: 500 more
// goroutines, 20 more descriptors at least (20 connections), 64 MiB more touched memory
// (mapped, on Linux).
func TestLoopPageProcessFigures(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(map[int]string{1: "one loop", 2: "shards"}[shards], func(t *testing.T) {
			_, addr := startServer(t, Config{Shards: shards}, func(s *Server) { s.HandleStats("/debug/baton") })
			c := dial(t, addr)
			read := func() (total processFigures, per []processFigures) {
				resp, body := c.get("/debug/baton/loop")
				require.Equal(t, 200, resp.StatusCode, body)
				require.NoError(t, json.Unmarshal([]byte(body), &total), body)
				var page struct {
					Shards []processFigures `json:"shards"`
				}
				require.NoError(t, json.Unmarshal([]byte(body), &page), body)
				return total, page.Shards
			}
			before, _ := read()
			require.Positive(t, before.Goroutines)

			stop := make(chan struct{})
			for range 500 {
				go func() { <-stop }()
			}
			defer close(stop)
			var conns []net.Conn
			for range 20 {
				cn, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				conns = append(conns, cn)
			}
			defer func() {
				for _, cn := range conns {
					_ = cn.Close()
				}
			}()
			release := touchMemory(t, 64<<20) // outside Go's heap, which may hold freed pages of earlier runs
			defer release()

			g0, f0 := runtime.NumGoroutine(), countFDs()
			after, per := read()
			g1, f1 := runtime.NumGoroutine(), countFDs()
			t.Logf("before %+v, after %+v; runtime.NumGoroutine %d and %d around the read", before, after, g0, g1)
			// Other goroutines come and go meanwhile (earlier tests' servers winding down,
			// gnet's pool retiring idle workers), so the difference from before says
			// little: the page must show the count of the moment, with the 500 in it.
			assert.GreaterOrEqual(t, after.Goroutines, 500, "goroutines: the test's 500 at least")
			assert.InDelta(t, (g0+g1)/2, after.Goroutines, float64(max(g1-g0, g0-g1)/2+10), "goroutines: the process's count at the read")
			if runtime.GOOS == "linux" {
				assert.GreaterOrEqual(t, after.OpenFDs, 20, "open fds: the clients' ends at least")
				assert.InDelta(t, (f0+f1)/2, after.OpenFDs, float64(max(f1-f0, f0-f1)/2+4), "open fds: the process's count at the read")
				assert.GreaterOrEqual(t, after.RSSBytes-before.RSSBytes, int64(48<<20), "rss")
			} else {
				assert.Zero(t, after.OpenFDs, "not measured off Linux: absent")
				assert.Zero(t, after.RSSBytes, "not measured off Linux: absent")
			}
			if shards > 1 {
				require.Len(t, per, shards)
				for i, p := range per {
					assert.Positive(t, p.Goroutines, "shard %d shows the process too", i)
				}
			}

			resp, text := c.get("/debug/baton/loop?format=text")
			require.Equal(t, 200, resp.StatusCode)
			assert.Contains(t, text, "process       goroutines ")
			if runtime.GOOS == "linux" {
				assert.True(t, strings.Contains(text, " rss ") && strings.Contains(text, " open fds "), text)
			}
		})
	}
}
