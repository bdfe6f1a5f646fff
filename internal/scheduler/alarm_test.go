package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/alarm"
)

// fakeAlarm records what the scheduler asks of its alarm; the test fires it by hand.
type fakeAlarm struct {
	fire   func()
	arms   []time.Duration
	closed int
}

func (a *fakeAlarm) Arm(d time.Duration) { a.arms = append(a.arms, d) }
func (a *fakeAlarm) Close()              { a.closed++ }

// newFakeAlarmed returns a synchronous scheduler (the test is the loop) whose alarm is a
// fakeAlarm (nil until made) and whose posts are queued in *posted.
func newFakeAlarmed(t *testing.T, slack time.Duration) (s *Scheduler, fa **fakeAlarm, made *int, posted *[]func()) {
	var a *fakeAlarm
	n := 0
	var q []func()
	s = newSync(t, Config{
		Post: func(fn func()) { q = append(q, fn) },
		NewAlarm: func(fire func()) Alarm {
			n++
			a = &fakeAlarm{fire: fire}
			return a
		},
		TimerSlack: slack,
	})
	return s, &a, &n, &q
}

func TestAlarmMadeOnFirstTimerAndArmedForTheEarliest(t *testing.T) {
	const slack = 100 * time.Microsecond
	s, fa, made, _ := newFakeAlarmed(t, slack)
	require.Zero(t, *made, "no alarm before a timer")

	// A lone timer: armed for its deadline itself (measured from the clock reading that
	// set the deadline, so exactly).
	s.AfterFunc(10*time.Millisecond, func() {})
	require.Equal(t, 1, *made)
	a := *fa
	require.Equal(t, []time.Duration{10 * time.Millisecond}, a.arms)

	s.AfterFunc(20*time.Millisecond, func() {}) // later: no re-arm
	require.Len(t, a.arms, 1)
	s.AfterFunc(5*time.Millisecond, func() {}) // earlier, and alone within the slack: re-armed for it
	require.Equal(t, []time.Duration{10 * time.Millisecond, 5 * time.Millisecond}, a.arms)

	s.Close()
	assert.Equal(t, 1, a.closed)
	assert.Equal(t, 1, *made, "one alarm for the scheduler's life")
}

func TestAlarmSlackBoundsWakeUps(t *testing.T) {
	// A slack of a minute, so that the test's own pace does not matter.
	const slack = time.Minute
	runPosted := func(posted *[]func()) {
		for len(*posted) > 0 {
			fn := (*posted)[0]
			*posted = (*posted)[1:]
			fn()
		}
	}
	s, fa, _, posted := newFakeAlarmed(t, slack)
	ran := 0
	s.AfterFunc(0, func() { ran++ })
	s.AfterFunc(slack/2, func() {}) // due within the slack after the alarm goes off
	a := *fa
	require.Equal(t, []time.Duration{0}, a.arms, "nothing went off before: armed for the deadline itself")
	a.fire()
	runPosted(posted)
	require.Equal(t, 1, ran)
	require.Len(t, a.arms, 2)
	// Armed a slack after the alarm went off (less the time the test took since), not for
	// the next deadline: at most one wake-up per slack.
	assert.Greater(t, a.arms[1], slack/2)
	assert.LessOrEqual(t, a.arms[1], slack)

	// A timer due after a quiet spell longer than the slack is not delayed.
	s2, fa2, _, posted2 := newFakeAlarmed(t, slack)
	s2.AfterFunc(0, func() {})
	s2.AfterFunc(time.Hour, func() {})
	(*fa2).fire()
	runPosted(posted2)
	require.Len(t, (*fa2).arms, 2)
	assert.InDelta(t, float64(time.Hour), float64((*fa2).arms[1]), float64(time.Second))
}

