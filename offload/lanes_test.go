package offload

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// completionLog records the order in which handlers finished.
type completionLog struct {
	mu    sync.Mutex
	order []string
}

func (l *completionLog) add(s string) {
	l.mu.Lock()
	l.order = append(l.order, s)
	l.mu.Unlock()
}

func (l *completionLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.order...)
}

// A flood of slow calls fills only the slow lane (even with fast tokens free), and fast
// calls keep completing while every slow call is still held.
func TestSlowFloodFillsOnlySlowLane(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 8, SlowTokens: 2, MaxKeyShare: 1, SlowKeys: []string{"GET /export/*"}})
		release := make(chan struct{})
		var log completionLog
		var handles []*handle
		for range 20 {
			handles = append(handles, hs.start(p, "GET /export/csv", func(c Caller) {
				_, err := Do(c, func(context.Context) (int, error) { <-release; return 0, nil })
				assert.NoError(t, err, "slow")
				log.add("slow")
			}))
		}
		waitUntil(t, "slow lane full", func() bool {
			st := p.Stats().Lanes[laneSlow]
			return st.InUse == 2 && st.Waiting == 18
		})
		st := p.Stats().Lanes[laneFast]
		require.Zero(t, st.InUse, "slow work took fast capacity")
		require.Zero(t, st.Waiting, "slow work took fast capacity")
		var fast []*handle
		for i := range 50 {
			fast = append(fast, hs.start(p, "GET /users/{id}", func(c Caller) {
				_, err := Do(c, func(context.Context) (int, error) { return i, nil })
				assert.NoError(t, err, "fast")
				log.add("fast")
			}))
		}
		for _, h := range fast {
			h.wait(t)
		}
		close(release)
		for _, h := range handles {
			h.wait(t)
		}
		var want []string
		for i := range 70 {
			want = append(want, map[bool]string{true: "fast", false: "slow"}[i < 50])
		}
		require.Equal(t, want, log.get(), "50 fast completions, then 20 slow")
		all := p.Stats()
		assert.EqualValues(t, 50, all.Lanes[laneFast].Completed)
		assert.EqualValues(t, 20, all.Lanes[laneSlow].Completed)
		k, _ := all.key("GET /export/csv")
		assert.True(t, k.Seeded, "%+v", k)
		assert.Equal(t, "slow", k.Lane, "%+v", k)
	})
}

// Without lanes, the same flood makes fast calls wait behind slow ones.
func TestNoLanesFastWaitsBehindSlow(t *testing.T) {
	p := newPool(t, Config{Tokens: 4, NoLanes: true, MaxKeyShare: 1, SlowKeys: []string{"GET /export"}})
	hs := goHarness{}
	release := make(chan struct{})
	var slow []*handle
	for range 6 {
		slow = append(slow, hs.start(p, "GET /export", func(c Caller) {
			Do(c, func(context.Context) (int, error) { <-release; return 0, nil })
		}))
	}
	waitUntil(t, "pool full", func() bool { st := p.Stats().Lanes[laneFast]; return st.InUse == 4 && st.Waiting == 2 })
	fast := hs.start(p, "GET /users/{id}", func(c Caller) {
		Do(c, func(context.Context) (int, error) { return 0, nil })
	})
	waitUntil(t, "fast call queued", func() bool { return p.Stats().Lanes[laneFast].Waiting == 3 })
	require.False(t, fast.finished(), "fast call finished while every token was held by slow calls")
	st := p.Stats()
	assert.False(t, st.LanesEnabled)
	assert.Zero(t, st.Lanes[laneSlow].Tokens)
	close(release)
	fast.wait(t)
	for _, h := range slow {
		h.wait(t)
	}
}

// A route never seen before that runs long is marked slow while its first calls are still
// running (real timers), and new calls of it go to the slow lane.
func TestMidFlightLearning(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 4, SlowTokens: 1, MaxKeyShare: 1, PromoteAfter: 20 * time.Millisecond, DemoteBelow: 5 * time.Millisecond})
		release := make(chan struct{})
		var handles []*handle
		start := func() {
			handles = append(handles, hs.start(p, "GET /report", func(c Caller) {
				Do(c, func(context.Context) (int, error) { <-release; return 0, nil })
			}))
		}
		start()
		start()
		waitUntil(t, "route learned slow", func() bool { return laneOf(p, "GET /report") == laneSlow })
		st := p.Stats()
		k, _ := st.key("GET /report")
		assert.EqualValues(t, 1, k.Midway, "learned mid-flight")
		assert.GreaterOrEqual(t, k.Estimate, 20*time.Millisecond)
		assert.Zero(t, st.Lanes[laneFast].Completed, "learned before any call completed")
		assert.Equal(t, 2, st.Lanes[laneFast].InUse+st.Lanes[laneSlow].InUse, "the first 2 still running")
		before := st.Lanes[laneSlow].Started
		start() // a new call goes to the slow lane
		waitUntil(t, "new call in slow lane", func() bool { return p.Stats().Lanes[laneSlow].Started == before+1 })
		close(release)
		for _, h := range handles {
			h.wait(t)
		}
	})
}

