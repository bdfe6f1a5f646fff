package loop

import "errors"

// drainWatch tells the loop when a connection whose output backed up can take more, so
// that a stream parked on backpressure is woken by the kernel instead of polling. gnet
// v2.10.0 has no "output drained" event (docs/gnet-faults.md), so the watch keeps a poller
// of its own (drainPoller; on Linux an epoll instance, drainwatch_linux.go): each watched
// socket is in it for one "writable" report (a socket may be in several epoll sets; gnet's
// own registration is unaffected), and one goroutine waits on it and posts what it sees to
// the loop. On the loop a report either wakes the waiter (the backlog is down to the
// waiter's threshold) or re-arms the watch: re-arming a socket that is still writable
// reports at once, so no wake-up is lost, and since gnet flushes its buffer in the same
// loop turn the watch fires about once per socket buffer drained.
//
// Without a poller (off Linux, where drainwatch_other.go has none, or when creating it
// failed) watch reports false and nothing is watched: the waiters then park for streamPoll
// at a time and look at the backlog again when that park times out (loopMode.flush and
// goroutineMode.flush in mode.go, RawConn.Flush in takeover.go), so a stream parked on
// backpressure is woken by its own timeout, about once a millisecond, until the client has
// read enough; a connection that closes ends the park the same way.
//
// drainWatch is loop-confined; the goroutine's side is a drainPoller.
type drainWatch struct {
	srv     *Server
	started bool
	p       *drainPoller          // nil until started, or if there is none
	entries map[int32]*drainEntry // watched descriptors
	gen     int32                 // distinguishes a reused descriptor
}

// drainEntry is one connection waiting for its output to drain.
type drainEntry struct {
	cs   *conn
	gen  int32
	low  int    // the backlog at or under which wake runs
	wake func() // run on the loop when the backlog is low or the connection closed
}

// start creates the poller and its goroutine on first use. Loop-confined.
func (w *drainWatch) start() bool {
	if !w.started {
		w.started = true
		w.entries = map[int32]*drainEntry{}
		p, err := newDrainPoller()
		if err != nil {
			if errors.Is(err, errors.ErrUnsupported) {
				w.srv.log.Info("loop: no drain watch on this platform (streams poll for backpressure)", "err", err)
			} else {
				w.srv.log.Warn("loop: no drain watch (streams poll for backpressure)", "err", err)
			}
			return false
		}
		w.srv.drainPoll.Store(p)
		w.p = p
		go p.run(w)
	}
	return w.p != nil
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
	if err := w.p.arm(fd, e.gen); err != nil {
		return false
	}
	w.entries[fd] = e
	return true
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
	w.p.disarm(fd)
}
