package nethttp

import (
	"context"
	"io"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/offload"
)

// httpGateStats returns the stats of the offload gate named name, and whether it exists.
func httpGateStats(s *loop.Server, name string) (offload.GateStats, bool) {
	snap, err := stats.Take(context.Background(), s, stats.ViewOffload)
	if err != nil {
		return offload.GateStats{}, false
	}
	for _, g := range snap.Offload.Gates {
		if g.Name == name {
			return g, true
		}
	}
	return offload.GateStats{}, false
}

// TestHTTPRouteCannotShutOutOthers: one net/http route whose handlers ignore their
// context and never return does not shut out the Adapter's other routes, pprof included.
// Its requests hold at most its share of the shared gate while its clients wait, and once
// they left, its handlers stop counting against the gate after the grace period, so the
// gate is free again although their goroutines still run.
func TestHTTPRouteCannotShutOutOthers(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var stuck atomic.Int32
	s, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		mount(t, s, Config{MaxConcurrent: 4, MaxQueue: 4, AbandonAfter: 200 * time.Millisecond})
		handle(t, s, "GET /bad", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			stuck.Add(1)
			<-release // ignores r.Context()
		}))
		handle(t, s, "GET /good", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "good\n")
		}))
		handle(t, s, "GET /debug/pprof/", http.HandlerFunc(pprof.Index))
	})
	get := func(path string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}

	// Twelve clients of the bad route: more than the gate's places and its queue.
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	for range 12 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/bad", nil)
			if resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}()
	}
	require.Eventually(t, func() bool {
		g, ok := httpGateStats(s, "net/http")
		return ok && stuck.Load() >= 2 && g.InUse == int(stuck.Load())
	}, 10*time.Second, time.Millisecond)
	g, _ := httpGateStats(s, "net/http")
	t.Logf("bad clients waiting: %d bad handlers running, shared gate %d/%d in use, %d waiting", stuck.Load(), g.InUse, g.Size, g.Waiting)

	code, err := get("/good")
	require.NoError(t, err, "another route of the Adapter answers while the bad route's clients wait")
	require.Equal(t, 200, code)
	code, err = get("/debug/pprof/")
	require.NoError(t, err, "pprof answers while the bad route's clients wait")
	require.Equal(t, 200, code)

	// The bad route's clients leave: after the grace period its handlers no longer count.
	leave()
	require.Eventually(t, func() bool { g, _ := httpGateStats(s, "net/http"); return g.InUse == 0 && g.Waiting == 0 },
		20*time.Second, time.Millisecond, "the gate stays held by handlers whose clients left")
	running := stuck.Load()
	g, _ = httpGateStats(s, "net/http")
	t.Logf("bad clients gone: %d bad handlers still running, shared gate %d/%d in use", running, g.InUse, g.Size)
	code, err = get("/good")
	require.NoError(t, err)
	require.Equal(t, 200, code)
	code, err = get("/debug/pprof/")
	require.NoError(t, err)
	require.Equal(t, 200, code)
}

func TestHTTPAdapterConfigRouteShare(t *testing.T) {
	for _, v := range []float64{-0.1, 1.5} {
		err := Config{MaxRouteShare: v}.Validate()
		require.ErrorContains(t, err, "nethttp: Config.MaxRouteShare")
	}
	require.NoError(t, Config{MaxRouteShare: 1, AbandonAfter: -1}.Validate())
}

// TestAdapterOnShards: with two loops, one Adapter serves the requests of both through its
// one gate (the process's: MaxConcurrent bounds every loop's handlers together).
func TestAdapterOnShards(t *testing.T) {
	var loops [2]atomic.Int32
	s, addr := startServer(t, loop.Config{Shards: 2}, func(s *loop.Server) {
		s.Use(func(next loop.HandlerFunc) loop.HandlerFunc {
			return func(c *loop.Ctx) {
				loops[c.Loop().Index()].Add(1)
				next(c)
			}
		})
		mount(t, s, Config{MaxConcurrent: 3})
		handle(t, s, "GET /where", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "ok")
		}))
	})
	require.Eventually(t, func() bool {
		resp, body := dial(t, addr).get("/where") // a new connection each time: the kernel spreads them
		mustStatus(t, resp, 200)
		require.Equal(t, "ok", body)
		return loops[0].Load() > 0 && loops[1].Load() > 0
	}, 10*time.Second, time.Millisecond, "both loops serve the adapter's route")
	g, ok := httpGateStats(s, "net/http")
	require.True(t, ok)
	require.Equal(t, 3, g.Size, "one gate for the process")
}
