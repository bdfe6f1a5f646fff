package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// passDeadline waits (the test is the loop of a sync scheduler) until the clock has
// reached the deadline of t's timer, then runs the due timers and the tasks they woke.
func passDeadline(s *Scheduler, t *Task) {
	when := t.sleep.when
	for s.Now() < when {
		time.Sleep(100 * time.Microsecond)
	}
	runAll(s)
}

func TestParkTimeoutFires(t *testing.T) {
	s := newSync(t, Config{})
	var err error
	var st Stats
	done := false
	task := s.Go(func(t *Task) {
		err = t.ParkTimeout(ReasonWrite, 2*time.Millisecond)
		st = t.Stats()
		done = true
	})
	runAll(s)
	require.Equal(t, Parked, task.State())
	require.Equal(t, ReasonWrite, task.Reason())
	require.Equal(t, 1, s.Counters().Timers)
	passDeadline(s, task)
	require.True(t, done)
	assert.ErrorIs(t, err, ErrTimeout)
	assert.Zero(t, s.Counters().Timers)
	assert.Equal(t, st.ParkedTotal(), st.Parked[ReasonWrite], "parked time is accounted under the reason given")
	assert.LessOrEqual(t, st.Parked[ReasonWrite], 2*time.Millisecond, "parked from the slice end to the deadline")
}

// A wake before the deadline returns nil and stops the deadline: it does not end the
// task's next park, even once the old deadline has passed.
func TestParkTimeoutWokenEarlyStopsTheTimer(t *testing.T) {
	s := newSync(t, Config{})
	var errs []error
	task := s.Go(func(t *Task) {
		errs = append(errs, t.ParkTimeout(ReasonOther, 5*time.Millisecond))
		errs = append(errs, t.Park(ReasonOther))
	})
	runAll(s)
	deadline := task.sleep.when
	s.Wake(task)
	assert.Zero(t, s.Counters().Timers, "the deadline is unregistered by the wake")
	runAll(s)
	require.Equal(t, []error{nil}, errs)
	for s.Now() < deadline {
		time.Sleep(100 * time.Microsecond)
	}
	runAll(s)
	assert.Equal(t, Parked, task.State(), "the old deadline woke the later park")
	s.Wake(task)
	runAll(s)
	assert.Equal(t, []error{nil, nil}, errs)

	// A Waker made for a timed park wakes it.
	var err error = ErrTimeout
	task = s.Go(func(t *Task) { err = t.ParkTimeout(ReasonOther, time.Hour) })
	w := task.Waker()
	runAll(s)
	require.True(t, w.Wake())
	runAll(s)
	assert.NoError(t, err)
}

func TestParkTimeoutCancelAndPoll(t *testing.T) {
	s := newSync(t, Config{})
	var errs []error
	task := s.Go(func(t *Task) {
		errs = append(errs, t.ParkTimeout(ReasonOther, 0))            // a poll: no park
		errs = append(errs, t.ParkTimeout(ReasonOther, -time.Second)) // likewise
		errs = append(errs, t.ParkTimeout(ReasonOther, time.Hour))    // cancelled
		errs = append(errs, t.ParkTimeout(ReasonOther, time.Hour))    // already cancelled: at once
		errs = append(errs, t.ParkTimeout(ReasonOther, 0))            // the cancel error wins
	})
	runAll(s)
	require.Len(t, errs, 2)
	assert.ErrorIs(t, errs[0], ErrTimeout)
	assert.ErrorIs(t, errs[1], ErrTimeout)
	assert.Equal(t, uint64(1), task.Stats().Rounds, "a poll does not park or yield")
	s.Cancel(task, errTest)
	assert.Zero(t, s.Counters().Timers, "the deadline is unregistered by the cancel")
	runAll(s)
	require.Len(t, errs, 5)
	assert.Equal(t, []error{errTest, errTest, errTest}, errs[2:])
	assert.Zero(t, s.Counters().Timers)
}

