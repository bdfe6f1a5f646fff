package stats

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// Server.Snapshot returns the figures of known traffic in every section, and only the
// sections asked for.
func TestSnapshotSections(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv, addr := startServer(t, m.cfg(loop.Config{}), func(s *loop.Server) {
				s.Handle("GET /ok/{id}", func(c *loop.Ctx) { c.String(200, "ok") })
				s.Handle("GET /fail", func(c *loop.Ctx) { c.String(503, "no") })
				s.Handle("GET /off", func(c *loop.Ctx) {
					_, _ = offload.Do(c, func(context.Context) (int, error) { return 1, nil })
					c.Bytes(204, "", nil)
				})
				s.NewGate("g", 1, 1)
			})
			cl := dial(t, addr)
			for i := range 5 {
				resp, _ := cl.Get("/ok/" + string(rune('a'+i)))
				mustStatus(t, resp, 200)
			}
			resp, _ := cl.Get("/fail")
			mustStatus(t, resp, 503)
			resp, _ = cl.Get("/off")
			mustStatus(t, resp, 204)

			ctx := context.Background()
			snap, err := Take(ctx, srv, AllViews)
			require.NoError(t, err)
			assert.WithinDuration(t, time.Now(), snap.Taken, 10*time.Second)
			byRoute := map[string]int{}
			for i, r := range snap.Routes {
				byRoute[r.Route] = i
			}
			require.Contains(t, byRoute, "GET /ok/{id}", "routes are patterns")
			ok := snap.Routes[byRoute["GET /ok/{id}"]]
			assert.EqualValues(t, 5, ok.Count)
			assert.EqualValues(t, 5, ok.Latency.Cumulative.Count)
			assert.EqualValues(t, 5, ok.Latency.Cumulative.Buckets[len(ok.Latency.Cumulative.Buckets)-1])
			assert.EqualValues(t, 1, snap.Routes[byRoute["GET /fail"]].Errors)
			assert.Positive(t, snap.Loop.Uptime)
			assert.GreaterOrEqual(t, snap.Loop.TasksDone, uint64(7))
			assert.GreaterOrEqual(t, snap.Admission.Parsed, uint64(7))
			assert.GreaterOrEqual(t, snap.Admission.Accept.Accepted, uint64(1))
			assert.Positive(t, snap.Offload.Pool.Tokens)
			var started uint64
			for _, l := range snap.Offload.Pool.Lanes {
				started += l.Started
			}
			assert.EqualValues(t, 1, started)
			require.Len(t, snap.Offload.Gates, 1)
			assert.Equal(t, "g", snap.Offload.Gates[0].Name)

			only, err := Take(ctx, srv, ViewRoutes)
			require.NoError(t, err)
			assert.NotEmpty(t, only.Routes)
			assert.Zero(t, only.Loop.Uptime)
			assert.Zero(t, only.Admission.Parsed)
			assert.Zero(t, only.Offload.Pool.Tokens)
			assert.Empty(t, only.Tasks.Live)

			off, err := Take(ctx, srv, ViewOffload)
			require.NoError(t, err)
			assert.Positive(t, off.Offload.Pool.Tokens)
			assert.Nil(t, off.Routes)
		})
	}
}

// Snapshot gives up when its context ends while the loop is held, and answers
// loop.ErrServerClosed once the server has stopped.
func TestSnapshotStalledAndClosed(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{})
	srv, addr := startServer(t, loop.Config{StallThreshold: -1}, func(s *loop.Server) {
		s.Handle("GET /hold", func(c *loop.Ctx) {
			close(held)
			select { // holds the loop on purpose, bounded
			case <-release:
			case <-time.After(10 * time.Second):
			}
			c.Bytes(204, "", nil)
		})
	})
	cl := dial(t, addr)
	cl.Send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	<-held
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Take(ctx, srv, AllViews)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	resp, _ := cl.Read("GET")
	mustStatus(t, resp, 204)
	_, err = Take(context.Background(), srv, ViewLoop)
	require.NoError(t, err)

	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	require.NoError(t, srv.Shutdown(sctx))
	<-srv.Done()
	_, err = Take(context.Background(), srv, ViewLoop)
	require.True(t, errors.Is(err, loop.ErrServerClosed), "got %v", err)
}

// The offload page uses the other pages' conventions: snake_case names, durations in
// seconds, counters ending in _total.
func TestOffloadPageJSON(t *testing.T) {
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		Mount(s, "/debug/baton")
		s.Handle("GET /off", func(c *loop.Ctx) {
			_, _ = offload.Do(c, func(context.Context) (int, error) { return 1, nil })
			c.Bytes(204, "", nil)
		})
		s.NewGate("g", 2, 0)
	})
	cl := dial(t, addr)
	resp, _ := cl.Get("/off")
	mustStatus(t, resp, 204)
	resp, body := cl.Get("/debug/baton/offload")
	mustStatus(t, resp, http.StatusOK)
	var doc struct {
		Pool struct {
			Tokens int `json:"tokens"`
			Lanes  []struct {
				Lane    string `json:"lane"`
				Started uint64 `json:"started_total"`
				Run     struct {
					Count uint64   `json:"count"`
					P99   *float64 `json:"p99_seconds"`
				} `json:"run"`
			} `json:"lanes"`
			Keys []struct {
				Key      string   `json:"key"`
				Estimate *float64 `json:"estimate_seconds"`
				Calls    uint64   `json:"calls_total"`
			} `json:"keys"`
		} `json:"pool"`
		Gates []struct {
			Name     string   `json:"name"`
			Size     int      `json:"size"`
			MeanHold *float64 `json:"mean_hold_seconds"`
		} `json:"gates"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
	assert.Positive(t, doc.Pool.Tokens)
	require.Len(t, doc.Pool.Lanes, 2)
	assert.Equal(t, "fast", doc.Pool.Lanes[0].Lane)
	assert.Equal(t, "slow", doc.Pool.Lanes[1].Lane)
	assert.EqualValues(t, 1, doc.Pool.Lanes[0].Started+doc.Pool.Lanes[1].Started)
	assert.EqualValues(t, 1, doc.Pool.Lanes[0].Run.Count+doc.Pool.Lanes[1].Run.Count)
	require.NotNil(t, doc.Pool.Lanes[0].Run.P99)
	require.Len(t, doc.Pool.Keys, 1)
	assert.Equal(t, "GET /off", doc.Pool.Keys[0].Key)
	require.NotNil(t, doc.Pool.Keys[0].Estimate)
	assert.Less(t, *doc.Pool.Keys[0].Estimate, 1.0, "seconds, not nanoseconds")
	require.Len(t, doc.Gates, 1)
	assert.Equal(t, 2, doc.Gates[0].Size)
	require.NotNil(t, doc.Gates[0].MeanHold)
	assert.NotContains(t, body, `"Tokens"`)
}
