package offload

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hang returns a function that ignores its context and returns only when release is
// closed: the misbehaving offloaded function of issue 13.
func hang(release <-chan struct{}) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { <-release; return 0, nil }
}

// startHung starts n handlers of key whose functions hang until release is closed.
func startHung(t *testing.T, hs harness, p *Pool, key string, n int, release <-chan struct{}) []*handle {
	var handles []*handle
	for range n {
		handles = append(handles, hs.start(p, key, func(c Caller) {
			_, err := Do(c, hang(release))
			assert.NoError(t, err, key)
		}))
	}
	return handles
}

// slowPool is the slow-lane setup of issue 13: routes "A" and "B" are known slow, the
// slow lane has 4 tokens.
func slowPool(t *testing.T, share float64) *Pool {
	return newPool(t, Config{Tokens: 8, SlowTokens: 4, MaxKeyShare: share, SlowKeys: []string{"A", "B"}})
}

// Twenty hung calls of route A cannot take the whole slow lane: A holds its cap (half the
// lane), its other calls wait in A's own queue, and a call of route B, also slow, runs at
// once. Releasing A drains A's queue in order.
func TestKeyCapKeepsLaneForOtherRoutes(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := slowPool(t, 0) // the default share, 0.5: cap 2 of 4
		release := make(chan struct{})
		hung := startHung(t, hs, p, "A", 20, release)
		t.Cleanup(func() {
			close(release)
			for _, h := range hung {
				h.wait(t)
			}
		})
		waitUntil(t, "A at its cap", func() bool {
			st := p.Stats().Lanes[laneSlow]
			return st.InUse == 2 && st.Capped == 18
		})

		b := hs.start(p, "B", func(c Caller) {
			v, err := Do(c, func(context.Context) (int, error) { return 7, nil })
			assert.NoError(t, err)
			assert.Equal(t, 7, v)
		})
		b.wait(t) // fails after 20 s if B waits behind A

		st := p.Stats()
		lane := st.Lanes[laneSlow]
		assert.Equal(t, 2, lane.KeyCap)
		assert.Equal(t, 2, lane.InUse, "A still holds its cap")
		assert.Equal(t, 18, lane.Waiting)
		assert.Equal(t, 18, lane.Capped)
		assert.EqualValues(t, 18, lane.CappedWaits)
		a, ok := st.key("A")
		require.True(t, ok)
		assert.Equal(t, 2, a.InUse)
		assert.Equal(t, 18, a.Capped)
		assert.EqualValues(t, 18, a.CappedWaits)
		bk, ok := st.key("B")
		require.True(t, ok)
		assert.Equal(t, "slow", bk.Lane)
		assert.Zero(t, bk.CappedWaits)
		for _, h := range hung {
			assert.False(t, h.finished(), "A's calls hang until released")
		}

		js, err := json.Marshal(st)
		require.NoError(t, err)
		for _, f := range []string{`"KeyCap":2`, `"Capped":18`, `"CappedWaits":18`, `"InUse":2`} {
			assert.Contains(t, string(js), f)
		}
	})
}

// The control for TestKeyCapKeepsLaneForOtherRoutes: with the cap off (MaxKeyShare 1), A's
// hung calls take every slow token and B queues behind A's calls in the lane's FIFO.
func TestWithoutKeyCapOneRouteStarvesTheLane(t *testing.T) {
	p := slowPool(t, 1)
	release := make(chan struct{})
	hung := startHung(t, goHarness{}, p, "A", 20, release)
	waitUntil(t, "A holds the lane", func() bool {
		st := p.Stats().Lanes[laneSlow]
		return st.InUse == 4 && st.Waiting == 16
	})
	b := goHarness{}.start(p, "B", func(c Caller) {
		_, err := Do(c, func(context.Context) (int, error) { return 0, nil })
		assert.NoError(t, err)
	})
	waitUntil(t, "B queued behind A", func() bool { return p.Stats().Lanes[laneSlow].Waiting == 17 })
	st := p.Stats().Lanes[laneSlow]
	assert.Equal(t, 4, st.KeyCap)
	assert.Zero(t, st.Capped)
	assert.False(t, b.finished())
	close(release)
	for _, h := range append(hung, b) {
		h.wait(t)
	}
}

