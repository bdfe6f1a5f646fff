package loop

import (
	"errors"
	"time"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/internal/scheduler"
)

// The takeover seam: a request hands its connection to a handler of raw bytes
// (Ctx.Takeover), as net/http's Hijacker does, and the engine then only carries bytes
// for it: it writes the head that switches protocols, passes the input to
// RawHandler.OnData, writes what RawConn.Write gathers at
// the end of the loop turn (or at RawConn.Flush), and tells the handler of the sweep, the
// drain, its request handler's return and the close. The engine knows nothing of the
// protocol on top (loop/ws is its client): it does not parse, time out or close a taken
// connection on its own, except when the server stops.
//
// Goroutine rules. A taken connection belongs to its loop:
//   - every RawHandler method is called on the loop with the connection, one at a time,
//     never from inside another RawHandler call of the same connection: OnData,
//     OnWritable, OnSweep, OnDrain and OnClose outside any task (OnClose may also run
//     from inside a RawConn method whose write found the connection closed),
//     OnHandlerReturn in the handler's task's last slice (single-thread mode) or outside
//     any task (multi-thread mode). None may park. The first may run before Takeover has
//     returned to a multi-thread handler: the methods get the RawConn for that reason.
//   - RawConn's methods are loop-confined: call them from a RawHandler method, a task of
//     the loop (the handler's, in single-thread mode, or another, such as a room's tick)
//     or a function run on the loop (Loop.Post). A multi-thread handler calls them through
//     Task.OnLoop. Wait parks the calling task and so needs one.

// RawHandler is a protocol a request hands its connection to with Ctx.Takeover. See the
// goroutine rules above: every method runs on the connection's loop and must not park.
type RawHandler interface {
	// OnData is given the input buffered for the connection (a view into the
	// connection's read buffer, valid during the call) and returns how many bytes of it
	// it consumed; the rest is given again, with what arrives next, at the next call.
	// Input that arrived with the request, behind its head, is given once the handler's
	// current slice has ended.
	OnData(rc *RawConn, in []byte) (consumed int)
	// OnWritable runs once after Flush(wake) asked for it, when the output queued is at
	// most wake, or the connection closed.
	OnWritable(rc *RawConn)
	// OnSweep runs at every connection sweep while the connection is open, with the
	// loop's clock: every quarter of the shortest of Config.ReadHeaderTimeout,
	// IdleTimeout and LingerTimeout, at most 500 ms and at least 10 ms apart. The handler
	// enforces its own timeouts with it (the engine's idle, header and write-stall
	// deadlines do not apply to a taken connection); one that needs a finer grain keeps
	// its own timer (Loop.Every).
	OnSweep(rc *RawConn, now time.Time)
	// OnDrain runs once when a graceful shutdown begins (after the Loop.OnDrain hooks):
	// the handler says goodbye in its protocol and closes the connection (Close) when
	// it is done. The drain waits for the connection until its deadline.
	OnDrain(rc *RawConn)
	// OnHandlerReturn runs once when the request handler that took the connection over
	// returns (panicked: it panicked). The connection stays open until Close: it may
	// outlive the handler.
	OnHandlerReturn(rc *RawConn, panicked bool)
	// OnClose runs once when the connection ends: err is ErrClientGone when it closed
	// (the client closed it, a write failed, or after Close), ErrServerClosed when the
	// server stops with it open. Output written from OnClose at the stop is still sent
	// before the close; after ErrClientGone nothing can be.
	OnClose(rc *RawConn, err error)
}

// RawConn is a connection taken over from HTTP by Ctx.Takeover. It is loop-confined (see
// the goroutine rules above) and stays valid after the connection closed: its writes are
// then dropped.
type RawConn struct {
	srv *Server
	cs  *conn
	h   RawHandler

	linger     time.Duration     // the linger bound a graceful Close set; 0: Config.LingerTimeout
	drained    bool              // open when the drain began: counted in the drain report
	counted    bool              // counted in the drain report
	closed     bool              // OnClose ran
	wrote      bool              // Write ran since the last sweep: the output buffer is in use
	waiters    []scheduler.Waker // tasks parked in Wait
	onWritable func()            // rc.writable, made once: a method value allocates
}

