package alarm

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain checks that no test leaks the alarm's goroutine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait is how long a test waits for a fire that must come before it fails.
const wait = 10 * time.Second

// probe is an alarm whose fires are timed and counted.
type probe struct {
	a     *Alarm
	fires chan time.Time
	n     atomic.Int32
}

// kinds are the implementations: the timerfd (Linux) with and without its runtime-timer
// backstop, and the runtime-timer fallback.
var kinds = []string{"precise", "precise-nobackstop", "runtime"}

func newProbe(t *testing.T, kind string) *probe {
	t.Helper()
	p := &probe{fires: make(chan time.Time, 100)}
	fire := func() {
		p.n.Add(1)
		p.fires <- time.Now()
	}
	if kind == "precise" || kind == "precise-nobackstop" {
		if kind == "precise" {
			p.a = New(fire)
		} else {
			p.a = NewNoBackstop(fire)
		}
		if runtime.GOOS == "linux" {
			require.True(t, p.a.Precise(), "a timerfd alarm on Linux")
		}
	} else {
		p.a = &Alarm{fire: fire, fd: -1} // what New gives when there is no timerfd
		require.False(t, p.a.Precise())
	}
	t.Cleanup(p.a.Close)
	return p
}

// next waits for the next fire and returns its time.
func (p *probe) next(t *testing.T) time.Time {
	t.Helper()
	select {
	case at := <-p.fires:
		return at
	case <-time.After(wait):
		require.FailNow(t, "the alarm did not fire")
		return time.Time{}
	}
}

func forKinds(t *testing.T, fn func(t *testing.T, kind string)) {
	for _, k := range kinds {
		t.Run(k, func(t *testing.T) { fn(t, k) })
	}
}

func TestAlarmFiresNotBeforeItsTime(t *testing.T) {
	forKinds(t, func(t *testing.T, kind string) {
		p := newProbe(t, kind)
		const d = 20 * time.Millisecond
		start := time.Now()
		p.a.Arm(d)
		assert.GreaterOrEqual(t, p.next(t).Sub(start), d, "fired early")
		// It fires once per Arm, and again after the next Arm.
		start = time.Now()
		p.a.Arm(d)
		assert.GreaterOrEqual(t, p.next(t).Sub(start), d, "fired early")
		assert.EqualValues(t, 2, p.n.Load())
	})
}

func TestAlarmNonPositiveFiresAtOnce(t *testing.T) {
	forKinds(t, func(t *testing.T, kind string) {
		p := newProbe(t, kind)
		p.a.Arm(0)
		p.next(t)
		p.a.Arm(-time.Second)
		p.next(t)
	})
}

func TestAlarmRearmEarlier(t *testing.T) {
	forKinds(t, func(t *testing.T, kind string) {
		p := newProbe(t, kind)
		p.a.Arm(time.Hour)
		p.a.Arm(time.Millisecond) // replaces the hour: the fire comes long before the wait ends
		p.next(t)
	})
}

func TestAlarmRearmLaterReplacesTheEarlierSetting(t *testing.T) {
	forKinds(t, func(t *testing.T, kind string) {
		const d = 40 * time.Millisecond
		p, start := armThen(t, kind, func(a *Alarm) { a.Arm(d) }) // the earlier setting must not fire
		assert.GreaterOrEqual(t, p.next(t).Sub(start), d, "the replaced setting fired")
		assert.EqualValues(t, 1, p.n.Load())
	})
}

func TestAlarmArmRepeatedly(t *testing.T) {
	forKinds(t, func(t *testing.T, kind string) {
		p := newProbe(t, kind)
		for i := range 1000 {
			if i%2 == 0 {
				p.a.Arm(time.Hour - time.Duration(i))
			} else {
				p.a.Arm(time.Minute - time.Duration(i)*time.Millisecond) // earlier, but not due within the test
			}
		}
		const d = 15 * time.Millisecond
		start := time.Now()
		p.a.Arm(d) // only the last setting counts
		assert.GreaterOrEqual(t, p.next(t).Sub(start), d, "an earlier setting fired")
		assert.EqualValues(t, 1, p.n.Load())
	})
}

// armThen returns a probe armed for a while and then stopped (or closed) by undo before
// that while has passed, on a fresh probe each time the test was descheduled for that long
// in between (the setting may then fire legitimately).
func armThen(t *testing.T, kind string, undo func(*Alarm)) (p *probe, armed time.Time) {
	t.Helper()
	const d = 20 * time.Millisecond
	for range 20 {
		p := newProbe(t, kind)
		start := time.Now()
		p.a.Arm(d)
		undo(p.a)
		if time.Since(start) < d/2 {
			return p, start
		}
		p.a.Close()
	}
	t.Skip("the machine is too loaded to arm and stop an alarm within 10 ms")
	return nil, time.Time{}
}

// stayedSilent checks that p stayed silent until a reference alarm armed for later than
// p's setting fired (a stopped alarm that fired anyway would have fired first).
func stayedSilent(t *testing.T, p *probe) {
	t.Helper()
	ref := newProbe(t, "precise")
	ref.a.Arm(40 * time.Millisecond)
	ref.next(t)
	assert.Zero(t, p.n.Load(), "fired after Stop or Close")
}

func TestAlarmStop(t *testing.T) {
	forKinds(t, func(t *testing.T, kind string) {
		p, _ := armThen(t, kind, (*Alarm).Stop)
		stayedSilent(t, p)
		p.a.Stop() // stopping a stopped alarm is fine
		p.a.Arm(time.Millisecond)
		p.next(t) // and it can be armed again
	})
}

func TestAlarmClose(t *testing.T) {
	forKinds(t, func(t *testing.T, kind string) {
		p, _ := armThen(t, kind, (*Alarm).Close)
		p.a.Close() // idempotent
		p.a.Arm(time.Millisecond)
		p.a.Stop()
		if p.a.Precise() {
			assert.Equal(t, -1, p.a.fd)
		}
		stayedSilent(t, p)
	})
}

func TestAlarmCloseLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	a := New(func() {})
	a.Arm(time.Hour)
	a.Close()
	goleak.VerifyNone(t, before)
}

func TestAlarmCloseWaitsForAFireUnderWay(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	a := New(func() {
		close(entered)
		<-release
		finished.Store(true)
	})
	if !a.Precise() {
		t.Skip("no timerfd: the runtime timer's Stop does not wait")
	}
	a.Arm(0)
	<-entered
	finishedAtClose := make(chan bool, 1)
	go func() {
		a.Close()
		finishedAtClose <- finished.Load()
	}()
	// Release the fire only once Close is under way: a Close that did not wait for the
	// goroutine would have returned by now, before the fire finished.
	require.Eventually(t, a.closing.Load, wait, 100*time.Microsecond)
	close(release)
	assert.True(t, <-finishedAtClose, "Close returned before the fire under way finished")
}

func TestNewNilPanics(t *testing.T) {
	assert.Panics(t, func() { New(nil) })
}

// TestNoBackstopArmsNoRuntimeTimer: NewNoBackstop's settings go to the timerfd alone, New's
// also to a runtime timer.
func TestNoBackstopArmsNoRuntimeTimer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the backstop exists only beside a timerfd")
	}
	nb := NewNoBackstop(func() {})
	defer nb.Close()
	nb.Arm(time.Hour)
	assert.Nil(t, nb.tmr, "no runtime timer without a backstop")
	b := New(func() {})
	defer b.Close()
	b.Arm(time.Hour)
	assert.NotNil(t, b.tmr, "New arms its backstop")
}
