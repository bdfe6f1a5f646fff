package loop

import "golang.org/x/sys/unix"

// hasDrainPoller says whether the platform has a drainPoller: here, an epoll instance.
const hasDrainPoller = true

// drainPoller is the drain watch's epoll instance and the goroutine waiting on it (see
// drainWatch). Each watched socket is in the set for EPOLLOUT|EPOLLONESHOT, with the
// watch's generation in the event's Pad. Its fields are set before the goroutine starts
// and never change: safe for concurrent use.
type drainPoller struct {
	epfd    int
	stopFd  int           // an eventfd in the set: written to stop the goroutine
	stopped chan struct{} // closed when the goroutine has returned
}

func newDrainPoller() (*drainPoller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(efd), Pad: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(efd)
		return nil, err
	}
	return &drainPoller{epfd: epfd, stopFd: efd, stopped: make(chan struct{})}, nil
}

// run waits for reports and posts them to w on the loop. Its own goroutine: it touches w
// only inside the functions it posts.
func (p *drainPoller) run(w *drainWatch) {
	defer close(p.stopped)
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		var ready []drainReport
		for _, ev := range events[:n] {
			if ev.Pad == -1 { // the stop eventfd
				return
			}
			ready = append(ready, drainReport{fd: ev.Fd, gen: ev.Pad})
		}
		if len(ready) > 0 && !w.srv.door.post(func() { w.report(ready) }) {
			return // the loop is gone
		}
	}
}

// drainReport is one "writable" report of the poller: the descriptor and the generation
// of the watch it was armed for.
type drainReport struct {
	fd, gen int32
}

// report handles the goroutine's reports on the loop.
func (w *drainWatch) report(evs []drainReport) {
	for _, ev := range evs {
		e := w.entries[ev.fd]
		if e == nil || e.gen != ev.gen {
			continue // forgotten, or the descriptor now serves another connection
		}
		if e.cs.state != connClosed && e.cs.unsent() > e.low {
			if w.p.rearm(ev.fd, e.gen) == nil {
				continue
			}
		}
		w.forget(ev.fd)
		e.wake()
	}
}

// arm adds fd to the set for one EPOLLOUT report carrying gen. Loop-confined.
func (p *drainPoller) arm(fd, gen int32) error {
	ev := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLONESHOT, Fd: fd, Pad: gen}
	return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
}

// rearm asks for one more EPOLLOUT report on fd, already in the set. Loop-confined.
func (p *drainPoller) rearm(fd, gen int32) error {
	ev := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLONESHOT, Fd: fd, Pad: gen}
	return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev)
}

// disarm removes fd from the set. Loop-confined.
func (p *drainPoller) disarm(fd int32) {
	_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
}

// stop ends the goroutine and closes the descriptors. Call it once the loop has stopped.
// Safe for concurrent use.
func (p *drainPoller) stop() {
	var one = [8]byte{1}
	_, _ = unix.Write(p.stopFd, one[:])
	<-p.stopped
	_ = unix.Close(p.epfd)
	_ = unix.Close(p.stopFd)
}