// fakeTimers replaces the pool's mid-flight timers: the test fires them.
type fakeTimers struct {
	mu sync.Mutex
	fs []*fakeTimer
}

type fakeTimer struct {
	f       func()
	stopped bool
}

func (ft *fakeTimer) Stop() bool { ft.stopped = true; return true }

func (ts *fakeTimers) afterFunc(d time.Duration, f func()) stopper {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := &fakeTimer{f: f}
	ts.fs = append(ts.fs, t)
	return t
}

// fireFirst fires the first timer as its deadline would (the pool mutex is not held).
func (ts *fakeTimers) fireFirst() {
	ts.mu.Lock()
	f := ts.fs[0].f
	ts.mu.Unlock()
	f()
}

// fire fires timer i (the pool mutex is not held).
func (ts *fakeTimers) fire(i int) {
	ts.mu.Lock()
	f := ts.fs[i].f
	ts.mu.Unlock()
	f()
}

// all returns the timers armed so far.
func (ts *fakeTimers) all() []*fakeTimer {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]*fakeTimer(nil), ts.fs...)
}

// When a route flips to slow mid-flight, its calls queued in the fast lane move to the
// slow lane; the calls already running keep their fast tokens.
func TestMidFlightMovesQueuedCalls(t *testing.T) {
	p := newPool(t, Config{Tokens: 4, SlowTokens: 1, MaxKeyShare: 1})
	var timers fakeTimers
	p.afterFunc = timers.afterFunc
	hs := goHarness{}
	release := make(chan struct{})
	var handles []*handle
	for i := range 5 {
		handles = append(handles, hs.start(p, "GET /report", func(c Caller) {
			Do(c, func(context.Context) (int, error) { <-release; return 0, nil })
		}))
		waitUntil(t, "admitted", func() bool {
			st := p.Stats().Lanes[laneFast]
			return st.InUse+st.Waiting == i+1
		})
	}
	timers.fireFirst()
	st := p.Stats()
	require.Equal(t, laneSlow, laneOf(p, "GET /report"), "learned mid-flight")
	require.Zero(t, st.Lanes[laneFast].Completed)
	f, s := st.Lanes[laneFast], st.Lanes[laneSlow]
	assert.Equal(t, 3, f.InUse)
	assert.Zero(t, f.Waiting)
	assert.Equal(t, 1, s.InUse)
	assert.Equal(t, 1, s.Waiting)
	assert.EqualValues(t, 2, s.Migrated)
	close(release)
	for _, h := range handles {
		h.wait(t)
	}
}

// predictorPool returns a pool on a fake clock whose mid-flight timer (real time) cannot
// fire during the test: durations are simulated by advancing the clock inside functions.
func predictorPool(t *testing.T) (*Pool, *fakeClock) {
	clk := newFakeClock()
	p := newPool(t, Config{Tokens: 4, SlowTokens: 1, PromoteAfter: 10 * time.Second,
		DemoteBelow: 2 * time.Second, HalfLife: time.Minute})
	p.now = clk.Now
	return p, clk
}

// run does one call of key whose function "takes" d on the fake clock, and returns the
// lane it ran in.
func runFor(t *testing.T, p *Pool, clk *fakeClock, key string, d time.Duration) lane {
	t.Helper()
	before := p.Stats().Lanes
	_, err := Do(NewGoCaller(context.Background(), p, key), func(context.Context) (int, error) {
		clk.Advance(d)
		return 0, nil
	})
	require.NoError(t, err)
	after := p.Stats().Lanes
	if after[laneSlow].Started > before[laneSlow].Started {
		return laneSlow
	}
	return laneFast
}

func laneOf(p *Pool, key string) lane {
	st := p.Stats()
	k, _ := st.key(key)
	if k.Lane == laneSlow.String() {
		return laneSlow
	}
	return laneFast
}

// Decay: a slow route that is not called drifts back to the fast lane.
func TestDecayReturnsRouteToFast(t *testing.T) {
	p, clk := predictorPool(t)
	require.Equal(t, laneFast, runFor(t, p, clk, "GET /r", time.Minute), "an unknown route runs fast")
	// One 60 s sample: estimate 15 s > 10 s: slow.
	require.Equal(t, laneSlow, laneOf(p, "GET /r"), "after a 60 s call")
	require.Equal(t, laneSlow, runFor(t, p, clk, "GET /r", 0))
	// The estimate is about 11 s now; after 3 half-lives it is about 1.4 s < 2 s.
	clk.Advance(3 * time.Minute)
	require.Equal(t, laneFast, laneOf(p, "GET /r"), "after 3 half-lives")
	require.Equal(t, laneFast, runFor(t, p, clk, "GET /r", 0))
}

