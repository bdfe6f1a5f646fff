package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWakeAtUsesGivenReading: WakeAt counts the park as ending at the given reading (a
// reading from before the park counts as no time parked), and the task as ready from
// then; a Waker of a park that is over wakes nothing.
func TestWakeAtUsesGivenReading(t *testing.T) {
	s := newSync(t, Config{})
	var task *Task
	var wk Waker
	parks := 0
	task = s.Go(func(t *Task) {
		for {
			wk = t.Waker()
			parks++
			if t.Park(ReasonOther) != nil {
				return
			}
		}
	})
	s.Run()
	require.Equal(t, 1, parks)
	stale := wk

	// A reading from before the park: no time parked.
	require.True(t, wk.WakeAt(0))
	assert.Equal(t, time.Duration(0), task.Stats().Parked[ReasonOther])
	assert.False(t, stale.WakeAt(s.Now()), "a woken park's Waker must not wake again")
	r2 := s.Now()
	s.Run()
	require.Equal(t, 2, parks)
	assert.GreaterOrEqual(t, task.Stats().QueueDelay, time.Duration(0))

	// A reading after the park began: parked until exactly that reading.
	r3 := s.Now()
	s.Run() // nothing ready: the task stays parked
	at := s.Now()
	require.True(t, wk.WakeAt(at))
	p := task.Stats().Parked[ReasonOther]
	assert.LessOrEqual(t, p, time.Duration(at-r2), "parked from its second park's start at the earliest")
	assert.GreaterOrEqual(t, p, time.Duration(at-r3))
	assert.False(t, stale.WakeAt(at))
	s.Run()
	require.Equal(t, 3, parks)
	assert.False(t, Waker{}.WakeAt(at), "the zero Waker wakes nothing")
}

// TestRunAtStartsAtGivenReading: RunAt measures queue delay to the given reading and
// starts the first slice there (a reading older than the work done since moves that work
// into the slice), and fires no timer due after the reading; Run afterwards reads the
// clock again.
func TestRunAtStartsAtGivenReading(t *testing.T) {
	s := newSync(t, Config{})
	var wk Waker
	parks := 0
	task := s.Go(func(t *Task) {
		for {
			wk = t.Waker()
			parks++
			if t.Park(ReasonOther) != nil {
				return
			}
		}
	})
	s.Run()
	require.Equal(t, 1, parks)

	const gap = 2 * time.Millisecond
	before := task.Stats() // parked: its queue delay is settled
	woke := s.Now()
	require.True(t, wk.WakeAt(woke))
	for s.Now()-woke < int64(gap) { // time passes between the wake and the run
	}
	s.RunAt(woke)
	require.Equal(t, 2, parks)
	after := task.Stats()
	assert.Equal(t, before.QueueDelay, after.QueueDelay, "ready at the reading, running from it: no queue delay")
	assert.GreaterOrEqual(t, after.OnLoop-before.OnLoop, gap, "the slice starts at the given reading")

	// Run (no reading given) measures from its own: the same gap now shows as queue delay.
	before = task.Stats()
	woke = s.Now()
	require.True(t, wk.WakeAt(woke))
	for s.Now()-woke < int64(gap) {
	}
	s.Run()
	require.Equal(t, 3, parks)
	after = task.Stats()
	assert.GreaterOrEqual(t, after.QueueDelay-before.QueueDelay, gap)
	assert.Less(t, after.OnLoop-before.OnLoop, gap)

	// A timer due after the given reading waits for a later Run. The reading is taken
	// before the timer is set, so it is before the deadline however long setting the timer
	// takes (a preemption there on a loaded machine once made the reading the later).
	fired := false
	at := s.Now()
	s.AfterFunc(time.Millisecond, func() { fired = true })
	for s.Now()-at < int64(2*time.Millisecond) {
	}
	s.RunAt(at)
	assert.False(t, fired, "due after the given reading")
	s.Run()
	assert.True(t, fired)
}
