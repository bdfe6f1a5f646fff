package loop

import (
	"time"

	"github.com/batonrt/baton/internal/scheduler"
)

// runMode is the seam between the two ways request handlers run, chosen once in New:
// loopMode (single-thread: every handler a task on the loop) and goroutineMode
// (Config.MultiThread: every handler in its own goroutine). Everything the server does
// differently for the two modes goes through it or through taskOps; the rest of the code
// does not ask which mode it is in.
type runMode interface {
	// start runs c's handler. first (loop mode, outside a task) runs its first slice at
	// once. Loop-confined.
	start(c *Ctx, first bool)
	// flush hands c's gathered output to its connection now, then waits while the client
	// is more than streamHighWater behind. Called from c's handler.
	flush(c *Ctx) error
	// onLoop runs fn on the loop on behalf of c's handler and returns when it has run.
	onLoop(c *Ctx, fn func())
	// offLoop runs fn off the loop on behalf of c's handler and returns when it has run.
	offLoop(c *Ctx, fn func())
	// reuseCtx reports whether a finished Ctx may be pooled for another request.
	reuseCtx() bool
}

// setMode chooses how request handlers run, once, in New: the one decision about the mode.
// handlersOnLoop is what the rest of the code may read of it (whether a handler runs on
// the loop), so that no code elsewhere asks which mode it is in.
func (s *Server) setMode(multiThread bool) {
	if multiThread {
		s.mode = goroutineMode{s}
	} else {
		s.mode = loopMode{s}
		s.handlersOnLoop = true
	}
	s.poolCtx = s.mode.reuseCtx()
}

// loopMode runs handlers as tasks on the loop.
type loopMode struct{ s *Server }

// start spawns c's task.
func (m loopMode) start(c *Ctx, first bool) {
	s := m.s
	if s.chaining.picking {
		first = false // a task cannot run another from inside a chain: queue it
	}
	if first { // copied by hand into dispatch, the hot path: TestDispatchInlinesLoopModeStart
		if s.acct.on && s.turnAt != 0 {
			if s.lastAt == 0 {
				s.lastAt = s.nanotime()
			}
			// The previous slice's end is this one's start: no clock read in between.
			s.lastAt = s.sched.SpawnNowAt(s.runTaskFn, c, c.acceptedAt, s.lastAt)
			return
		}
		s.sched.SpawnNow(s.runTaskFn, c)
		return
	}
	s.sched.Spawn(s.runTaskFn, c)
	s.postPump()
}

// runTask is the body of every request task in loop mode.
func (s *Server) runTask(t *scheduler.Task) {
	c := t.Arg().(*Ctx)
	c.Task.t = t
	s.publishTask(t, &c.route.pattern)
	if s.cfg.ProfileLabels {
		s.runLabelled(c)
	} else {
		c.route.h(c)
	}
	cs := c.conn
	s.finishRequest(c) // c may be released from here on
	if cs.serving && cs.accepting() && cs.gc.InboundBuffered() > 0 {
		// Started by serve (dispatch), in its first slice, and more input is buffered:
		// the connection's next request runs on this coroutine (chain.go). accepting
		// first: a closed connection's gnet.Conn must not be touched.
		s.chainFrom(t, cs)
	}
}

func (m loopMode) flush(c *Ctx) error {
	s, cs := m.s, c.conn
	t, n := c.Task.t, len(c.out)
	round, spent := t.Rounds(), cs.spendSlice(t, n)
	s.deliver(c)
	s.boundSendBuffer(cs)
	s.markDirty(cs) // written at the end of this loop turn, with whatever else is gathered
	for cs.state != connClosed && cs.unsent()+len(cs.out) > streamHighWater {
		s.flush(cs)
		if cs.state == connClosed || cs.unsent() <= streamHighWater {
			break
		}
		// Park until the kernel says the socket drained (or poll, without a watch). The
		// bound is a safety net: a report is never expected to go missing.
		d := streamPoll
		if wk := c.Task.t.Waker(); s.drains.watch(cs, func() { wk.Wake() }) {
			d = drainWatchBound
		}
		if err := c.Task.ops.park(&c.Task, scheduler.ReasonWrite, d, nil); err != nil && err != ErrTimeout {
			return err
		}
	}
	if spent && cs.state != connClosed && t.Rounds() == round {
		s.yieldStream(c) // the slice's byte budget is spent and it has not parked: share the loop
	}
	if cs.state == connClosed {
		return ErrClientGone
	}
	return nil
}

