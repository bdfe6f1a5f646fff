// Package alarm is the loop's alarm clock: a one-shot timer that calls a function on a
// goroutine of its own at a deadline, with the precision of the OS's high-resolution
// timers rather than that of Go's runtime timers.
//
// Go's runtime timers fire up to about a millisecond late when the process is idle: the
// runtime then waits for its next timer in epoll_wait, whose timeout is in whole
// milliseconds (runtime/netpoll_epoll.go rounds a wait under 1 ms up to 1 ms and truncates
// longer ones). The scheduler keeps a single timer for its earliest deadline, so every
// Sleep and every room tick of an idle loop inherited that lateness (docs/rooms.md, "The
// alarm"). On Linux an Alarm is a timerfd (CLOCK_MONOTONIC) that a dedicated goroutine
// waits on with a plain blocking read(2), outside Go's netpoller: the kernel wakes that
// thread from an hrtimer, with microsecond precision. Elsewhere, or when the timerfd
// cannot be made, it falls back to a runtime timer (Precise reports which).
//
// An Alarm satisfies scheduler.Alarm.
package alarm

import (
	"os"
	"sync/atomic"
	"time"
)

// Alarm calls its fire function once per Arm, on a goroutine of its own, when the time
// given to Arm has passed. Arm, Stop and Close are called from one goroutine at a time
// (the loop's); fire runs on the alarm's goroutine and must not call them.
type Alarm struct {
	fire    func()
	precise bool // a timerfd and its goroutine are in use

	fd      int           // the timerfd, when precise
	f       *os.File      // fd, registered with Go's netpoller
	closing atomic.Bool   // set by Close before it wakes the goroutine
	done    chan struct{} // closed when the goroutine has returned

	tmr    *time.Timer // the fallback runtime timer, when not precise
	closed bool
}

// New returns a disarmed alarm that calls fire. On Linux it creates a timerfd and starts
// the goroutine that waits on it (Close releases both); if the timerfd cannot be made
// (out of file descriptors) or off Linux, the alarm is a runtime timer. Any goroutine.
func New(fire func()) *Alarm {
	if fire == nil {
		panic("alarm: New(nil)")
	}
	a := &Alarm{fire: fire, fd: -1}
	a.open()
	return a
}

// Precise reports whether the alarm is a timerfd (true) or the runtime-timer fallback.
// Any goroutine.
func (a *Alarm) Precise() bool { return a.precise }

// Arm sets the alarm to call fire once, d from now (as soon as possible if d <= 0),
// replacing any earlier setting: a setting replaced before it went off never fires. After
// Close it does nothing. On the alarm's owner goroutine.
func (a *Alarm) Arm(d time.Duration) {
	if a.closed {
		return
	}
	if a.precise && a.set(max(d, 1)) == nil {
		return
	}
	a.runtimeArm(d)
}

// Stop disarms the alarm: a setting that has not gone off yet never fires (a fire already
// under way may still call fire). Arm sets it again. On the alarm's owner goroutine.
func (a *Alarm) Stop() {
	if a.closed {
		return
	}
	if a.precise {
		_ = a.set(0)
	}
	if a.tmr != nil {
		a.tmr.Stop()
	}
}

// Close disarms the alarm for good: it ends the alarm's goroutine and closes the timerfd
// before returning (a fire already under way finishes first). Arm and Stop do nothing
// afterwards. Idempotent. On the alarm's owner goroutine.
func (a *Alarm) Close() {
	if a.closed {
		return
	}
	a.closed = true
	if a.tmr != nil {
		a.tmr.Stop()
	}
	if a.precise {
		a.shut()
	}
}

// runtimeArm arms the fallback runtime timer.
func (a *Alarm) runtimeArm(d time.Duration) {
	if a.tmr == nil {
		a.tmr = time.AfterFunc(d, a.fire)
		return
	}
	a.tmr.Reset(d)
}
