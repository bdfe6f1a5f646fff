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