// drainWatchBound bounds a park on the drain watch.
const drainWatchBound = time.Second

func (loopMode) onLoop(_ *Ctx, fn func()) { fn() }

// offLoop runs fn in a goroutine while c's task parks.
func (m loopMode) offLoop(c *Ctx, fn func()) {
	ev := NewFuture[struct{}](m.s.loopRef)
	go func() {
		fn()
		ev.Resolve(struct{}{}, nil)
	}()
	_, _ = ev.Await(c, 0)
	for !ev.Done() { // cancelled while fn runs: it still uses memory about to be freed
		c.Task.t.Yield()
	}
}

func (loopMode) reuseCtx() bool { return true }

// goroutineMode runs each handler in its own goroutine (Config.MultiThread).
type goroutineMode struct{ s *Server }

func (m goroutineMode) start(c *Ctx, _ bool) {
	g := newGtask(time.Now())
	c.Task.g, c.Task.ops = g, g
	c.Task.Context() // made here, on the loop: the handler's goroutine and the loop share it
	m.s.handlerGoroutineStarted()
	go m.s.runGoroutine(c)
}

// flush hands the gathered output to the loop and waits, like loopMode.flush, until the
// socket's backlog is under the high-water mark.
func (m goroutineMode) flush(c *Ctx) error {
	s := m.s
	for {
		data := c.out
		c.out = nil // ownership moves to the loop
		backlog := -1
		var drained chan struct{}
		m.onLoop(c, func() {
			cs := c.conn
			if cs == nil || !cs.writable() {
				return
			}
			cs.out = append(cs.out, data...)
			if s.cfg.OnRequestDone != nil {
				c.bytesOut += int64(len(data))
			}
			s.boundSendBuffer(cs)
			s.flush(cs)
			if cs.state == connClosed {
				return
			}
			if backlog = cs.unsent(); backlog > streamHighWater {
				ch := make(chan struct{})
				if s.drains.watch(cs, func() { close(ch) }) {
					drained = ch
				}
			}
		})
		if err := c.Err(); err != nil {
			return err
		}
		if backlog < 0 {
			return ErrClientGone
		}
		if backlog <= streamHighWater {
			return nil
		}
		d := streamPoll
		if drained != nil {
			d = drainWatchBound
		}
		if err := c.Task.g.block(c.Context(), scheduler.ReasonWrite, d, drained, nil); err != nil {
			return err
		}
	}
}

// onLoop runs fn on the loop through the door and waits for it.
func (m goroutineMode) onLoop(c *Ctx, fn func()) {
	done := make(chan struct{})
	if m.s.post(func() { fn(); close(done) }) != nil {
		return
	}
	select {
	case <-done:
	case <-m.s.door.gone: // the loop stopped before running fn
	}
}

func (goroutineMode) offLoop(_ *Ctx, fn func()) { fn() }

// reuseCtx is false: a goroutine may still hold a finished Ctx (a late write after the
// handler deadline answered for it).
func (goroutineMode) reuseCtx() bool { return false }

// MayBlock reports whether the task may block its thread: true for a multi-thread
// request handler (Config.MultiThread: a goroutine of its own), false for a task on the
// loop, which must park instead (its Sleep, Await and offloaded calls do). It is the one
// fact of the mode a feature may read: loop/nethttp runs a net/http handler (which blocks)
// right on a task that may block, and on a goroutine of its own, parking the task, on one
// that may not. From the task.
func (t *Task) MayBlock() bool { return t.g != nil }

// RunOffLoop runs fn on a goroutine of its own, off the loops, counted with the handler
// goroutines of multi-thread mode: once the loops have stopped, ListenAndServe waits for
// it until the Shutdown context ends, then logs it and abandons it (a goroutine cannot be
// killed). For a feature whose handlers block (loop/nethttp runs net/http handlers so);
// fn must end once the request it serves has ended (its context is cancelled then). Any
// goroutine.
func (s *Server) RunOffLoop(fn func()) {
	s.handlerGoroutineStarted()
	go s.runOffLoop(fn) // a method, not a closure: no allocation of its own
}

// runOffLoop is the body of a RunOffLoop goroutine.
func (s *Server) runOffLoop(fn func()) {
	defer s.handlerGoroutineEnded()
	fn()
}
