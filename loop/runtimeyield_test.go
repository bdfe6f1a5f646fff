package loop

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaybeYield: the loop yields at the first callback, then at the first callback that
// starts yieldEvery or more after the last yield, and never in between.
func TestMaybeYield(t *testing.T) {
	ms := int64(time.Millisecond)
	e := int64(yieldEvery)
	cases := []struct {
		name  string
		at    []int64 // callbacks' clock readings, in order
		yield []bool  // whether each one yields
	}{
		{name: "first callback", at: []int64{e}, yield: []bool{true}},
		{name: "dense callbacks", at: []int64{e, e + ms, e + 2*ms, e + e - 1, 2 * e, 2*e + 1},
			yield: []bool{true, false, false, false, true, false}},
		{name: "sparse callbacks", at: []int64{e, 3 * e, 5 * e}, yield: []bool{true, true, true}},
		{name: "measured from the last yield, not the last callback",
			at:    []int64{e, e + e/2, 2*e + e/4, 2 * e, 3 * e},
			yield: []bool{true, false, true, false, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			s := &Server{yield: func() { n++ }}
			for i, at := range tc.at {
				before := n
				s.maybeYield(at)
				assert.Equal(t, tc.yield[i], n > before, "callback %d at %v", i, time.Duration(at))
			}
		})
	}
}

// TestYieldFor: the loop yields with runtime.Gosched unless it is locked to its thread.
func TestYieldFor(t *testing.T) {
	assert.NotNil(t, yieldFor(Config{}))
	assert.Nil(t, yieldFor(Config{LockOSThread: true}))
	s := &Server{yieldAt: 0}
	s.maybeYield(int64(yieldEvery)) // no yield function: only the time is kept
	assert.Equal(t, int64(yieldEvery), s.yieldAt)
}

// TestBusyLoopYields: a loop kept busy by a client over a real socket yields to the Go
// scheduler, no two yields less than yieldEvery apart by the loop's clock, and every
// request is answered.
func TestBusyLoopYields(t *testing.T) {
	var (
		mu  sync.Mutex
		ats []int64 // the loop's clock at each yield
	)
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /", func(c *Ctx) { c.String(200, "ok") })
		s.yield = func() { // on the loop, inside busyEnd: yieldAt is this yield's reading
			mu.Lock()
			ats = append(ats, s.yieldAt)
			mu.Unlock()
		}
	})
	yields := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ats)
	}
	c := dial(t, addr)
	deadline := time.Now().Add(10 * time.Second)
	requests := 0
	for yields() < 4 && time.Now().Before(deadline) {
		resp, body := c.get("/")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "ok", body)
		requests++
	}
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(ats), 4, "yields after %d requests", requests)
	for i := 1; i < len(ats); i++ {
		assert.GreaterOrEqual(t, ats[i]-ats[i-1], int64(yieldEvery), "yields %d and %d", i-1, i)
	}
}
