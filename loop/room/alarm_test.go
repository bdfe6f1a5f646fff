package room

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
)

// TestRoomTicksOnTheAlarm runs a room and a sleeping task on a loop whose timers wake it
// from the timerfd alarm (the default; Config.RuntimeTimers turns it off): the ticks come on their absolute
// deadlines, none before it, the sleeps end, and the server's stop leaves no goroutine of
// the alarm behind (TestMain's goleak check).
func TestRoomTicksOnTheAlarm(t *testing.T) {
	const period = 10 * time.Millisecond
	const ticks = 50
	s, _ := startServer(t, loop.Config{}, nil)

	slept := make(chan time.Duration, 1)
	s.Loop(0).Go("sleeper", func(tk *loop.Task) {
		start := time.Now()
		for range 5 {
			_ = tk.Sleep(3 * time.Millisecond)
		}
		slept <- time.Since(start)
	})

	type obs struct {
		n                 uint64
		deadline, started time.Time
	}
	got := make(chan obs, ticks+10)
	var stop atomic.Bool
	r := newRoomT(t, s, Config[int]{Name: "precise", Period: period, Tick: func(r *Room[int], tk *Tick[int]) {
		if !stop.Load() {
			got <- obs{tk.N, tk.Deadline, time.Now()}
		}
		if tk.N >= ticks {
			stop.Store(true)
			r.Stop()
		}
	}})
	select {
	case <-r.Done():
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the room did not reach its ticks")
	}
	close(got)
	var first *obs
	for o := range got {
		if first == nil {
			o := o
			first = &o
		}
		require.True(t, o.deadline.Equal(first.deadline.Add(time.Duration(o.n-first.n)*period)),
			"tick %d: deadline %v is not start + N·period", o.n, o.deadline)
		// The loop's clock may differ from time.Now's by the bound internal/clock states.
		require.GreaterOrEqual(t, o.started.Sub(o.deadline), -time.Millisecond, "tick %d started before its deadline", o.n)
	}
	require.NotNil(t, first)

	select {
	case d := <-slept:
		require.GreaterOrEqual(t, d, 15*time.Millisecond-time.Millisecond, "the sleeps ended early")
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the sleeping task was not woken")
	}
}
