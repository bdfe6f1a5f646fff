package ratelimit

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/invariants"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

// TestLimiterMiddlewareOnSeveralLoops shares one Limiter's Middleware between the routes of
// a 2-loop server (issue 27, item 7: 105 race reports). Each loop keeps its own bucket
// table, so the rate is per loop: with a bucket that does not refill during the test, a
// key gets exactly Burst requests through on each loop that saw more than Burst, whatever
// the other loop did. Run under -race it also shows the tables are not shared.
func TestLimiterMiddlewareOnSeveralLoops(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			const burst, conns, perConn = 3, 24, 4
			lim := New(Config{Rate: 0.001, Burst: burst}) // no refill within the test
			_, addr := startServer(t, loop.Config{Shards: 2, MultiThread: mt}, func(s *loop.Server) {
				s.Use(lim.Middleware(func(c *loop.Ctx) string { return "alice" }))
				s.Handle("GET /move", func(c *loop.Ctx) {
					c.String(200, strconv.Itoa(c.Loop().Index()))
				})
			})
			var mu sync.Mutex
			var allowed, seen [2]int // per loop index
			var wg sync.WaitGroup
			for range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cn := looptest.Dial(t, addr)
					for range perConn {
						resp, body := cn.Get("/move")
						mu.Lock()
						switch resp.StatusCode {
						case 200:
							i, err := strconv.Atoi(body)
							if assert.NoError(t, err, body) && assert.Less(t, i, 2) {
								allowed[i]++
								seen[i]++
							}
						case 429:
							// Which loop refused is not on the wire; count it below by difference.
						default:
							t.Errorf("status %d: %s", resp.StatusCode, body)
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			total := allowed[0] + allowed[1]
			t.Logf("allowed per loop %v (of %d requests)", allowed, conns*perConn)
			for i, n := range allowed {
				assert.LessOrEqual(t, n, burst, "loop %d let more than a burst through", i)
			}
			assert.Equal(t, 2*burst, total, "each loop lets exactly one burst through: the rate is per loop")
			require.NotNil(t, lim.Loop(), "the first request bound the limiter")
			var st Stats
			looptest.OnLoop(t, lim.Loop(), func() { st = lim.Stats() })
			assert.Equal(t, 1, st.Keys)
			assert.EqualValues(t, allowed[lim.Loop().Index()], st.Allowed, "Stats counts the owning loop's table")
		})
	}
}

// TestLimiterAllowTaskFromAnotherLoopPanics: a Limiter first used by a task of loop 0
// panics, naming both loops, when a task of loop 1 calls AllowTask, instead of racing.
func TestLimiterAllowTaskFromAnotherLoopPanics(t *testing.T) {
	lim := New(Config{Rate: 1, Burst: 1})
	s, _ := startServer(t, loop.Config{Shards: 2}, nil)
	run := func(i int) (ok bool, panicked any) {
		done := make(chan struct{})
		s.Loop(i).Post(func() {
			s.Loop(i).Go("limiter", func(tk *loop.Task) {
				defer close(done)
				defer func() { panicked = recover() }()
				ok, _ = lim.AllowTask(tk, "k")
			})
		})
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the task did not run")
		}
		return ok, panicked
	}
	ok, p := run(0)
	require.Nil(t, p)
	require.True(t, ok)
	ok, p = run(0)
	require.Nil(t, p)
	require.False(t, ok, "the same table: the burst is spent")
	_, p = run(1)
	require.NotNil(t, p, "a task of another loop must not reach the table")
	msg := fmt.Sprint(p)
	assert.Contains(t, msg, "loop 1")
	assert.Contains(t, msg, "loop 0")
	assert.Contains(t, msg, "Middleware")
}

// TestLimiterAllowOffItsLoopPanicsUnderInvariants: once bound to a loop (by Middleware or
// AllowTask), Allow called from another loop's handler panics under the invariants checks
// (go test -race) instead of racing; the handler's panic is answered 500.
func TestLimiterAllowOffItsLoopPanicsUnderInvariants(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the check runs under -race or -tags invariants; without it this test would race")
	}
	lim := New(Config{Rate: 1000, Burst: 1000})
	s, addr := startServer(t, loop.Config{Shards: 2}, func(s *loop.Server) {
		s.Handle("GET /allow", func(c *loop.Ctx) {
			lim.Allow("k", c.Loop().Now())
			c.String(200, "ok")
		})
	})
	bound := make(chan struct{})
	looptest.OnLoop(t, s.Loop(0), func() {
		s.Loop(0).Go("bind", func(tk *loop.Task) { lim.AllowTask(tk, "k"); close(bound) })
	})
	<-bound // the task runs in loop 0's pump after OnLoop returns; a request on loop 1 before it would use the limiter unbound
	// Connections land on either loop: those on loop 0 are answered 200, those on loop 1
	// 500 (the handler's panic), until one of each was seen.
	var codes = map[int]int{}
	for i := 0; i < 200 && (codes[200] == 0 || codes[500] == 0); i++ {
		resp, _ := looptest.Dial(t, addr).Get("/allow")
		codes[resp.StatusCode]++
	}
	assert.Positive(t, codes[200], "loop 0's handlers use their limiter: %v", codes)
	assert.Positive(t, codes[500], "loop 1's handlers panic on the check: %v", codes)
	assert.Len(t, codes, 2, "%v", codes)
}