// Calls of a route that queued in the lane's FIFO before the route reached its cap do not
// block the calls behind them: when they come up they move to the route's own queue.
func TestKeyCapNoHeadOfLineBlocking(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 4, NoLanes: true}) // cap 2
		relX, relY, relA := make(chan struct{}), make(chan struct{}), make(chan struct{})
		x := startHung(t, hs, p, "X", 2, relX)
		y := startHung(t, hs, p, "Y", 2, relY)
		waitUntil(t, "X and Y hold the pool", func() bool { return p.Stats().Lanes[laneFast].InUse == 4 })
		a := startHung(t, hs, p, "A", 3, relA)
		waitUntil(t, "A queued", func() bool { return p.Stats().Lanes[laneFast].Waiting == 3 })
		var log completionLog
		b := hs.start(p, "B", func(c Caller) {
			_, err := Do(c, func(context.Context) (int, error) { return 0, nil })
			assert.NoError(t, err)
			log.add("B")
		})
		waitUntil(t, "B queued", func() bool { return p.Stats().Lanes[laneFast].Waiting == 4 })
		st := p.Stats().Lanes[laneFast]
		require.Zero(t, st.Capped, "A was below its cap when it queued")

		close(relX) // two tokens: A1 and A2 start, A reaches its cap
		waitUntil(t, "A at its cap", func() bool {
			st := p.Stats()
			k, _ := st.key("A")
			return k.InUse == 2
		})
		close(relY) // two tokens: A3 is capped and moves aside, B runs
		b.wait(t)
		st = p.Stats().Lanes[laneFast]
		assert.Equal(t, 1, st.Capped)
		assert.Equal(t, 1, st.Waiting)
		assert.Equal(t, []string{"B"}, log.get())
		close(relA)
		for _, h := range append(append(append(x, y...), a...), b) {
			h.wait(t)
		}
		assert.Zero(t, p.Stats().Lanes[laneFast].Waiting)
	})
}

// A route's queue at its cap is bounded by MaxWaiting (ErrQueueFull past it, while other
// routes still run), a capped call whose caller leaves drops out of it, and Close fails
// the calls still in it with ErrClosed.
func TestKeyCapQueueBoundCancelAndClose(t *testing.T) {
	p := New(Config{Tokens: 2, NoLanes: true, MaxWaiting: 2}) // cap 1
	release := make(chan struct{})
	hs := goHarness{}
	running := startHung(t, hs, p, "A", 1, release)
	waitUntil(t, "A running", func() bool { return p.Stats().Lanes[laneFast].InUse == 1 })
	errs := make(chan error, 2)
	var held []*handle
	for range 2 {
		held = append(held, hs.start(p, "A", func(c Caller) {
			_, err := Do(c, hang(release))
			errs <- err
		}))
	}
	waitUntil(t, "two capped", func() bool { return p.Stats().Lanes[laneFast].Capped == 2 })

	_, err := Do(NewGoCaller(context.Background(), p, "A"), hang(release))
	require.ErrorIs(t, err, ErrQueueFull)
	v, err := Do(NewGoCaller(context.Background(), p, "B"), func(context.Context) (int, error) { return 3, nil })
	require.NoError(t, err)
	assert.Equal(t, 3, v)

	cause := context.Canceled
	held[0].cancel(cause)
	require.ErrorIs(t, <-errs, cause)
	st := p.Stats().Lanes[laneFast]
	assert.Equal(t, 1, st.Capped)
	assert.EqualValues(t, 1, st.Cancelled)
	assert.EqualValues(t, 1, st.Rejected)

	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	require.ErrorIs(t, <-errs, ErrClosed)
	assert.Zero(t, p.Stats().Lanes[laneFast].Capped)
	close(release)
	require.NoError(t, <-closed)
	for _, h := range append(running, held...) {
		h.wait(t)
	}
}

// Calls held at the cap move with their route when it changes lanes, and are held again
// in the new lane once the route is at its cap there.
func TestKeyCapHeldCallsMigrate(t *testing.T) {
	p := newPool(t, Config{Tokens: 8, SlowTokens: 4}) // fast 4 (cap 2), slow 4 (cap 2)
	var timers fakeTimers
	p.afterFunc = timers.afterFunc
	release := make(chan struct{})
	hs := goHarness{}
	var handles []*handle
	for i := range 5 {
		handles = append(handles, startHung(t, hs, p, "R", 1, release)...)
		waitUntil(t, "admitted", func() bool {
			st := p.Stats().Lanes[laneFast]
			return st.InUse+st.Waiting == i+1
		})
	}
	st := p.Stats().Lanes[laneFast]
	require.Equal(t, 2, st.InUse)
	require.Equal(t, 3, st.Capped)

	timers.fireFirst() // R is slow now
	s := p.Stats()
	f, sl := s.Lanes[laneFast], s.Lanes[laneSlow]
	assert.Equal(t, 2, f.InUse, "the running calls keep their fast tokens")
	assert.Zero(t, f.Waiting)
	assert.Equal(t, 2, sl.InUse)
	assert.Equal(t, 1, sl.Capped)
	assert.EqualValues(t, 3, sl.Migrated)
	close(release)
	for _, h := range handles {
		h.wait(t)
	}
}