var (
	errTakeoverHTTP10  = errors.New("loop: Takeover of an HTTP/1.0 request (a protocol switch needs HTTP/1.1)")
	errTakeoverClosing = errors.New("loop: Takeover refused: the connection closes after this response (the server drains)")
	errTakeoverWritten = errors.New("loop: Takeover after the response was written")
	errTakeoverStopped = errors.New("loop: Takeover refused: the server stopped")
	errWaitNoTask      = errors.New("loop: RawConn.Wait outside a task: nothing to park")
)

// Takeover hands c's connection to h: from now on the engine reads no more requests from
// it and writes no HTTP. It writes head at once, as is: the response that switches
// protocols (e.g. "HTTP/1.1 101 Switching Protocols" and its headers, ending with an empty
// line). Then h gets the input (OnData) and writes its output (RawConn.Write). Input that
// arrived with the request, behind its head, is given to OnData once the caller's slice
// ended (single-thread mode) or soon after (multi-thread mode). The request is recorded
// with status 101, its handler deadline (Config.HandlerTimeout) is lifted and its
// admission slot given back: the handler may go on as long as the connection lives (or
// return, leaving the connection to h). Takeover answers nothing: on an error (an
// HTTP/1.0 request, a response already written, a connection that closes after this
// response because the server drains, a stopped server) the request is still the
// handler's to answer. It panics if h is nil. Call it from the handler, in either mode.
func (c *Ctx) Takeover(h RawHandler, head []byte) (*RawConn, error) {
	if h == nil {
		panic("loop: Ctx.Takeover with a nil RawHandler")
	}
	rc, err := (*RawConn)(nil), errTakeoverStopped
	c.Task.OnLoop(func() { rc, err = c.srv.takeover(c, h, head) })
	return rc, err
}

// takeover is Takeover on the loop.
func (s *Server) takeover(c *Ctx, h RawHandler, head []byte) (*RawConn, error) {
	cs := c.conn
	switch {
	case c.req.ProtoMinor == 0:
		return nil, errTakeoverHTTP10
	case cs.stream != nil || c.headState() != headNone:
		return nil, errTakeoverWritten
	case s.life.draining() || c.mustClose || !cs.accepting():
		return nil, errTakeoverClosing
	}
	if !c.claimHead(headHandler) {
		return nil, errTakeoverWritten
	}
	c.status = 101
	if c.deadline != nil {
		c.deadline.Stop()
		c.deadline = nil
	}
	if c.counted {
		c.counted = false
		if next := s.adm.finish(s.now() - c.acceptedAt - int64(c.queueWait)); next != nil {
			next.counted = true
			s.start(next, false)
		}
	}
	s.keepHead(c) // the handler consumes the input the head may lie in
	rc := &RawConn{srv: s, cs: cs, h: h}
	cs.raw = rc
	cs.deadline, cs.deadlineKind = 0, deadlineNone
	c.out = c.out[:0]
	cs.out = append(cs.out, head...)
	s.flush(cs)
	// A taken connection keeps no buffer of the HTTP side: the parsed head (the request's
	// copy in c stays for the handler), the output buffers (made again by the first write).
	cs.req = httpcodec.Request{}
	cs.out, c.out = nil, nil
	if cs.gc.InboundBuffered() > 0 {
		// Input behind the request's head: the handler gets it once the caller's slice
		// ended (it may still set up its state).
		s.door.post(func() {
			if cs.raw == rc && cs.state == connOpen {
				s.rawData(rc)
			}
		})
	}
	return rc, nil
}

