package health_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/health"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/offload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// startServer starts a server with setup's routes and a Checker for hc; both are shut down
// when the test ends. It returns the server, the checker and the server's host:port.
func startServer(t *testing.T, cfg loop.Config, hc health.Config, setup func(s *loop.Server, h *health.Checker)) (*loop.Server, *health.Checker, string) {
	t.Helper()
	s := loop.New(looptest.Config(t, cfg))
	h, err := health.New(s, hc)
	require.NoError(t, err)
	if setup != nil {
		setup(s, h)
	}
	looptest.Start(t, s)
	return s, h, s.Addr().String()
}

// serveInBackground starts s and returns ListenAndServe's result channel once s is ready.
func serveInBackground(t *testing.T, s *loop.Server) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	select {
	case <-s.Ready():
	case err := <-errc:
		t.Fatalf("server did not start: %v", err)
	}
	return errc
}

// probe GETs url and decodes its JSON body into a map.
func probe(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "body %q", b)
	return resp.StatusCode, m
}

// waitProbe polls url until cond holds (or fails the test after 10 s) and returns the
// last answer.
func waitProbe(t *testing.T, url string, what string, cond func(code int, m map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, m := probe(t, url)
		if cond(code, m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %d %v after 10s", what, code, m)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func failing(m map[string]any) []string {
	var out []string
	if f, ok := m["failing"].([]any); ok {
		for _, x := range f {
			out = append(out, x.(string))
		}
	}
	return out
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  health.Config
		want string
	}{
		{health.Config{StallAfter: time.Microsecond}, "health: Config.StallAfter (1µs)"},
		{health.Config{MaxUtilisation: 1.5}, "health: Config.MaxUtilisation (1.5)"},
	} {
		err := c.cfg.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
		_, err = health.New(loop.New(loop.Config{}), c.cfg)
		require.Error(t, err, "New refuses what Validate refuses")
	}
	require.NoError(t, health.Config{StallAfter: -1, MaxLoopLag: -1, MaxUtilisation: -1, MaxOffloadQueue: -1}.Validate())
	h, err := health.New(loop.New(loop.Config{}), health.Config{})
	require.NoError(t, err)
	assert.Equal(t, health.Config{StallAfter: health.DefaultStallAfter, MaxLoopLag: health.DefaultMaxLoopLag,
		MaxUtilisation: health.DefaultMaxUtilisation, MaxOffloadQueue: offload.DefaultMaxWaiting / 2}, h.Config())
	h, err = health.New(loop.New(loop.Config{Offload: offload.Config{MaxWaiting: 10}}), health.Config{})
	require.NoError(t, err)
	assert.Equal(t, 5, h.Config().MaxOffloadQueue, "the default follows the server's offload queue bound")
}

// TestHealthzNamesTheTaskHoldingTheLoop: a handler and then a room-named background task
// block the loop thread; the off-loop /healthz turns 503 naming each (and the room), and
// 200 again once the loop turns. Over real sockets.
func TestHealthzNamesTheTaskHoldingTheLoop(t *testing.T) {
	release := make(chan struct{})
	s, h, addr := startServer(t, loop.Config{}, health.Config{StallAfter: 50 * time.Millisecond}, func(s *loop.Server, h *health.Checker) {
		h.Mount()
		s.Handle("GET /spin", func(c *loop.Ctx) { <-release }) // blocks the loop thread on purpose
	})
	hs := httptest.NewServer(h.Handler())
	defer hs.Close()
	url := hs.URL + "/healthz"

	code, m := probe(t, url)
	require.Equal(t, 200, code, "%v", m)
	assert.Equal(t, "ok", m["status"])
	code, _ = probe(t, "http://"+addr+"/healthz")
	require.Equal(t, 200, code, "the on-loop route answers while the loop turns")

	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get("http://" + addr + "/spin")
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	m = waitProbe(t, url, "healthz while /spin holds the loop", func(code int, m map[string]any) bool { return code == 503 })
	assert.Equal(t, "stalled", m["status"])
	assert.Equal(t, "GET /spin", m["task"])
	assert.NotZero(t, m["task_id"])
	assert.GreaterOrEqual(t, m["held_for_ms"], 50.0)
	release <- struct{}{}
	<-done
	waitProbe(t, url, "healthz after /spin returned", func(code int, m map[string]any) bool { return code == 200 })

	// A room's tick is a task named "room:<name>" (package loop/room): health names the room.
	stopped := make(chan struct{})
	s.Loop(0).Go("room:arena-7", func(*loop.Task) {
		<-release // blocks the loop thread
		close(stopped)
	})
	m = waitProbe(t, url, "healthz while a room's tick holds the loop", func(code int, m map[string]any) bool { return code == 503 })
	assert.Equal(t, "room:arena-7", m["task"])
	assert.Equal(t, "arena-7", m["room"])
	close(release)
	<-stopped
	waitProbe(t, url, "healthz after the tick returned", func(code int, m map[string]any) bool { return code == 200 })
}

// TestReadyzDraining: /readyz turns 503 naming "draining" once Shutdown begins while a
// long handler is in flight; /healthz stays 200 (the loop turns).
func TestReadyzDraining(t *testing.T) {
	var released atomic.Bool
	started := make(chan struct{})
	s := loop.New(looptest.Config(t, loop.Config{}))
	s.Handle("GET /long", func(c *loop.Ctx) {
		close(started)
		for !released.Load() {
			if c.Sleep(2*time.Millisecond) != nil {
				return
			}
		}
		c.String(200, "done")
	})
	h, err := health.New(s, health.Config{})
	require.NoError(t, err)
	errc := serveInBackground(t, s)
	hs := httptest.NewServer(h.Handler())
	defer hs.Close()
	code, m := probe(t, hs.URL+"/readyz")
	require.Equal(t, 200, code, "%v", m)
	assert.Equal(t, "ready", m["status"])
	assert.Empty(t, failing(m))

	got := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr().String() + "/long")
		if err != nil {
			got <- 0
			return
		}
		_ = resp.Body.Close()
		got <- resp.StatusCode
	}()
	<-started
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	m = waitProbe(t, hs.URL+"/readyz", "readyz during the drain", func(code int, m map[string]any) bool { return code == 503 })
	assert.Equal(t, "not_ready", m["status"])
	assert.Contains(t, failing(m), "draining")
	assert.Equal(t, true, m["draining"])
	code, m = probe(t, hs.URL+"/healthz")
	assert.Equal(t, 200, code, "the loop still turns while draining: %v", m)
	released.Store(true)
	assert.Equal(t, 200, <-got)
	require.NoError(t, <-shut)
	require.ErrorIs(t, <-errc, loop.ErrServerClosed)
	code, m = probe(t, hs.URL+"/readyz")
	assert.Equal(t, 503, code)
	assert.Contains(t, failing(m), "stopped")
}