// Config.DefaultTimeout bounds a call without a Timeout option; Timeout overrides it.
func TestDefaultTimeout(t *testing.T) {
	p := newPool(t, Config{Tokens: 2, DefaultTimeout: time.Millisecond})
	c := NewGoCaller(context.Background(), p, "k")
	_, err := Do(c, func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	require.ErrorIs(t, err, context.DeadlineExceeded)

	var left time.Duration
	_, err = Do(c, func(ctx context.Context) (int, error) {
		d, ok := ctx.Deadline()
		require.True(t, ok)
		left = time.Until(d)
		return 0, nil
	}, Timeout(time.Hour))
	require.NoError(t, err)
	assert.Greater(t, left, 30*time.Minute)
}

// The key cap of a lane is max(1, floor(share x tokens)).
func TestKeyCapSizes(t *testing.T) {
	for _, tc := range []struct {
		cfg        Config
		fast, slow int
	}{
		{Config{}, 24, 8},
		{Config{Tokens: 8, SlowTokens: 1}, 3, 1},
		{Config{Tokens: 8, MaxKeyShare: 1}, 6, 2},
		{Config{Tokens: 8, MaxKeyShare: 0.01}, 1, 1},
		{Config{Tokens: 5, NoLanes: true}, 2, 1},
	} {
		p := New(tc.cfg)
		st := p.Stats()
		assert.Equal(t, tc.fast, st.Lanes[laneFast].KeyCap, "%+v", tc.cfg)
		if st.LanesEnabled {
			assert.Equal(t, tc.slow, st.Lanes[laneSlow].KeyCap, "%+v", tc.cfg)
		}
		require.NoError(t, p.Close(context.Background()))
	}
}

// Mid-flight learning arms one timer per pool: back-to-back calls share it, and when it
// fires for the oldest watched call it re-arms for the next one.
func TestMidFlightOneTimer(t *testing.T) {
	p := newPool(t, Config{Tokens: 8, SlowTokens: 2})
	var timers fakeTimers
	p.afterFunc = timers.afterFunc
	c := NewGoCaller(context.Background(), p, "GET /quick")
	for range 10 {
		_, err := Do(c, func(context.Context) (int, error) { return 0, nil })
		require.NoError(t, err)
	}
	require.Len(t, timers.all(), 1, "back-to-back calls share the armed timer")
	timers.fire(0) // nothing watched: the timer is not re-armed
	require.Len(t, timers.all(), 1)

	release := make(chan struct{})
	hs := goHarness{}
	x := startHung(t, hs, p, "X", 1, release)
	waitUntil(t, "X running", func() bool { return p.Stats().Lanes[laneFast].InUse == 1 })
	y := startHung(t, hs, p, "Y", 1, release)
	waitUntil(t, "Y running", func() bool { return p.Stats().Lanes[laneFast].InUse == 2 })
	require.Len(t, timers.all(), 2, "armed again for X")

	timers.fire(1) // X's deadline: X is slow, the timer re-arms for Y
	assert.Equal(t, laneSlow, laneOf(p, "X"))
	assert.Equal(t, laneFast, laneOf(p, "Y"))
	require.Len(t, timers.all(), 3)
	timers.fire(2)
	assert.Equal(t, laneSlow, laneOf(p, "Y"))
	timers.fire(1) // a stale firing does nothing
	require.Len(t, timers.all(), 3)
	close(release)
	for _, h := range append(x, y...) {
		h.wait(t)
	}
}

// The predictor's LRU bound never drops a route with running or capped calls: its counts
// are what keeps the route at its cap.
func TestKeyCapSurvivesLRUBound(t *testing.T) {
	p := newPool(t, Config{Tokens: 2, NoLanes: true, MaxKeys: 2}) // cap 1
	release := make(chan struct{})
	hs := goHarness{}
	k := startHung(t, hs, p, "K", 1, release)
	waitUntil(t, "K running", func() bool { return p.Stats().Lanes[laneFast].InUse == 1 })
	for _, key := range []string{"a", "b", "c", "d"} {
		_, err := Do(NewGoCaller(context.Background(), p, key), func(context.Context) (int, error) { return 0, nil })
		require.NoError(t, err)
	}
	st := p.Stats()
	_, ok := st.key("K")
	require.True(t, ok, "a busy route is not evicted")
	assert.Equal(t, 2, st.KeysTotal)
	k = append(k, startHung(t, hs, p, "K", 1, release)...)
	waitUntil(t, "second K call capped", func() bool { return p.Stats().Lanes[laneFast].Capped == 1 })
	close(release)
	for _, h := range k {
		h.wait(t)
	}
}

// key returns the stats of one route and whether the predictor knows it.
func (s *Stats) key(key string) (KeyStats, bool) {
	for _, k := range s.Keys {
		if k.Key == key {
			return k, true
		}
	}
	return KeyStats{}, false
}
