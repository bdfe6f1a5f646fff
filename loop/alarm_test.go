package loop

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPreciseTimersRoomTicks runs a room and a sleeping task on a loop whose timers wake it
// from the timerfd alarm (the default; Config.RuntimeTimers turns it off): the ticks come on their absolute
// deadlines, none before it, the sleeps end, and the server's stop leaves no goroutine of
// the alarm behind (TestMain's goleak check).
func TestPreciseTimersRoomTicks(t *testing.T) {
	const period = 10 * time.Millisecond
	const ticks = 50
	s, _ := startServer(t, Config{}, nil)

	slept := make(chan time.Duration, 1)
	s.Go("sleeper", func(tk *Task) {
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
	r := newRoomT(t, s, RoomConfig[int]{Name: "precise", Period: period, Tick: func(r *Room[int], tk *Tick[int]) {
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

// TestAlarmDefault: the timerfd alarm (with its slack) is the default; RuntimeTimers leaves
// the scheduler its runtime timer and no slack.
func TestAlarmDefault(t *testing.T) {
	assert.NotNil(t, alarmFor(Config{}), "default: the loop's alarm")
	assert.Equal(t, timerSlack, slackFor(Config{}))
	assert.Nil(t, alarmFor(Config{RuntimeTimers: true}), "RuntimeTimers: the scheduler's runtime timer")
	assert.Zero(t, slackFor(Config{RuntimeTimers: true}))
}
