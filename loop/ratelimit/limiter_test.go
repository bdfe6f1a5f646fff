package ratelimit

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Rate: 0, Burst: 1}, "Config.Rate"},
		{Config{Rate: -1, Burst: 1}, "Config.Rate"},
		{Config{Rate: 1, Burst: 0}, "Config.Burst"},
		{Config{Rate: 1, Burst: 1, MaxKeys: -1}, "Config.MaxKeys"},
		{Config{Rate: 1, Burst: 1, Idle: -time.Second}, "Config.Idle"},
		{Config{Rate: 1, Burst: 10, Idle: time.Second}, "Config.Idle"},
	} {
		err := c.cfg.Validate()
		require.Error(t, err, "%+v", c.cfg)
		assert.Contains(t, err.Error(), c.want)
	}
	require.NoError(t, Config{Rate: 1, Burst: 10, Idle: 10 * time.Second}.Validate())
	require.NoError(t, Config{Rate: 0.5, Burst: 1}.Validate())
}

func TestLimiterBucket(t *testing.T) {
	l := New(Config{Rate: 10, Burst: 3})
	now := time.Now()
	for i := range 3 {
		ok, _ := l.Allow("p", now)
		require.True(t, ok, "burst token %d", i)
	}
	ok, wait := l.Allow("p", now)
	require.False(t, ok)
	assert.Equal(t, 100*time.Millisecond, wait, "one token at 10/s")
	ok, _ = l.Allow("p", now.Add(wait-time.Millisecond))
	require.False(t, ok, "just before the token is due")
	ok, _ = l.Allow("p", now.Add(wait))
	require.True(t, ok, "the token is due after retryAfter")
	ok, _ = l.Allow("other", now)
	require.True(t, ok, "keys have their own buckets")
	ok, _ = l.Allow("p", now.Add(time.Hour))
	require.True(t, ok)
	st := l.Stats()
	assert.Equal(t, Stats{Keys: 2, Allowed: 6, Refused: 2}, st)
}

func TestRetryAfterSeconds(t *testing.T) {
	assert.Equal(t, 1, RetryAfterSeconds(0))
	assert.Equal(t, 1, RetryAfterSeconds(50*time.Millisecond))
	assert.Equal(t, 1, RetryAfterSeconds(time.Second))
	assert.Equal(t, 2, RetryAfterSeconds(time.Second+time.Nanosecond))
}

// TestLimiterKeyTableBound feeds 100,000 distinct keys to a limiter of 1,000: the table
// stays at its bound, the least recently used keys go first, and a key in steady use is
// never evicted.
func TestLimiterKeyTableBound(t *testing.T) {
	l := New(Config{Rate: 1, Burst: 1, MaxKeys: 1000, Idle: time.Hour})
	now := time.Now()
	ok, _ := l.Allow("hot", now)
	require.True(t, ok)
	for i := range 100_000 {
		l.Allow("k"+strconv.Itoa(i), now)
		require.LessOrEqual(t, l.Len(), 1000)
		if i%100 == 0 {
			ok, _ := l.Allow("hot", now)
			require.False(t, ok, "the hot key keeps its empty bucket (not evicted) at key %d", i)
		}
	}
	st := l.Stats()
	assert.Equal(t, 1000, st.Keys)
	assert.Equal(t, len(l.idx), len(l.ents)-freeLen(l), "every slot is in the table or free")
	assert.EqualValues(t, 100_000+1-1000, st.Evicted)
	_, present := l.idx["k99999"]
	assert.True(t, present, "the newest key is kept")
	_, present = l.idx["k0"]
	assert.False(t, present, "the oldest key was evicted")
}

func freeLen(l *Limiter) int {
	n := 0
	for i := l.free; i >= 0; i = l.ents[i].next {
		n++
	}
	return n
}

// TestLimiterIdleExpiry: keys unused for Idle are dropped as new keys arrive.
func TestLimiterIdleExpiry(t *testing.T) {
	l := New(Config{Rate: 10, Burst: 1}) // Idle: 100 ms
	now := time.Now()
	for i := range 10 {
		l.Allow("k"+strconv.Itoa(i), now)
	}
	require.Equal(t, 10, l.Len())
	later := now.Add(time.Second)
	for i := range 10 {
		l.Allow("n"+strconv.Itoa(i), later)
	}
	assert.Equal(t, 10, l.Len(), "each new key dropped idle ones")
	assert.EqualValues(t, 10, l.Stats().Expired)
	assert.Zero(t, l.Stats().Evicted)
}