func TestRunArmsTheAlarmOnceAfterItsSlices(t *testing.T) {
	s, fa, _, _ := newFakeAlarmed(t, 0)
	for i := range 3 {
		// Each Sleep's timer is the new earliest when it is added.
		s.Go(func(t *Task) { _ = t.Sleep(time.Hour - time.Duration(i)*time.Minute) })
	}
	require.False(t, s.Run())
	require.NotNil(t, *fa)
	require.Len(t, (*fa).arms, 1, "one setting for the Run, not one per new earliest timer")
	assert.InDelta(t, float64(time.Hour-2*time.Minute), float64((*fa).arms[0]), float64(time.Second))
}

func TestRunLeavesTimersDueDuringItsSlicesToTheNextRun(t *testing.T) {
	s, fa, _, _ := newFakeAlarmed(t, 0)
	woke := false
	s.Go(func(t *Task) {
		_ = t.Sleep(time.Microsecond)
		woke = true
	})
	s.Go(func(*Task) {
		for t0 := time.Now(); time.Since(t0) < time.Millisecond; { // the slice outlasts the Sleep
		}
	})
	require.True(t, s.Run(), "a timer fell due while the slices ran: Run asks to be called again")
	assert.Nil(t, *fa, "rather than waking the loop through the alarm")
	for s.Run() {
	}
	assert.True(t, woke)
}

func TestAlarmFireRunsDueTimersOnTheLoopAndRearms(t *testing.T) {
	s, fa, _, posted := newFakeAlarmed(t, 0)
	ran := 0
	s.AfterFunc(0, func() { ran++ })
	s.AfterFunc(time.Hour, func() { ran += 100 })
	a := *fa
	require.Len(t, a.arms, 1)

	a.fire() // on the alarm's goroutine: it only posts
	require.Zero(t, ran)
	require.Len(t, *posted, 1)
	(*posted)[0]() // the loop runs the post: the due timer fires, the alarm is re-armed for the hour
	assert.Equal(t, 1, ran)
	require.Len(t, a.arms, 2)
	assert.InDelta(t, float64(time.Hour), float64(a.arms[1]), float64(time.Minute))

	// A spurious fire finds nothing due and re-arms for the same timer.
	a.fire()
	(*posted)[1]()
	assert.Equal(t, 1, ran)
	assert.Len(t, a.arms, 3)
}

func TestAlarmFireAfterCloseIsIgnored(t *testing.T) {
	s, fa, _, posted := newFakeAlarmed(t, 0)
	ran := false
	s.AfterFunc(0, func() { ran = true })
	a := *fa
	s.Close()
	require.Equal(t, 1, a.closed)
	a.fire() // a fire that was under way when Close ran
	for _, fn := range *posted {
		fn()
	}
	assert.False(t, ran)
	assert.Len(t, a.arms, 1)
}

func TestConfigValidateTimerSlack(t *testing.T) {
	err := Config{Post: func(func()) {}, TimerSlack: -time.Microsecond}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Config.TimerSlack (-1µs)")
	assert.NoError(t, Config{Post: func(func()) {}, TimerSlack: time.Millisecond}.Validate())
}

// TestSleepWithTimerfdAlarm runs tasks that sleep on a loop whose alarm is internal/alarm's
// (a timerfd on Linux): they wake, never before their deadline, and Close leaves no
// goroutine behind (TestMain checks).
func TestSleepWithTimerfdAlarm(t *testing.T) {
	l := newLoop(t, Config{
		NewAlarm:   func(fire func()) Alarm { return alarm.New(fire) },
		TimerSlack: 50 * time.Microsecond,
		OSClock:    true, // deadlines on time.Now's clock, so "never early" is exact
	})
	const d = 3 * time.Millisecond
	done := make(chan time.Duration, 4)
	l.do(func() {
		for range cap(done) {
			l.s.Go(func(t *Task) {
				start := time.Now()
				for range 3 {
					_ = t.Sleep(d)
				}
				done <- time.Since(start)
			})
		}
	})
	for range cap(done) {
		select {
		case took := <-done:
			assert.GreaterOrEqual(t, took, 3*d, "woke early")
		case <-time.After(10 * time.Second):
			require.FailNow(t, "a sleeping task was not woken")
		}
	}
	l.close()
}