// TestReadyzOffloadQueue: /readyz turns 503 naming "offload_queue" while more offloaded
// calls wait than Config.MaxOffloadQueue allows, and 200 once they have run.
func TestReadyzOffloadQueue(t *testing.T) {
	release := make(chan struct{})
	_, h, addr := startServer(t, loop.Config{Offload: offload.Config{Tokens: 1, NoLanes: true}}, health.Config{MaxOffloadQueue: 1}, func(s *loop.Server, _ *health.Checker) {
		s.Handle("GET /block", func(c *loop.Ctx) {
			_, _ = offload.Do(c, func(ctx context.Context) (int, error) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return 0, nil
			})
			c.String(200, "ok")
		})
	})
	hs := httptest.NewServer(h.Handler())
	defer hs.Close()
	url := hs.URL + "/readyz"
	code, m := probe(t, url)
	require.Equal(t, 200, code, "%v", m)

	var wg sync.WaitGroup
	for range 3 { // one runs, two wait
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get("http://" + addr + "/block")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}()
	}
	m = waitProbe(t, url, "readyz with 2 calls queued", func(code int, m map[string]any) bool { return code == 503 })
	assert.Equal(t, []string{"offload_queue"}, failing(m))
	assert.EqualValues(t, 2, m["offload_queue"])
	assert.EqualValues(t, 1, m["max_offload_queue"])
	close(release)
	wg.Wait()
	waitProbe(t, url, "readyz after the calls ran", func(code int, m map[string]any) bool { return code == 200 })
}

