package loop

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// events is Server seen by gnet: its callbacks are not part of Server's API.
type events Server

// controlMarker tags the control connection registered at the first tick.
type controlMarker struct{}

func (e *events) OnBoot(eng gnet.Engine) gnet.Action {
	s := (*Server)(e)
	s.eng.Store(&eng)
	s.addr.Store(s.guard.addr()) // replaces the eng.Dup/Getsockname block (gnet holds only a placeholder listener)
	return gnet.None
}

// OnTick runs on gnet's ticker goroutine, after the event loop exists. Its first call
// registers one end of a socket pair with the loop as the control connection: a byte
// written to the other end (s.ctlPeer) wakes the loop to run the door's batch and pump.
func (e *events) OnTick() (time.Duration, gnet.Action) {
	s := (*Server)(e)
	s.tickOnce.Do(func() {
		if err := s.registerControl(); err != nil {
			s.startErr.Store(&err)
			s.log.Error("loop: cannot reach the event loop; stopping", "err", err)
			if eng := s.eng.Load(); eng != nil {
				go func() { _ = eng.Stop(context.Background()) }()
			}
		}
	})
	return 24 * time.Hour, gnet.None
}

func (s *Server) registerControl() error {
	fds, err := socketpair(false)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "baton-control")
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		_ = unix.Close(fds[1])
		return fmt.Errorf("control conn: %w", err)
	}
	if err := unix.SetNonblock(fds[1], true); err != nil {
		_ = unix.Close(fds[1])
		_ = nc.Close()
		return fmt.Errorf("control peer: %w", err)
	}
	s.ctlPeer.Store(int64(fds[1]))
	ctx := gnet.NewContext(gnet.NewNetConnContext(context.Background(), nc), controlMarker{})
	eng := s.eng.Load()
	ch, err := eng.Register(ctx)
	if err != nil {
		_ = nc.Close()
		return fmt.Errorf("register control conn: %w", err)
	}
	if res := <-ch; res.Err != nil {
		return fmt.Errorf("register control conn: %w", res.Err)
	}
	return nil
}

func (e *events) OnShutdown(gnet.Engine) {}

func (e *events) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	s := (*Server)(e)
	if _, ok := gc.Context().(controlMarker); ok {
		s.control = gc
		s.sched.BindLoop()                       // this is the loop goroutine: posted functions run here
		s.life.move(stateStarting, stateServing) // fails if a Shutdown came first: its drain is posted
		s.housekeep = s.sched.AfterFunc(s.sweepEvery, s.housekeepFn)
		s.startWatchdog()
		s.startLag()
		if !s.runOnStart() { // an OnStart function failed: stop without serving (onstart.go)
			s.door.open(int(s.ctlPeer.Load())) // the stop it requested runs through the door
			return nil, gnet.None
		}
		close(s.ready)
		s.door.open(int(s.ctlPeer.Load()))
		s.guard.start(*s.eng.Load()) // accept once the loop is reachable
		return nil, gnet.None
	}
	cs := s.newConn(gc)
	gc.SetContext(cs)
	return nil, gnet.None
}

func (e *events) OnClose(gc gnet.Conn, _ error) gnet.Action {
	s := (*Server)(e)
	cs, ok := gc.Context().(*conn)
	if !ok {
		if _, ctl := gc.Context().(controlMarker); ctl && s.life.load() < stateStopping { // the loop is exiting unasked (gnet closes every connection on the loop goroutine as it exits)
			s.finalStop() // unwind tasks here, on the loop goroutine; scheduler.Close panics on any other once a task ran
		}
		return gnet.None
	}
	s.connClosed(cs)
	return gnet.None
}

func (e *events) OnTraffic(gc gnet.Conn) gnet.Action {
	s := (*Server)(e)
	s.busyStart()
	defer s.busyEnd()
	cs, ok := gc.Context().(*conn)
	if !ok { // the control connection: the door's batch or a pump was requested (door.go)
		return s.controlTraffic(gc)
	}
	s.noteRead(cs)
	defer s.noteCarried(cs)
	s.connTraffic(gc, cs)
	return gnet.None
}

// controlTraffic is OnTraffic for the control connection: the door's batch or a pump was
// requested (door.go). Out of line, so that OnTraffic for a client connection stays short.
//
//go:noinline
func (s *Server) controlTraffic(gc gnet.Conn) gnet.Action {
	_, _ = gc.Discard(-1)
	if s.runDoor() != nil {
		return gnet.Shutdown
	}
	return gnet.None
}

// trafficWaits is connTraffic for a connection that cannot parse now (a request in flight,
// or the client is not reading its responses): it bounds the input held meanwhile and
// reports whether the read is left for later. Out of line: a read that parses at once
// keeps connTraffic short (docs/bench.md, "The split of loop").
//
//go:noinline
func (s *Server) trafficWaits(gc gnet.Conn, cs *conn) bool {
	if s.inputBound(cs) {
		// Input beyond the bound while it cannot be parsed (a request in flight, or the
		// client is not reading its responses): answer what is in flight, then close.
		_, _ = gc.Discard(-1)
		if cs.blocked {
			// Not reading its responses either: nothing it sent will be answered.
			s.log.Debug("loop: too much unparsed input from a client that does not read; closing", "remote", gc.RemoteAddr())
			s.closeNow(cs)
			return true
		}
		s.log.Debug("loop: too much unparsed input; closing after the current response", "remote", gc.RemoteAddr())
		cs.closeAfterResponse()
		return true
	}
	return cs.ctx != nil || cs.blocked // parsed when the current request finishes or the client reads
}

// connTraffic is OnTraffic for a client connection. It is apart so that OnTraffic, with
// few returns, gets open-coded defers: with this body inline its returns times its defers
// passed the compiler's limit, and every read paid for defer records on the stack.
func (s *Server) connTraffic(gc gnet.Conn, cs *conn) {
	if cs.state >= connClosing { // no more requests: drop what the client sends
		_, _ = gc.Discard(-1)
		return
	}
	if s.life.load() >= stateStopping {
		// No request runs any more (the loop waits for the last accepted connections to
		// reach it, then stops): one that arrives now is answered 503 at once, before its
		// idle deadline could close the connection without a response.
		if s.answerUnserved(cs) {
			s.flush(cs)
		}
		return
	}
	if cs.raw != nil {
		s.rawTraffic(cs)
		return
	}
	if cs.stream != nil { // a streamed request body (StreamBody; bodystream.go)
		s.streamTraffic(cs)
	}
	if (cs.busy() || cs.blocked) && s.trafficWaits(gc, cs) {
		return
	}
	cs.direct = s.handlersOnLoop && !cs.carried // a handler goroutine would outlive the read buffer
	s.serve(cs)
	cs.direct = false
	// New requests ran their first slice in serve. Tasks that were ready before (a task
	// that yielded, one woken meanwhile) run from the control socket's pump, once per loop
	// turn: running them here would give a yielding task a slice per connection read.
	// With none ready, timers that just fell due run here (pumpTimers).
	s.flushDirty()
	if _, ready := s.sched.Len(); ready > 0 {
		s.postPump()
	} else {
		s.pumpTimers()
	}
}