// Write queues p (copied) for the connection; it is written at the end of the loop turn,
// or at Flush. It returns ErrClientGone once the connection no longer takes output
// (closing or closed). Loop-confined.
func (rc *RawConn) Write(p []byte) (int, error) {
	cs := rc.cs
	if !cs.writable() {
		return 0, ErrClientGone
	}
	cs.out = append(cs.out, p...)
	rc.wrote = true
	rc.srv.markDirty(cs)
	return len(p), nil
}

// Queued returns the output queued in the server for the connection and not yet taken by
// the kernel: what Write gathered and the socket's backlog. Loop-confined.
func (rc *RawConn) Queued() int {
	cs := rc.cs
	if cs.state == connClosed {
		return 0
	}
	return cs.unsent() + len(cs.out)
}

// Flush hands the output gathered by Write to the socket now. With wake >= 0 it also
// arranges for OnWritable to run once, when the output queued (Queued) is at most wake
// (at once if it already is) or the connection closed, and reports whether it could:
// false where the platform has no way to watch a socket drain, or the connection closed;
// poll Queued then. A later Flush with wake >= 0 replaces the watch (the replaced one's
// OnWritable runs). Loop-confined.
func (rc *RawConn) Flush(wake int) bool {
	s, cs := rc.srv, rc.cs
	s.flush(cs)
	if wake < 0 || cs.state == connClosed {
		return false
	}
	if rc.onWritable == nil {
		rc.onWritable = rc.writable
	}
	return s.drains.watchBelow(cs, wake, rc.onWritable)
}

func (rc *RawConn) writable() {
	if !rc.closed {
		rc.h.OnWritable(rc)
	}
}

// Close closes the connection once the output queued is written. linger > 0 closes
// gracefully: the write side is shut once the output is written and the client's bytes
// are read and dropped until it closes too, for at most linger (and at most
// Config.LingerTimeout), so that the last output is not destroyed by a reset. linger <= 0
// tries once more to write what is queued and closes at once. OnClose follows when the
// connection has closed. Closing a closed connection does nothing. Loop-confined.
func (rc *RawConn) Close(linger time.Duration) {
	s, cs := rc.srv, rc.cs
	if cs.state == connClosed {
		return
	}
	rc.count(linger > 0)
	s.flush(cs)
	if linger <= 0 {
		s.closeNow(cs)
		return
	}
	rc.linger = linger
	s.beginClose(cs)
	rc.boundLinger()
}

// boundLinger shortens a lingering close's deadline to the bound Close gave. Loop-confined.
func (rc *RawConn) boundLinger() {
	if cs := rc.cs; rc.linger > 0 && cs.deadlineKind == deadlineLinger {
		cs.deadline = min(cs.deadline, rc.srv.now()+int64(rc.linger))
	}
}

// Fd returns the connection's socket descriptor, for reading socket options (such as
// TCP_INFO), or -1 once it closed. Do not read, write or close it. Loop-confined.
func (rc *RawConn) Fd() int {
	if rc.cs.state == connClosed {
		return -1
	}
	return rc.cs.gc.Fd()
}

// Wait parks the calling task until Wake is called, d passes (d > 0; ErrTimeout), or the
// task is cancelled (its cancellation error). Any number of tasks may wait; Wake wakes
// them all, so each checks again what it waits for. Outside a task it returns an error at
// once. Loop-confined.
func (rc *RawConn) Wait(d time.Duration) error {
	t := rc.srv.sched.Current()
	if t == nil {
		return errWaitNoTask
	}
	wk := t.Waker()
	rc.waiters = append(rc.waiters, wk)
	var err error
	if d > 0 {
		err = t.ParkTimeout(scheduler.ReasonWait, d)
	} else {
		err = t.Park(scheduler.ReasonWait)
	}
	for i, w := range rc.waiters { // still listed after a timeout or a cancellation
		if w == wk {
			last := len(rc.waiters) - 1
			rc.waiters[i] = rc.waiters[last]
			rc.waiters[last] = scheduler.Waker{}
			rc.waiters = rc.waiters[:last]
			break
		}
	}
	if errors.Is(err, scheduler.ErrTimeout) {
		return ErrTimeout
	}
	return err
}