func TestRunTimers(t *testing.T) {
	const slack = time.Minute
	s, _, _, _ := newFakeAlarmed(t, slack)
	ran, more := s.RunTimers(s.Now())
	assert.False(t, ran || more, "no timer")

	fired := 0
	s.AfterFunc(0, func() { fired++ })
	ran, _ = s.RunTimers(s.Now())
	require.True(t, ran, "a timer due, the alarm never went off: fired")
	assert.Equal(t, 1, fired)

	s.AfterFunc(0, func() { fired++ })
	ran, _ = s.RunTimers(s.Now())
	assert.False(t, ran, "within half a slack of the last firing: left to the alarm")
	assert.Equal(t, 1, fired)

	s2, _, _, _ := newFakeAlarmed(t, slack)
	s2.AfterFunc(0, func() { fired++ })
	s2.Go(func(*Task) {})
	ran, _ = s2.RunTimers(s2.Now())
	assert.False(t, ran, "tasks ready: a Run is coming")
	assert.Equal(t, 1, fired)

	// A loop that is behind (the earliest timer more than a slack late) fires its backlog
	// too, but only once a whole slack has passed since the last firing, not half.
	s4, _, _, _ := newFakeAlarmed(t, slack)
	at := s4.Now() + int64(3*slack)
	s4.AfterFunc(0, func() { fired++ })
	ran, _ = s4.RunTimers(at)
	require.True(t, ran, "behind, never fired: the backlog fires")
	assert.Equal(t, 2, fired)
	s4.AfterFunc(0, func() { fired++ }) // due at once: late by 3 slacks at the next call
	ran, _ = s4.RunTimers(at + int64(3*slack/4))
	assert.False(t, ran, "behind, three quarters of a slack since the last firing: input's turn")
	ran, _ = s4.RunTimers(at + int64(slack))
	assert.True(t, ran, "behind, a slack since the last firing: the backlog fires")
	assert.Equal(t, 3, fired)
	s4.AfterFunc(0, func() { fired++ })
	ran, _ = s4.RunTimers(at + int64((farBehind+2)*slack))
	assert.False(t, ran, "far behind (a long tick or a stall): left to the door's turn, after the input")
	assert.Equal(t, 3, fired)

	// Far behind before any timer ever fired (the loop's first deadlines came during a
	// long first task): the door's turn too, not this callback.
	s5, _, _, _ := newFakeAlarmed(t, slack)
	s5.AfterFunc(0, func() { fired++ })
	ran, _ = s5.RunTimers(s5.Now() + int64((farBehind+2)*slack))
	assert.False(t, ran, "far behind, never fired: left to the door's turn")
	assert.Equal(t, 3, fired)

	s3, _, _, _ := newFakeAlarmed(t, 0)
	s3.AfterFunc(0, func() { fired++ })
	ran, _ = s3.RunTimers(s3.Now())
	assert.False(t, ran, "no slack (runtime timers): never")
}

// TestRunTimersMovesTheAlarmOn: the alarm set for a slack after it went off is moved on
// once RunTimers has fired the timers it was for, rather than going off for nothing.
func TestRunTimersMovesTheAlarmOn(t *testing.T) {
	const slack = 4 * time.Millisecond
	s, fa, _, posted := newFakeAlarmed(t, slack)
	s.AfterFunc(0, func() {})
	(*fa).fire()
	(*posted)[0]() // the alarm went off: the next may not be sooner than a slack from now
	start := time.Now()
	s.AfterFunc(3*time.Millisecond, func() {})
	s.AfterFunc(time.Hour, func() {})
	a := *fa
	ran := false
	for !ran && time.Since(start) < time.Second { // until the 3 ms timer is due
		ran, _ = s.RunTimers(s.Now())
	}
	require.True(t, ran)
	require.NotEmpty(t, a.arms)
	assert.Greater(t, a.arms[len(a.arms)-1], 50*time.Minute, "armed for the hour's timer, not the slack's end")
}