// TestLimiterMiddleware429 limits a route over a real socket: past the burst a request
// gets 429 with a Retry-After in whole seconds, and a retry after that long succeeds.
func TestLimiterMiddleware429(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			lim := New(Config{Rate: 20, Burst: 2})
			_, addr := startServer(t, loop.Config{MultiThread: mt}, func(s *loop.Server) {
				g := s.Group("/api", lim.Middleware(func(c *loop.Ctx) string { return c.Header("X-Player") }))
				g.Handle("GET /move", func(c *loop.Ctx) { c.String(200, "ok") })
			})
			get := func(player string) *http.Response {
				req, err := http.NewRequest("GET", "http://"+addr+"/api/move", nil)
				require.NoError(t, err)
				req.Header.Set("X-Player", player)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				require.NoError(t, resp.Body.Close())
				return resp
			}
			// The burst, then refusals: the bucket refills at 20/s, so a request is refused
			// unless 50 ms passed since the last token; send until one is.
			var refused *http.Response
			for range 100 {
				if r := get("alice"); r.StatusCode == 429 {
					refused = r
					break
				}
			}
			require.NotNil(t, refused, "no 429 in 100 requests at a burst of 2")
			ra, err := strconv.Atoi(refused.Header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After %q", refused.Header.Get("Retry-After"))
			assert.Equal(t, 1, ra, "a 50 ms wait rounds up to one second")
			assert.Equal(t, 200, get("bob").StatusCode, "another key is not limited")
			time.Sleep(time.Duration(ra) * time.Second) // the test is of the header's promise: wait what it says
			assert.Equal(t, 200, get("alice").StatusCode, "a retry after Retry-After succeeds")
		})
	}
}

// TestLimiterFromTask uses the limiter from a background task with the task's clock.
func TestLimiterFromTask(t *testing.T) {
	lim := New(Config{Rate: 1, Burst: 1})
	res := make(chan [2]bool, 1)
	s, _ := startServer(t, loop.Config{}, nil)
	s.Loop(0).Go("room:test", func(tk *loop.Task) {
		a, _ := lim.Allow("input", tk.Loop().Now())
		b, _ := lim.Allow("input", tk.Loop().Now())
		res <- [2]bool{a, b}
	})
	select {
	case r := <-res:
		assert.Equal(t, [2]bool{true, false}, r)
	case <-time.After(10 * time.Second):
		t.Fatal("task did not run")
	}
}

// BenchmarkLimiterAllow: a known key costs no allocation.
func BenchmarkLimiterAllow(b *testing.B) {
	l := New(Config{Rate: 1e9, Burst: 1000})
	keys := make([]string, 1024)
	now := time.Now()
	for i := range keys {
		keys[i] = "player-" + strconv.Itoa(i)
		l.Allow(keys[i], now)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		l.Allow(keys[i&1023], now.Add(time.Duration(i)))
	}
}

func TestLimiterAllowDoesNotAllocate(t *testing.T) {
	l := New(Config{Rate: 1e9, Burst: 1000})
	now := time.Now()
	l.Allow("a", now)
	l.Allow("b", now)
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		l.Allow([]string{"a", "b"}[i&1], now.Add(time.Duration(i)))
	})
	assert.Zero(t, allocs)
}

// startServer starts a server with setup's routes on a free loopback port; it is shut down
// when the test ends.
func startServer(t *testing.T, cfg loop.Config, setup func(s *loop.Server)) (*loop.Server, string) {
	t.Helper()
	s := loop.New(looptest.Config(t, cfg))
	if setup != nil {
		setup(s)
	}
	url := looptest.Start(t, s)
	return s, strings.TrimPrefix(url, "http://")
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// TestByAddressBehindAProxy: behind a trusted proxy the limiter keyed by ByAddress limits
// each client the proxy names, not the proxy.
func TestByAddressBehindAProxy(t *testing.T) {
	lim := New(Config{Rate: 0.001, Burst: 1})
	_, addr := startServer(t, loop.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, func(s *loop.Server) {
		s.Handle("GET /x", lim.Middleware(ByAddress)(func(c *loop.Ctx) { c.String(200, "ok") }))
	})
	get := func(client string) int {
		req, err := http.NewRequest("GET", "http://"+addr+"/x", nil)
		require.NoError(t, err)
		req.Header.Set("X-Forwarded-For", client)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	assert.Equal(t, 200, get("203.0.113.1"))
	assert.Equal(t, 429, get("203.0.113.1"), "the same client, its bucket empty")
	assert.Equal(t, 200, get("203.0.113.2"), "another client behind the same proxy has its own bucket")
}