// TestReadyzLoopLag: a background task holding the loop past MaxLoopLag (the default,
// 100 ms: the test machine is loaded enough that a timer runs tens of milliseconds late at
// times) makes /readyz name "loop_lag"; it clears once the loop runs on time again.
func TestReadyzLoopLag(t *testing.T) {
	release := make(chan struct{})
	s, h, _ := startServer(t, loop.Config{}, health.Config{}, nil)
	hs := httptest.NewServer(h.Handler())
	defer hs.Close()
	url := hs.URL + "/readyz"
	s.Loop(0).Go("hog", func(*loop.Task) { <-release })
	m := waitProbe(t, url, "readyz while the loop is held", func(code int, m map[string]any) bool { return code == 503 })
	assert.Contains(t, failing(m), "loop_lag")
	close(release)
	waitProbe(t, url, "readyz once the loop runs on time", func(code int, m map[string]any) bool { return code == 200 })
}

// TestShardsHealthNamesTheHeldShard: with two loops, one held by a handler, /healthz is
// stalled naming that loop and the task; the other loop's report is ok.
func TestShardsHealthNamesTheHeldShard(t *testing.T) {
	const shards = 2
	var holder atomic.Int32
	holder.Store(-1)
	var release atomic.Bool
	_, h, addr := startServer(t, loop.Config{Shards: shards}, health.Config{StallAfter: 20 * time.Millisecond}, func(s *loop.Server, h *health.Checker) {
		h.Mount()
		s.Handle("GET /hold", func(c *loop.Ctx) {
			holder.Store(int32(c.Loop().Index()))
			for !release.Load() { // holds this loop: no park
			}
			c.String(200, "released")
		})
	})
	admin := httptest.NewServer(h.Handler())
	defer admin.Close()
	require.Eventually(t, func() bool { return h.Healthz().Status == "ok" }, 10*time.Second, time.Millisecond)
	require.Len(t, h.Healthz().Shards, shards)

	got := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/hold")
		if err != nil {
			got <- 0
			return
		}
		_ = resp.Body.Close()
		got <- resp.StatusCode
	}()
	defer release.Store(true) // never leave a loop held behind a failed assertion
	require.Eventually(t, func() bool { return holder.Load() >= 0 && h.Healthz().Status == "stalled" }, 10*time.Second, time.Millisecond)
	r := h.Healthz()
	assert.Equal(t, []int{int(holder.Load())}, r.StalledShards)
	assert.Equal(t, "GET /hold", r.Task)
	assert.Equal(t, "stalled", r.Shards[holder.Load()].Status)
	assert.Equal(t, "ok", r.Shards[1-holder.Load()].Status, "the other loop turns")
	code, page := probe(t, admin.URL+"/healthz")
	assert.Equal(t, 503, code)
	assert.Equal(t, []any{float64(holder.Load())}, page["stalled_shards"])

	release.Store(true)
	assert.Equal(t, 200, <-got)
	require.Eventually(t, func() bool { return h.Healthz().Status == "ok" }, 10*time.Second, time.Millisecond)
	code, _ = probe(t, admin.URL+"/healthz")
	assert.Equal(t, 200, code)
}

// TestShardsReadyzFailsWhileAnyShardDrains: a loop that holds its drain keeps /readyz
// failing (naming it) after the others stopped.
func TestShardsReadyzFailsWhileAnyShardDrains(t *testing.T) {
	const shards = 3
	s := loop.New(looptest.Config(t, loop.Config{Shards: shards}))
	h, err := health.New(s, health.Config{})
	require.NoError(t, err)
	h.Mount()
	errc := serveInBackground(t, s)
	require.Eventually(t, func() bool { return h.Readyz().Status == "ready" }, 10*time.Second, time.Millisecond)
	r := h.Readyz()
	require.Len(t, r.Shards, shards)
	assert.Empty(t, r.FailingShards)

	// Loop 2 holds its drain: it stays draining after the others stopped.
	released := make(chan func(), 1)
	require.NoError(t, s.Loop(2).Post(func() { released <- s.Loop(2).HoldDrain() }))
	release := <-released
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	require.Eventually(t, func() bool {
		r := h.Readyz()
		return r.Status == "not_ready" && slices.Contains(r.Failing, "draining") && slices.Contains(r.FailingShards, 2)
	}, 10*time.Second, time.Millisecond)
	assert.True(t, h.Readyz().Draining)
	require.NoError(t, s.Loop(2).Post(release))
	require.NoError(t, <-shut)
	require.ErrorIs(t, <-errc, loop.ErrServerClosed)
	assert.Equal(t, "stopped", h.Healthz().Status)
}
