package loop

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/offload"
)

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

func TestHealthConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Health: HealthConfig{StallAfter: time.Microsecond}}, "Config.Health.StallAfter"},
		{Config{Health: HealthConfig{MaxUtilisation: 1.5}}, "Config.Health.MaxUtilisation"},
	} {
		err := c.cfg.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
	}
	require.NoError(t, Config{Health: HealthConfig{StallAfter: -1, MaxLoopLag: -1, MaxUtilisation: -1, MaxOffloadQueue: -1}}.Validate())
	d := HealthConfig{}.withDefaults(offload.Config{})
	assert.Equal(t, HealthConfig{StallAfter: DefaultHealthStallAfter, MaxLoopLag: DefaultHealthMaxLoopLag,
		MaxUtilisation: DefaultHealthMaxUtilisation, MaxOffloadQueue: offload.DefaultMaxWaiting / 2}, d)
}

// TestHealthzNamesTheTaskHoldingTheLoop: a handler and then a room's tick block the loop
// thread; the off-loop /healthz turns 503 naming each (and the room), and 200 again once
// the loop turns. Over real sockets.
func TestHealthzNamesTheTaskHoldingTheLoop(t *testing.T) {
	release := make(chan struct{})
	s, addr := startServer(t, Config{Health: HealthConfig{StallAfter: 50 * time.Millisecond}}, func(s *Server) {
		s.HandleHealth()
		s.Handle("GET /spin", func(c *Ctx) { <-release }) // blocks the loop thread on purpose
	})
	hs := httptest.NewServer(s.HealthHandler())
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

	var blocked atomic.Bool
	blocked.Store(true)
	room := newRoomT(t, s, RoomConfig[int]{Name: "arena-7", Period: 20 * time.Millisecond, Tick: func(*Room[int], *Tick[int]) {
		if blocked.Load() {
			<-release // one tick blocks the loop thread
		}
	}})
	m = waitProbe(t, url, "healthz while a room's tick holds the loop", func(code int, m map[string]any) bool { return code == 503 })
	assert.Equal(t, "room:arena-7", m["task"])
	assert.Equal(t, "arena-7", m["room"])
	blocked.Store(false)
	close(release)
	waitProbe(t, url, "healthz after the tick returned", func(code int, m map[string]any) bool { return code == 200 })
	room.Stop()
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

// TestReadyzDraining: /readyz turns 503 naming "draining" once Shutdown begins while a
// long handler is in flight; /healthz stays 200 (the loop turns).
func TestReadyzDraining(t *testing.T) {
	var released atomic.Bool
	started := make(chan struct{})
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	s.Handle("GET /long", func(c *Ctx) {
		close(started)
		for !released.Load() {
			if c.Sleep(2*time.Millisecond) != nil {
				return
			}
		}
		c.String(200, "done")
	})
	errc := serveInBackground(t, s)
	hs := httptest.NewServer(s.HealthHandler())
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
	require.ErrorIs(t, <-errc, ErrServerClosed)
	code, m = probe(t, hs.URL+"/readyz")
	assert.Equal(t, 503, code)
	assert.Contains(t, failing(m), "stopped")
}

// TestReadyzOffloadQueue: /readyz turns 503 naming "offload_queue" while more offloaded
// calls wait than Config.Health.MaxOffloadQueue allows, and 200 once they have run.
func TestReadyzOffloadQueue(t *testing.T) {
	release := make(chan struct{})
	s, addr := startServer(t, Config{
		Offload: offload.Config{Tokens: 1, NoLanes: true},
		Health:  HealthConfig{MaxOffloadQueue: 1},
	}, func(s *Server) {
		s.Handle("GET /block", func(c *Ctx) {
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
	hs := httptest.NewServer(s.HealthHandler())
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
	s, _ := startServer(t, Config{}, nil)
	hs := httptest.NewServer(s.HealthHandler())
	defer hs.Close()
	url := hs.URL + "/readyz"
	s.Go("hog", func(*Task) { <-release })
	m := waitProbe(t, url, "readyz while the loop is held", func(code int, m map[string]any) bool { return code == 503 })
	assert.Contains(t, failing(m), "loop_lag")
	close(release)
	waitProbe(t, url, "readyz once the loop runs on time", func(code int, m map[string]any) bool { return code == 200 })
}
