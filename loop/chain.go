package loop

import "github.com/batonrt/baton/internal/scheduler"

// Task chaining: a pipelined read brings several requests at once, and serve runs each
// one's handler as a task whose first slice runs at once (dispatch). When a handler
// returns without having parked, its task's coroutine goes on to serve the connection's
// next buffered request itself (scheduler.Task.Chain) instead of switching back to serve
// first, so the coroutine switch is paid once per read rather than once per request.
// Every request still has a task of its own, with its own figures: the chain only saves
// the switch.
//
// A chain starts only from a task that finished while serve was on the stack for its
// connection (conn.serving): a task started by dispatch (or by serve's body path) that
// never parked. A task resumed later by the scheduler's Run finishes as before, and serve
// is called again for its connection at the end of the turn (flushDirty).

// chainState is the server's chaining state. Loop-confined.
type chainState struct {
	pick scheduler.ChainFunc // chainNext, made once
	// picking: chainNext is stepping serve on a finished task's coroutine, where a task
	// cannot be run at once (loopMode.start queues it instead).
	picking bool
	runs    uint64 // tasks started by a chain (tests read it)
}

// chainFrom asks the scheduler to serve cs's next request on t's coroutine once t's
// function returns. Task only (t's).
func (s *Server) chainFrom(t *scheduler.Task, cs *conn) {
	if s.chaining.pick == nil {
		s.chaining.pick = s.chainNext
	}
	t.Chain(s.chaining.pick, cs)
}

// chainNext is the chain function of request tasks: it steps serve for the connection (a
// *conn) as serve's own loop would, answering what needs no handler, and returns the next
// request without a body, routed and admitted, for the scheduler to run at once; or none,
// when the input runs out, a request parks in the admission queue or has a body to read,
// or the connection stops accepting requests. serve, below on the loop's stack, then
// carries on from where the chain stopped. Loop-confined (on the finished task's
// coroutine, with no task running).
func (s *Server) chainNext(arg any) (fn func(*scheduler.Task), next any, ready int64) {
	cs := arg.(*conn)
	if cs.raw != nil {
		return nil, nil, 0
	}
	s.chaining.picking = true
	for cs.pending == nil && cs.stream == nil {
		c, more := s.serveStep(cs)
		if c != nil {
			// dispatch, without its spawn: the scheduler runs the task on this coroutine.
			if s.routeRequest(cs, c) && s.admitNow(cs, c) {
				s.beginHandler(c)
				fn, next, ready = s.runTaskFn, c, c.acceptedAt
				s.chaining.runs++
				break
			}
			continue
		}
		if !more {
			break
		}
	}
	s.chaining.picking = false
	return fn, next, ready
}
