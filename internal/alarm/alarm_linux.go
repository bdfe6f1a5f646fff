//go:build linux

package alarm

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// open makes the timerfd and starts the goroutine that waits on it. On failure the alarm
// stays a runtime timer.
func (a *Alarm) open() {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		return
	}
	a.fd, a.precise = fd, true
	a.f = os.NewFile(uintptr(fd), "alarm-timerfd")
	a.done = make(chan struct{})
	go a.wait()
}

// set arms the timerfd to expire d from now (relative to CLOCK_MONOTONIC, the clock of
// Go's monotonic readings); d == 0 disarms it.
func (a *Alarm) set(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	return unix.TimerfdSettime(a.fd, 0, &spec, nil)
}

// wait is the alarm's goroutine: each expiry of the timerfd makes it readable (its count
// of expiries), and fire runs. It returns when Close closes the file.
func (a *Alarm) wait() {
	defer close(a.done)
	var buf [8]byte
	for {
		_, err := a.f.Read(buf[:])
		if a.closing.Load() || errors.Is(err, os.ErrClosed) {
			return
		}
		if err == nil {
			a.expired()
		}
		// Any other error (none is expected of a timerfd this alarm owns) is retried:
		// the file stays registered, so the next expiry is waited for again.
	}
}

// shutdown ends the goroutine (closing the file wakes its Read) and waits for it.
func (a *Alarm) shutdown() {
	a.closing.Store(true)
	_ = a.f.Close()
	<-a.done
	a.fd = -1
}
