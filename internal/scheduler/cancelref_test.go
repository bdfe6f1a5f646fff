package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runUntil drives a sync scheduler (the test is its loop) until cond holds, letting the
// clock move on for its timers.
func runUntil(tb testing.TB, s *Scheduler, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runAll(s); !cond(); runAll(s) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestCancelRefStopsAnEveryTask(t *testing.T) {
	s := newSync(t, Config{})
	ticks := 0
	ref := s.Every(time.Millisecond, func(*Task) { ticks++ }).Ref()
	runUntil(t, s, "two ticks", func() bool { return ticks >= 2 })
	require.True(t, s.CancelRef(ref, errTest), "the Every task is alive")
	runAll(s)
	n := ticks
	assert.Nil(t, ref.Task(), "the Every task ended")
	live, _ := s.Len()
	assert.Zero(t, live)
	assert.Zero(t, s.Counters().Timers, "no tick pending")
	assert.False(t, s.CancelRef(ref, errTest), "a finished task")
	// The task struct is reused by the next task; the old Ref does not reach it.
	var err error
	other := s.Go(func(t *Task) { err = t.Park(ReasonOther) })
	runAll(s)
	require.Same(t, ref.t, other, "the struct was reused")
	assert.False(t, s.CancelRef(ref, errTest), "the Ref of a finished task cancelled another")
	assert.NoError(t, other.Err())
	s.Wake(other)
	runAll(s)
	assert.NoError(t, err)
	assert.Equal(t, n, ticks)
}

// An Every task can stop itself from inside its tick: that tick finishes (a park in it
// returns the error) and no other starts.
func TestCancelRefFromInsideATick(t *testing.T) {
	s := newSync(t, Config{})
	ticks := 0
	var alive bool
	var sleepErr error
	var ref Ref
	ref = s.Every(time.Millisecond, func(t *Task) {
		ticks++
		if ticks == 2 {
			alive = s.CancelRef(ref, errTest)
			sleepErr = t.Sleep(time.Millisecond)
		}
	}).Ref()
	runUntil(t, s, "the Every task to end", func() bool { return ref.Task() == nil })
	assert.True(t, alive)
	assert.ErrorIs(t, sleepErr, errTest)
	assert.Equal(t, 2, ticks)
	assert.Zero(t, s.Counters().Timers)
}

// A Go task stopped by CancelRef: its park returns the error, its function returns and its
// deferred functions run.
func TestCancelRefStopsAGoTask(t *testing.T) {
	s := newSync(t, Config{})
	var err error
	deferred := false
	ref := s.Go(func(t *Task) {
		defer func() { deferred = true }()
		err = t.Sleep(time.Hour)
	}).Ref()
	runAll(s)
	require.NotNil(t, ref.Task())
	require.True(t, s.CancelRef(ref, errTest))
	runAll(s)
	assert.ErrorIs(t, err, errTest)
	assert.True(t, deferred)
	assert.Nil(t, ref.Task())
	assert.False(t, s.CancelRef(ref, errTest))
	assert.False(t, s.CancelRef(Ref{}, errTest), "the zero Ref")
	assert.Equal(t, "scheduler: CancelRef with a nil error", mustPanic(t, func() { s.CancelRef(ref, nil) }))

	// A task that stops itself: alive, and cancelled from then on.
	var errs []error
	s.Go(func(t *Task) {
		errs = append(errs, nil)
		if !s.CancelRef(t.Ref(), errTest) {
			errs = append(errs, errTest)
		}
		errs = append(errs, t.Park(ReasonOther))
	})
	runAll(s)
	assert.Equal(t, []error{nil, errTest}, errs)
}