func TestFutureAwaitTimeout(t *testing.T) {
	s := newSync(t, Config{})
	f := NewFuture[int](s)
	type res struct {
		v   int
		err error
	}
	var got []res
	await := func(d time.Duration) *Task {
		return s.Go(func(t *Task) {
			v, err := f.AwaitTimeout(t, d)
			got = append(got, res{v, err})
		})
	}
	// Not resolved: a poll times out at once, a wait at its deadline, and a plain Wake
	// meanwhile only parks it again until the same deadline.
	await(0)
	runAll(s)
	require.Equal(t, []res{{0, ErrTimeout}}, got)
	a := await(3 * time.Millisecond)
	runAll(s)
	deadline := a.sleep.when
	s.Wake(a)
	runAll(s)
	require.Len(t, got, 1, "a plain Wake ended the wait")
	require.Equal(t, deadline, a.sleep.when, "parked again until the same deadline")
	passDeadline(s, a)
	require.Equal(t, []res{{0, ErrTimeout}, {0, ErrTimeout}}, got)
	assert.Nil(t, f.waiters.head, "the timed-out waiter left the waiter list")

	// Resolved before the deadline: the value, and the deadline is gone.
	got = nil
	b := await(time.Hour)
	runAll(s)
	require.Equal(t, 1, s.Counters().Timers)
	f.Resolve(7, nil)
	assert.Zero(t, s.Counters().Timers)
	runAll(s)
	require.Equal(t, []res{{7, nil}}, got)
	_ = b
	// Already resolved: the value whatever d.
	await(0)
	await(-1)
	runAll(s)
	assert.Equal(t, []res{{7, nil}, {7, nil}, {7, nil}}, got)

	// Cancelled during the wait.
	g := NewFuture[int](s)
	var err error
	c := s.Go(func(t *Task) { _, err = g.AwaitTimeout(t, time.Hour) })
	runAll(s)
	s.Cancel(c, errTest)
	runAll(s)
	assert.ErrorIs(t, err, errTest)
	assert.Nil(t, g.waiters.head)
	assert.Zero(t, s.Counters().Timers)
}

func TestEventWaitTimeout(t *testing.T) {
	s := newSync(t, Config{})
	e := NewEvent(s)
	var errs []error
	wait := func(d time.Duration) *Task {
		return s.Go(func(t *Task) { errs = append(errs, e.WaitTimeout(t, d)) })
	}
	wait(0)
	a := wait(2 * time.Millisecond)
	b := wait(time.Hour)
	c := wait(time.Hour)
	runAll(s)
	require.Equal(t, []error{ErrTimeout}, errs)
	passDeadline(s, a)
	require.Equal(t, []error{ErrTimeout, ErrTimeout}, errs)
	assert.Equal(t, Parked, b.State())
	s.Cancel(c, errTest)
	runAll(s)
	require.Equal(t, []error{ErrTimeout, ErrTimeout, errTest}, errs)
	e.Set()
	assert.Zero(t, s.Counters().Timers)
	runAll(s)
	require.Equal(t, []error{ErrTimeout, ErrTimeout, errTest, nil}, errs)
	wait(0)
	runAll(s)
	assert.Equal(t, []error{ErrTimeout, ErrTimeout, errTest, nil, nil}, errs)
	var st Stats
	s.Go(func(t *Task) {
		_ = NewEvent(s).WaitTimeout(t, time.Millisecond)
		st = t.Stats()
	})
	for st.Rounds == 0 { // until the deadline has passed and the task ran
		time.Sleep(100 * time.Microsecond)
		runAll(s)
	}
	assert.Equal(t, st.ParkedTotal(), st.Parked[ReasonWait])
}

// On a real loop the deadline comes through Post.
func TestParkTimeoutOnALoop(t *testing.T) {
	l := newLoop(t, Config{})
	done := make(chan error, 1)
	l.do(func() {
		l.s.Go(func(t *Task) { done <- t.ParkTimeout(ReasonOther, time.Millisecond) })
	})
	assert.ErrorIs(t, <-done, ErrTimeout)
}