// Wake wakes every task parked in Wait. Loop-confined.
func (rc *RawConn) Wake() {
	for i, wk := range rc.waiters {
		wk.Wake()
		rc.waiters[i] = scheduler.Waker{}
	}
	rc.waiters = rc.waiters[:0]
}

// rawTraffic handles input of a taken connection: the handler consumes it, and a task its
// input woke runs at once. Loop-confined (OnTraffic).
func (s *Server) rawTraffic(cs *conn) {
	_, before := s.sched.Len()
	s.rawData(cs.raw)
	if _, ready := s.sched.Len(); ready > 0 && before == 0 {
		// Only the tasks this input woke are ready: run them now, as a new request's
		// first slice runs at once, instead of a turn later through the control socket.
		// No task that was ready before gets an extra slice for this read.
		s.pump()
		return
	}
	s.flushDirty()
	if _, ready := s.sched.Len(); ready > 0 {
		s.postPump()
	} else {
		s.pumpTimers()
	}
}

// rawSweep gives a taken connection its periodic sweep, and gives back its output buffer
// when it is empty and was not written to since the last sweep: an idle connection keeps
// none, and one the server pushes to (a room's state every tick) keeps it rather than
// making it again after every sweep. Loop-confined.
func (s *Server) rawSweep(rc *RawConn, now int64) {
	if cs := rc.cs; rc.wrote {
		rc.wrote = false
	} else if len(cs.out) == 0 {
		cs.out = nil
	}
	if !rc.closed {
		rc.h.OnSweep(rc, s.timeAt(now))
	}
}

// rawData gives the connection's buffered input to its handler. Loop-confined.
func (s *Server) rawData(rc *RawConn) {
	cs := rc.cs
	if rc.closed || cs.state != connOpen {
		_, _ = cs.gc.Discard(-1)
		return
	}
	in, _ := cs.gc.Peek(-1)
	if len(in) == 0 {
		return
	}
	n := rc.h.OnData(rc, in)
	if cs.state == connClosed {
		return // closed while handling it (a failed write): the buffer is gnet's again
	}
	discard(cs.gc, min(n, len(in)))
}

// rawReturned runs when the handler of a taken connection returns. Loop-confined.
func (s *Server) rawReturned(rc *RawConn, c *Ctx) {
	if !rc.closed {
		rc.h.OnHandlerReturn(rc, c.aborted)
	}
}

// rawDrain tells a taken connection the drain began. Loop-confined.
func (s *Server) rawDrain(rc *RawConn) {
	rc.drained = true
	if !rc.closed {
		rc.h.OnDrain(rc)
	}
}

// rawClosed runs when gnet reported a taken connection closed. Loop-confined.
func (s *Server) rawClosed(rc *RawConn) {
	rc.count(false) // lost before its handler closed it
	rc.Wake()
	if !rc.closed {
		rc.closed = true
		rc.h.OnClose(rc, ErrClientGone)
	}
}

// rawStopping runs at the final stop, before the connection's output is written for the
// last time. Loop-confined.
func (s *Server) rawStopping(rc *RawConn) {
	rc.count(false)
	rc.Wake()
	if !rc.closed {
		rc.closed = true
		rc.h.OnClose(rc, ErrServerClosed)
	}
}

// count records a connection open when the drain began in the drain report, once.
func (rc *RawConn) count(graceful bool) {
	if !rc.drained || rc.counted {
		return
	}
	rc.counted = true
	if graceful {
		rc.srv.drain.report.TakeoversClosed++
	} else {
		rc.srv.drain.report.TakeoversForced++
	}
}
