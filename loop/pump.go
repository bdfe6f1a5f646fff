package loop

import (
	"runtime/debug"
	"time"
)

// The loop turn. gnet calls back for I/O (OnTraffic, OnOpen, OnClose); the control
// connection's OnTraffic runs the door's batches; each callback brackets itself with
// busyStart/busyEnd (the loop's utilisation) and ends by pumping: ready tasks run one
// slice each, then the output they produced is written, one write per connection. Tasks
// made ready meanwhile wait for the next turn, requested through the control socket so
// the loop polls I/O in between.

// runDoor runs the door's batch of posted functions, then the pump. It runs in the control
// connection's OnTraffic (inside its busyStart/busyEnd) whenever the control socket was
// readable: a post started a batch, or postPump asked for a turn. An error stops the
// engine.
func (s *Server) runDoor() error {
	batch, wakes := s.door.take()
	for _, fn := range batch {
		s.safely(fn)
	}
	for _, wk := range wakes {
		wk.WakeAt(s.turnAt) // ready since the turn began: no clock read per wake
	}
	// A batch of wakes only (offloaded calls' resumes, the usual case) leaves the turn's
	// reading fresh: the pump's first slice starts at it, so Run reads no clock of its own.
	// Posted functions or a write since make it stale (the flush zeroes lastAt).
	fresh := len(batch) == 0
	s.door.recycle(batch, wakes)
	s.flushDirty() // responses the batch finished (multi-thread handlers) leave before the pump's tasks hold the loop
	s.pumpPosted = false
	st := s.life.load()
	if st < stateStopping {
		at := int64(0)
		if fresh && s.turnAt != 0 && s.lastAt == s.turnAt {
			at = s.turnAt
		}
		s.pumpAt(at)
		st = s.life.load()
	}
	if st >= stateStopping {
		if !s.guard.settled() { // accepted connections still on their way to the loop
			// Nothing runs on the loop any more but this wait: a short sleep per turn leaves
			// the CPU to the accept goroutine's sweep and gnet's registration workers, which
			// a busy turn competes with on a loaded machine (beside a CPU hog, 40 two-shard
			// drains: the wait's longest 29 ms spinning, 13 ms with the sleep; one took 230 ms
			// in multi-thread mode, a quarter of settleLimit).
			time.Sleep(settlePoll)
			s.postPump() // turn again (through epoll) so gnet runs their registrations first
			return nil
		}
		s.finalStop()
		return errEngineShutdown
	}
	return nil
}

// safely runs a posted function, logging rather than propagating a panic so that one bad
// function cannot kill the loop.
func (s *Server) safely(fn func()) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("loop: posted function panicked", "panic", v, "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// pump runs ready tasks and then writes what they produced. It runs after every gnet
// callback and door batch. Tasks made ready while it runs wait for the next turn, so the
// loop polls I/O between batches.
func (s *Server) pump() { s.pumpAt(0) }

// pumpAt is pump with the loop's clock reading at, or 0 to have Run read the clock: at
// must be a reading taken in this callback after which nothing but wakes at or before it
// ran (scheduler.RunAt).
func (s *Server) pumpAt(at int64) {
	if s.acct.on {
		_, ready := s.sched.Len()
		s.acct.loop.ReadyDepth(ready)
	}
	var more bool
	if at != 0 {
		more = s.sched.RunAt(at)
	} else {
		more = s.sched.Run()
	}
	s.afterRun(more)
}

// afterRun follows a Run (more: what it reported): the output the slices produced is written,
// another turn is asked for if tasks remain ready, and a drain that waited for them is
// checked. Loop-confined.
func (s *Server) afterRun(more bool) {
	s.lastAt = 0 // slices ran since: a request dispatched next reads the clock for its start
	s.flushDirty()
	if more {
		s.postPump()
	}
	s.checkDrained()
}

// postPump arranges another pump after the loop has polled I/O: it wakes the loop through
// the door (one byte to the control socket, shared with a batch of posted functions if
// one is pending), and the control connection's OnTraffic runs the door's batch and then
// the pump. The byte goes through epoll with every other connection, so a task that
// yields in a loop gets one slice per turn and cannot starve I/O
// (TestYieldingTaskDoesNotStarveIO); connections that became readable while the last
// slices ran are usually ahead of the byte in epoll's ready list, so their new requests
// are served before ready tasks get another slice. Loop-confined.
func (s *Server) postPump() {
	if s.pumpPosted {
		return
	}
	s.pumpPosted = true
	if !s.door.kick() {
		s.door.post(s.pumpFn) // the door is not open yet: open wakes the loop for it
	}
}

// pumpTimers ends a connection callback that left no task ready: it fires the timers due
// by the callback's start and runs the tasks they woke when the alarm would otherwise be
// needed for them (Scheduler.RunTimers), so that a loop kept turning by input fires its
// rooms' ticks itself, sooner and without the alarm's wake-up through a second thread
// (docs/rooms.md, "The alarm"). Inside a callback (busyStart) only. Loop-confined.
func (s *Server) pumpTimers() {
	if ran, more := s.sched.RunTimers(s.turnAt); ran {
		s.afterRun(more)
	}
}

var pumpByte = [1]byte{1}

// settlePoll is how long a stopping loop sleeps between its checks that the connections
// the listener took last have reached it (runDoor, acceptor.settled): the sweep and the
// registrations take microseconds each, the wait drainListenMinGrace at most.
const settlePoll = 200 * time.Microsecond

// requestStop makes the next door run stop the engine. Loop-confined.
func (s *Server) requestStop() {
	if _, moved := s.life.advance(stateStopping); !moved {
		return
	}
	s.drain.report.ForcedTasks = s.inflight + len(s.adm.queue)
	s.door.post(s.pumpFn)
}

// finalStop releases everything the loop owns before gnet closes the connections: the
// door closes, task contexts are cancelled, the scheduler unwinds every task (their
// deferred functions run), and each connection holding a request it read but never
// started gets 503 instead of a reset.
func (s *Server) finalStop() {
	s.guard.stopAccepting() // no registration may be queued after the loop's last turn
	s.door.close()
	s.cancel()
	s.sched.Close() // idempotent
	s.drain.report.Refused = s.adm.refused
	for _, cs := range s.conns.all {
		// A request read but not started, or a connection that has sent nothing yet (the
		// listener took it during the drain): 503 ahead of the close.
		s.answerUnserved(cs)
		if cs.raw != nil {
			s.rawStopping(cs.raw)
		}
		s.flush(cs)
		if cs.state == connOpen {
			cs.state = connClosing
		}
	}
}

// busyStart and busyEnd bracket a gnet callback or door batch: the loop is busy in
// between and idle (in epoll) outside. busyStart also takes the turn's clock reading,
// which connection deadlines and request arrival times use (they need no finer grain),
// so a read that brings many pipelined requests costs one clock read, not one each.
func (s *Server) busyStart() {
	if s.turnAt == 0 {
		s.turnAt = s.nanotime()
		s.lastAt = s.turnAt
	}
}

func (s *Server) busyEnd() {
	if s.turnAt != 0 {
		if s.acct.on {
			s.acct.loop.Switched(s.sched.Switches()) // this period's switches count in its second
			end := s.nanotime()
			s.acct.loop.Busy(s.turnAt, end)
			if end-s.turnAt >= int64(arrivalLongCallback) || s.arr.end != 0 {
				s.arr.callbackEnded(s.turnAt, end)
			}
		}
		s.maybeYield(s.turnAt) // yield.go
		s.turnAt = 0
	}
}
