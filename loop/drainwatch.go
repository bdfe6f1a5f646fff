package loop

import "golang.org/x/sys/unix"

// drainWatch tells the loop when a connection whose output backed up can take more, so
// that a stream parked on backpressure is woken by the kernel instead of polling. gnet
// v2.10.0 has no "output drained" event (docs/gnet-faults.md), so the watch keeps an epoll
// instance of its own: each watched socket is in it for EPOLLOUT|EPOLLONESHOT (a socket may
// be in several epoll sets; gnet's own registration is unaffected), and one goroutine waits
// in epoll_wait and posts what it sees to the loop. On the loop a report either wakes the
// waiter (the backlog is down to streamHighWater) or re-arms the watch: re-arming a socket
// that is still writable reports at once, so no wake-up is lost, and since gnet flushes its
// buffer in the same loop turn the watch fires about once per socket buffer drained.
//
// drainWatch is loop-confined; the goroutine's side is a drainPoller.
type drainWatch struct {
	srv     *Server
	started bool
	p       *drainPoller          // nil until started, or if it could not be created
	entries map[int32]*drainEntry // watched descriptors
	gen     int32                 // distinguishes a reused descriptor
}

// drainPoller is the epoll instance and the goroutine waiting on it. Its fields are set
// before the goroutine starts and never change: safe for concurrent use.
type drainPoller struct {
	epfd    int
	stopFd  int           // an eventfd in the set: written to stop the goroutine
	stopped chan struct{} // closed when the goroutine has returned
}

// drainEntry is one connection waiting for its output to drain.
type drainEntry struct {
	cs   *conn
	gen  int32
	low  int    // the backlog at or under which wake runs
	wake func() // run on the loop when the backlog is low or the connection closed
}

// start creates the epoll instance and its goroutine on first use. Loop-confined.
func (w *drainWatch) start() bool {
	if !w.started {
		w.started = true
		w.entries = map[int32]*drainEntry{}
		p, err := newDrainPoller()
		if err != nil {
			w.srv.log.Warn("loop: no drain watch (streams poll for backpressure)", "err", err)
			return false
		}
		w.srv.drainPoll.Store(p)
		w.p = p
		go p.run(w)
	}
	return w.p != nil
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
		var ready []unix.EpollEvent
		for _, ev := range events[:n] {
			if ev.Pad == -1 { // the stop eventfd
				return
			}
			ready = append(ready, ev)
		}
		if len(ready) > 0 && !w.srv.door.post(func() { w.report(ready) }) {
			return // the loop is gone
		}
	}
}

// watch arranges for wake to run on the loop once cs's unsent output is at most
// streamHighWater (at once if it already is) or cs has closed. It reports false if the
// watch is unavailable; the caller then polls. Loop-confined.
func (w *drainWatch) watch(cs *conn, wake func()) bool {
	return w.watchBelow(cs, streamHighWater, wake)
}

// watchBelow is watch with another threshold: wake runs once the backlog is at most low.
func (w *drainWatch) watchBelow(cs *conn, low int, wake func()) bool {
	if cs.state == connClosed || !w.start() {
		return false
	}
	fd := int32(cs.gc.Fd())
	if old := w.entries[fd]; old != nil { // one waiter per connection: the newer one wins
		w.forget(fd)
		old.wake()
	}
	w.gen++
	e := &drainEntry{cs: cs, gen: w.gen, low: low, wake: wake}
	ev := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLONESHOT, Fd: fd, Pad: e.gen}
	if err := unix.EpollCtl(w.p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
		return false
	}
	w.entries[fd] = e
	return true
}

// report handles the goroutine's reports on the loop.
func (w *drainWatch) report(evs []unix.EpollEvent) {
	for _, ev := range evs {
		e := w.entries[ev.Fd]
		if e == nil || e.gen != ev.Pad {
			continue // forgotten, or the descriptor now serves another connection
		}
		if e.cs.state != connClosed && e.cs.gc.OutboundBuffered() > e.low {
			re := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLONESHOT, Fd: ev.Fd, Pad: e.gen}
			if unix.EpollCtl(w.p.epfd, unix.EPOLL_CTL_MOD, int(ev.Fd), &re) == nil {
				continue
			}
		}
		w.forget(ev.Fd)
		e.wake()
	}
}

// closed forgets cs (it closed) and wakes its waiter. Called from connClosed, before gnet
// closes the descriptor. Loop-confined.
func (w *drainWatch) closed(cs *conn) {
	if w.entries == nil {
		return
	}
	fd := int32(cs.gc.Fd())
	if e := w.entries[fd]; e != nil && e.cs == cs {
		w.forget(fd)
		e.wake()
	}
}

func (w *drainWatch) forget(fd int32) {
	delete(w.entries, fd)
	_ = unix.EpollCtl(w.p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
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
