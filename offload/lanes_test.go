package offload

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
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
				if _, err := Do(c, func(context.Context) (int, error) { <-release; return 0, nil }); err != nil {
					t.Errorf("slow: %v", err)
				}
				log.add("slow")
			}))
		}
		waitUntil(t, "slow lane full", func() bool {
			st := p.Stats().Lanes[LaneSlow]
			return st.InUse == 2 && st.Waiting == 18
		})
		if st := p.Stats().Lanes[LaneFast]; st.InUse != 0 || st.Waiting != 0 {
			t.Fatalf("slow work took fast capacity: %+v", st)
		}
		var fast []*handle
		for i := range 50 {
			fast = append(fast, hs.start(p, "GET /users/{id}", func(c Caller) {
				if _, err := Do(c, func(context.Context) (int, error) { return i, nil }); err != nil {
					t.Errorf("fast: %v", err)
				}
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
		order := log.get()
		for i, s := range order {
			if want := map[bool]string{true: "fast", false: "slow"}[i < 50]; s != want {
				t.Fatalf("completion #%d was %s; want 50 fast then 20 slow: %v", i, s, order)
			}
		}
		st := p.Stats()
		if st.Lanes[LaneFast].Completed != 50 || st.Lanes[LaneSlow].Completed != 20 {
			t.Fatalf("completed fast %d slow %d", st.Lanes[LaneFast].Completed, st.Lanes[LaneSlow].Completed)
		}
		if k, _ := st.Key("GET /export/csv"); !k.Seeded || k.Lane != LaneSlow {
			t.Fatalf("seeded key stats %+v", k)
		}
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
	waitUntil(t, "pool full", func() bool { st := p.Stats().Lanes[LaneFast]; return st.InUse == 4 && st.Waiting == 2 })
	fast := hs.start(p, "GET /users/{id}", func(c Caller) {
		Do(c, func(context.Context) (int, error) { return 0, nil })
	})
	waitUntil(t, "fast call queued", func() bool { return p.Stats().Lanes[LaneFast].Waiting == 3 })
	if fast.finished() {
		t.Fatal("fast call finished while every token was held by slow calls")
	}
	if st := p.Stats(); st.LanesEnabled || st.Lanes[LaneSlow].Tokens != 0 {
		t.Fatalf("lanes off: %+v", st)
	}
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
		waitUntil(t, "route learned slow", func() bool { return laneOf(p, "GET /report") == LaneSlow })
		st := p.Stats()
		k, _ := st.Key("GET /report")
		if k.Midway != 1 || k.Estimate < 20*time.Millisecond || st.Lanes[LaneFast].Completed != 0 {
			t.Fatalf("learned slow with %d completions (%+v): not mid-flight", st.Lanes[LaneFast].Completed, k)
		}
		if n := st.Lanes[LaneFast].InUse + st.Lanes[LaneSlow].InUse; n != 2 {
			t.Fatalf("%d running; want the first 2 still running", n)
		}
		before := st.Lanes[LaneSlow].Started
		start() // a new call goes to the slow lane
		waitUntil(t, "new call in slow lane", func() bool { return p.Stats().Lanes[LaneSlow].Started == before+1 })
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
			st := p.Stats().Lanes[LaneFast]
			return st.InUse+st.Waiting == i+1
		})
	}
	timers.fireFirst()
	st := p.Stats()
	if laneOf(p, "GET /report") != LaneSlow || st.Lanes[LaneFast].Completed != 0 {
		t.Fatal("not learned mid-flight")
	}
	if f, s := st.Lanes[LaneFast], st.Lanes[LaneSlow]; f.InUse != 3 || f.Waiting != 0 || s.InUse != 1 || s.Waiting != 1 || s.Migrated != 2 {
		t.Fatalf("after learning: fast %+v slow %+v", f, s)
	}
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
func runFor(t *testing.T, p *Pool, clk *fakeClock, key string, d time.Duration) Lane {
	t.Helper()
	before := p.Stats().Lanes
	_, err := Do(NewGoCaller(context.Background(), p, key), func(context.Context) (int, error) {
		clk.Advance(d)
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after := p.Stats().Lanes
	if after[LaneSlow].Started > before[LaneSlow].Started {
		return LaneSlow
	}
	return LaneFast
}

func laneOf(p *Pool, key string) Lane {
	st := p.Stats()
	k, _ := st.Key(key)
	return k.Lane
}

// Decay: a slow route that is not called drifts back to the fast lane.
func TestDecayReturnsRouteToFast(t *testing.T) {
	p, clk := predictorPool(t)
	if l := runFor(t, p, clk, "GET /r", time.Minute); l != LaneFast {
		t.Fatalf("unknown route ran in %v; want fast", l)
	}
	// One 60 s sample: estimate 15 s > 10 s: slow.
	if laneOf(p, "GET /r") != LaneSlow {
		t.Fatalf("after a 60 s call: %+v", p.Stats().Keys)
	}
	if l := runFor(t, p, clk, "GET /r", 0); l != LaneSlow {
		t.Fatalf("slow route ran in %v", l)
	}
	// The estimate is about 11 s now; after 3 half-lives it is about 1.4 s < 2 s.
	clk.Advance(3 * time.Minute)
	if laneOf(p, "GET /r") != LaneFast {
		t.Fatalf("after 3 half-lives: %+v", p.Stats().Keys)
	}
	if l := runFor(t, p, clk, "GET /r", 0); l != LaneFast {
		t.Fatalf("decayed route ran in %v", l)
	}
}

// Hysteresis: a slow route whose calls become fast stays slow until its estimate falls
// below DemoteBelow, not merely below PromoteAfter.
func TestHysteresis(t *testing.T) {
	p, clk := predictorPool(t)
	runFor(t, p, clk, "GET /h", time.Minute) // estimate 15 s: slow
	var lanes []Lane
	for range 12 {
		lanes = append(lanes, runFor(t, p, clk, "GET /h", 0)) // each fast sample: x0.75
	}
	// Estimates after each sample: 11.25 8.4 6.3 4.7 3.6 2.7 2.0 1.5 ... (s): the run
	// that brings it under 2 s is the 8th; the 9th runs fast.
	for i, l := range lanes {
		want := LaneSlow
		if i >= 8 {
			want = LaneFast
		}
		if l != want {
			t.Fatalf("run %d in %v; want %v (lanes %v)", i, l, want, lanes)
		}
	}
	k, _ := func() (KeyStats, bool) { st := p.Stats(); return st.Key("GET /h") }()
	if k.Flips != 2 || k.Calls != 13 {
		t.Fatalf("key stats %+v", k)
	}
	// And back: a fast route is promoted only above PromoteAfter.
	runFor(t, p, clk, "GET /h", 30*time.Second) // estimate ~8 s: between thresholds
	if laneOf(p, "GET /h") != LaneFast {
		t.Fatal("promoted below PromoteAfter")
	}
	runFor(t, p, clk, "GET /h", 30*time.Second) // ~13.5 s
	if laneOf(p, "GET /h") != LaneSlow {
		t.Fatal("not promoted above PromoteAfter")
	}
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
	if st.KeysTotal != DefaultMaxKeys || len(p.pred.m) != DefaultMaxKeys || n != DefaultMaxKeys ||
		st.KeysEvicted != 100_000-DefaultMaxKeys || len(st.Keys) != StatsKeys {
		t.Fatalf("keys %d (reported %d) map %d list %d evicted %d", st.KeysTotal, len(st.Keys), len(p.pred.m), n, st.KeysEvicted)
	}
	if _, ok := st.Key("GET /k/99999"); !ok {
		t.Fatal("most recent key evicted")
	}
	if _, ok := st.Key("GET /k/0"); ok {
		t.Fatal("oldest key kept")
	}
	// Through Do, with a small bound, and a slow route kept warm survives the churn.
	p2 := newPool(t, Config{Tokens: 2, MaxKeys: 50, SlowKeys: []string{"GET /slow"}})
	for i := range 2_000 {
		key := fmt.Sprint("GET /d/", i)
		if i%10 == 0 {
			key = "GET /slow"
		}
		if _, err := Do(NewGoCaller(context.Background(), p2, key), func(context.Context) (int, error) { return 0, nil }); err != nil {
			t.Fatal(err)
		}
	}
	st = p2.Stats()
	if len(st.Keys) > 50 {
		t.Fatalf("%d keys with MaxKeys 50", len(st.Keys))
	}
	if k, ok := st.Key("GET /slow"); !ok || k.Lane != LaneSlow {
		t.Fatalf("warm slow key lost: %+v %v", k, ok)
	}
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
	if err != errGone {
		t.Fatalf("Do = %v", err)
	}
	waitUntil(t, "function returned", func() bool { return p.Stats().Lanes[LaneSlow].InUse == 0 })
	st := p.Stats()
	if k, _ := st.Key("GET /c"); k.Estimate != 15*time.Second || k.Lane != LaneSlow {
		t.Fatalf("estimate after a cancelled call: %+v", k)
	}
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
	if k, ok := st.Key("GET /seeded"); !ok || k.Lane != LaneSlow || !k.Seeded || st.Keys[0].Key != "GET /seeded" {
		t.Fatalf("slow route missing or not first: %+v %v", k, ok)
	}
	if len(st.Keys) != StatsKeys+1 || st.KeysTotal != 901 {
		t.Fatalf("%d keys reported of %d", len(st.Keys), st.KeysTotal)
	}
}
