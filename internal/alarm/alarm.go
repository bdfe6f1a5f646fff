// Package alarm is the loop's alarm clock: a one-shot timer that calls a function on a
// goroutine of its own at a deadline, with the precision of the OS's high-resolution
// timers rather than that of Go's runtime timers.
//
// Go's runtime timers fire up to about a millisecond late when the process is idle: the
// runtime then waits for its next timer in epoll_wait, whose timeout is in whole
// milliseconds (runtime/netpoll_epoll.go rounds a wait under 1 ms up to 1 ms and truncates
// longer ones). The scheduler keeps a single timer for its earliest deadline, so every
// Sleep and every room tick of an idle loop inherited that lateness (docs/rooms.md, "The
// alarm"). On Linux an Alarm is a timerfd (CLOCK_MONOTONIC) registered with Go's
// netpoller, which a goroutine of the alarm's own reads: the netpoller's millisecond
// rounding applies to its timeout, not to readiness, so the kernel's hrtimer makes the
// timerfd readable, and wakes the netpoller's thread, with microsecond precision (a
// blocking read(2) on a thread of its own was as precise and dearer).
// Elsewhere, or when the timerfd cannot be made, it falls back to a runtime timer
// (Precise reports which).
//
// An Alarm satisfies scheduler.Alarm.
package alarm

import (
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Alarm calls its fire function once per Arm, on a goroutine of its own, when the time
// given to Arm has passed. Arm, Stop and Close are called from one goroutine at a time
// (the loop's); fire runs on another goroutine and must not call them.
//
// A precise alarm also arms a runtime timer for the same moment, as a backstop: whichever
// goes off first fires (once per Arm), and the other is disarmed. The runtime timer keeps
// the Go scheduler aware that something is due (an idle thread then waits in the netpoller,
// where it sees the timerfd at once); without one, a timerfd expiry was seen to wait up to
// the 10 ms after which sysmon polls the network itself (docs/rooms.md, "The alarm"). At
// worst the alarm is then as late as a runtime timer.
type Alarm struct {
	fire     func()
	precise  bool // a timerfd and its goroutine are in use
	backstop bool // a precise alarm also arms a runtime timer (New, not NewNoBackstop)

	fd      int           // the timerfd, when precise
	f       *os.File      // fd, registered with Go's netpoller
	closing atomic.Bool   // set by Close before it wakes the goroutine
	done    chan struct{} // closed when the goroutine has returned

	mu      sync.Mutex
	pending bool           // guarded by mu: armed, and not fired since (precise only)
	shut    bool           // guarded by mu: Close ran
	firing  sync.WaitGroup // fires under way (precise only)

	tmr    *time.Timer // the runtime timer: the fallback, or the precise alarm's backstop
	closed bool        // owner-confined
}

// New returns a disarmed alarm that calls fire. On Linux it creates a timerfd and starts
// the goroutine that waits on it (Close releases both); if the timerfd cannot be made
// (out of file descriptors) or off Linux, the alarm is a runtime timer. Any goroutine.
func New(fire func()) *Alarm {
	if fire == nil {
		panic("alarm: New(nil)")
	}
	a := &Alarm{fire: fire, fd: -1, backstop: true}
	a.open()
	return a
}

// NewNoBackstop is New without the runtime-timer backstop: for a process that keeps a P
// free of its event loops (GOMAXPROCS above their number), where an idle thread waits in
// the netpoller and sees the timerfd at once. There the backstop's only effect is a cost:
// moving a runtime timer earlier than the netpoller's wait wakes a thread to re-plan it,
// about once per setting (docs/rooms.md, "The alarm"). Off Linux, or without a timerfd,
// it is the runtime-timer fallback, as New. Any goroutine.
func NewNoBackstop(fire func()) *Alarm {
	if fire == nil {
		panic("alarm: NewNoBackstop(nil)")
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
	if !a.precise {
		a.runtimeArm(d)
		return
	}
	a.mu.Lock()
	a.pending = true
	_ = a.set(max(d, 1)) // were it to fail, the backstop (if any) still fires
	if a.backstop {
		a.runtimeArm(d)
	}
	a.mu.Unlock()
}

// Stop disarms the alarm: a setting that has not gone off yet never fires (a fire already
// under way may still call fire). Arm sets it again. On the alarm's owner goroutine.
func (a *Alarm) Stop() {
	if a.closed {
		return
	}
	a.mu.Lock()
	a.pending = false
	if a.precise {
		_ = a.set(0)
	}
	if a.tmr != nil {
		a.tmr.Stop()
	}
	a.mu.Unlock()
}

// Close disarms the alarm for good: it ends the alarm's goroutine, closes the timerfd and
// waits for a fire under way to return, before returning. Arm and Stop do nothing
// afterwards. Idempotent. On the alarm's owner goroutine.
func (a *Alarm) Close() {
	if a.closed {
		return
	}
	a.Stop()
	a.closed = true
	if a.precise {
		a.mu.Lock()
		a.shut = true
		a.mu.Unlock()
		a.shutdown()
		a.firing.Wait()
	}
}

// take claims the current setting's fire for the caller (the timerfd's goroutine or the
// backstop) and disarms the other; it reports false if the setting was fired, replaced by
// Stop or closed already. Precise only.
func (a *Alarm) take() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.pending || a.shut {
		return false
	}
	a.pending = false
	if a.tmr != nil {
		a.tmr.Stop()
	}
	a.firing.Add(1)
	return true
}

// expired runs fire if the caller claimed the setting. Precise only.
func (a *Alarm) expired() {
	if a.take() {
		defer a.firing.Done()
		a.fire()
	}
}

// runtimeArm arms the runtime timer: the fallback's alarm, or the precise alarm's backstop.
func (a *Alarm) runtimeArm(d time.Duration) {
	if a.tmr == nil {
		fn := a.fire
		if a.precise {
			fn = a.expired
		}
		a.tmr = time.AfterFunc(d, fn)
		return
	}
	a.tmr.Reset(d)
}