// Hysteresis: a slow route whose calls become fast stays slow until its estimate falls
// below DemoteBelow, not merely below PromoteAfter.
func TestHysteresis(t *testing.T) {
	p, clk := predictorPool(t)
	runFor(t, p, clk, "GET /h", time.Minute) // estimate 15 s: slow
	var lanes []lane
	for range 12 {
		lanes = append(lanes, runFor(t, p, clk, "GET /h", 0)) // each fast sample: x0.75
	}
	// Estimates after each sample: 11.25 8.4 6.3 4.7 3.6 2.7 2.0 1.5 ... (s): the run
	// that brings it under 2 s is the 8th; the 9th runs fast.
	var want []lane
	for i := range 12 {
		want = append(want, map[bool]lane{true: laneSlow, false: laneFast}[i < 8])
	}
	require.Equal(t, want, lanes)
	k, _ := func() (KeyStats, bool) { st := p.Stats(); return st.key("GET /h") }()
	assert.EqualValues(t, 2, k.Flips)
	assert.EqualValues(t, 13, k.Calls)
	// And back: a fast route is promoted only above PromoteAfter.
	runFor(t, p, clk, "GET /h", 30*time.Second) // estimate ~8 s: between thresholds
	require.Equal(t, laneFast, laneOf(p, "GET /h"), "promoted below PromoteAfter")
	runFor(t, p, clk, "GET /h", 30*time.Second) // ~13.5 s
	require.Equal(t, laneSlow, laneOf(p, "GET /h"), "not promoted above PromoteAfter")
}

// The LRU bound holds under 100,000 distinct keys.
func TestLRUBound(t *testing.T) {
	p := newPool(t, Config{Tokens: 2})
	now := time.Now()
	for i := range 100_000 {
		p.mu.Lock()
		p.pred.get(fmt.Sprint("GET /k/", i), now)
		p.mu.Unlock()
	}
	st := p.Stats()
	n := 0
	for e := p.pred.head; e != nil; e = e.next {
		n++
	}
	assert.Equal(t, defaultMaxKeys, st.KeysTotal)
	assert.Len(t, p.pred.m, defaultMaxKeys)
	assert.Equal(t, defaultMaxKeys, n, "LRU list length")
	assert.EqualValues(t, 100_000-defaultMaxKeys, st.KeysEvicted)
	assert.Len(t, st.Keys, statsKeys)
	_, ok := st.key("GET /k/99999")
	assert.True(t, ok, "most recent key evicted")
	_, ok = st.key("GET /k/0")
	assert.False(t, ok, "oldest key kept")
	// Through Do, with a small bound, and a slow route kept warm survives the churn.
	p2 := newPool(t, Config{Tokens: 2, MaxKeys: 50, SlowKeys: []string{"GET /slow"}})
	for i := range 2_000 {
		key := fmt.Sprint("GET /d/", i)
		if i%10 == 0 {
			key = "GET /slow"
		}
		_, err := Do(NewGoCaller(context.Background(), p2, key), func(context.Context) (int, error) { return 0, nil })
		require.NoError(t, err)
	}
	st = p2.Stats()
	assert.LessOrEqual(t, len(st.Keys), 50)
	k, ok := st.key("GET /slow")
	require.True(t, ok, "warm slow key lost")
	assert.Equal(t, "slow", k.Lane)
}

// A call cut short by cancellation is a lower bound of the route's run time: it must not
// drag a slow route's estimate down (a flood of cancelled slow calls would demote it).
func TestCensoredSampleKeepsEstimate(t *testing.T) {
	p, clk := predictorPool(t)
	runFor(t, p, clk, "GET /c", time.Minute) // estimate 15 s
	running, hold := make(chan struct{}), make(chan struct{})
	var err error
	h := goHarness{}.start(p, "GET /c", func(c Caller) {
		_, err = Do(c, func(fctx context.Context) (int, error) {
			close(running)
			<-fctx.Done()
			<-hold
			return 0, nil
		})
	})
	<-running
	h.cancel(errGone)
	h.wait(t)
	close(hold)
	require.ErrorIs(t, err, errGone)
	waitUntil(t, "function returned", func() bool { return p.Stats().Lanes[laneSlow].InUse == 0 })
	st := p.Stats()
	k, _ := st.key("GET /c")
	assert.Equal(t, 15*time.Second, k.Estimate, "estimate after a cancelled call")
	assert.Equal(t, "slow", k.Lane)
}

// Stats reports the most recent routes and every slow one, even one not used lately.
func TestStatsKeysIncludeSlowRoutes(t *testing.T) {
	p := newPool(t, Config{Tokens: 2, MaxKeys: 1000, SlowKeys: []string{"GET /seeded"}})
	now := time.Now()
	p.mu.Lock()
	p.pred.get("GET /seeded", now)
	for i := range 900 {
		p.pred.get(fmt.Sprint("GET /k/", i), now)
	}
	p.mu.Unlock()
	st := p.Stats()
	k, ok := st.key("GET /seeded")
	require.True(t, ok, "slow route missing")
	assert.Equal(t, "slow", k.Lane)
	assert.True(t, k.Seeded)
	assert.Equal(t, "GET /seeded", st.Keys[0].Key, "the slow route comes first")
	assert.Len(t, st.Keys, statsKeys+1)
	assert.Equal(t, 901, st.KeysTotal)
}
