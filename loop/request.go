package loop

import (
	"context"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/httpcodec"
	"github.com/batonrt/baton/internal/router"
	"github.com/batonrt/baton/scheduler"
)

// route is what the router maps a pattern to.
type route struct {
	h       HandlerFunc
	pattern string
	exempt  bool // not subject to admission control (RequestConcurrency)
	acct    *accounting.Route
}

// RouteOption changes how a route registered with Handle is served.
type RouteOption func(*route)

// Exempt exempts a route from the request concurrency limit and its queue, so that health,
// admin and stats routes keep answering under a flood. Exempt handlers still count as
// in flight for graceful shutdown.
func Exempt() RouteOption { return func(r *route) { r.exempt = true } }

// retryAfterMax caps the Retry-After advice: beyond a minute the estimate is noise and
// clients should back off on their own schedule.
const retryAfterMax = 60

// dispatch routes c and starts, queues or refuses it; 404 and 405 are answered at once.
// Loop only.
func (s *Server) dispatch(cs *conn, c *Ctx) {
	cs.deadline, cs.deadlineKind = 0, deadlineNone
	s.parsed++
	c.isHead = string(c.req.Method) == "HEAD"
	c.mustClose = cs.closeAfter
	c.acceptedAt = s.now() // when the loop began handling the read that brought it
	if s.draining {
		s.drained.RejectedDuring++
		cs.closeAfter = true
		s.inlineResponse(cs, c, 503, "", "")
		return
	}
	r, pattern, res, allow := s.router.Lookup(unsafeString(c.req.Method), unsafeString(c.req.Path), &c.params)
	switch res {
	case router.Found:
	case router.MethodNotAllowed:
		s.inlineResponse(cs, c, 405, "Allow", allow)
		return
	default:
		s.inlineResponse(cs, c, 404, "", "")
		return
	}
	c.route, c.pattern = r, pattern
	cs.ctx = c
	if !r.exempt && s.cfg.RequestConcurrency > 0 {
		if s.active >= s.cfg.RequestConcurrency {
			if len(s.queue) >= s.cfg.MaxQueueLength {
				cs.ctx = nil
				s.rejected++
				s.inlineResponse(cs, c, 429, "Retry-After", strconv.Itoa(s.retryAfter()))
				return
			}
			c.queuedAt = c.acceptedAt
			s.queue = append(s.queue, c)
			return
		}
		s.active++
		c.counted = true
	}
	s.start(c, true)
}

// start runs c's handler: as a task on the loop, or in a goroutine in multi-thread mode.
// now (loop only, not from inside a task) runs the task's first slice at once, ahead of
// the tasks already ready; otherwise the task waits its turn in the ready queue.
func (s *Server) start(c *Ctx, now bool) {
	s.inflight++
	if c.route.acct != nil {
		c.route.acct.Start()
		s.acct.loop.TaskStarted()
	}
	if c.queuedAt != 0 {
		c.queueWait = time.Duration(s.nanotime() - c.queuedAt)
	}
	if s.cfg.HandlerTimeout > 0 {
		c.deadline = s.sched.AfterFunc(s.cfg.HandlerTimeout, c.deadlineFn)
	}
	if s.cfg.MultiThread {
		c.Task.g = newGtask(time.Now())
		c.Task.Context()
		s.mtWG.Add(1)
		go s.runGoroutine(c)
		return
	}
	if now {
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

// runTask is the body of every request task in single-thread mode.
func (s *Server) runTask(t *scheduler.Task) {
	c := t.Arg().(*Ctx)
	c.Task.t = t
	s.publishTask(t, &c.route.pattern)
	c.route.h(c)
	s.finishRequest(c)
}

// runGoroutine is the body of every request handler in multi-thread mode.
func (s *Server) runGoroutine(c *Ctx) {
	defer s.mtWG.Done()
	g := c.Task.g
	g.begin(time.Now())
	defer func() {
		v := recover()
		g.end(time.Now())
		var stack []byte
		if v != nil {
			stack = debug.Stack()
		}
		_ = s.Post(func() {
			if v != nil {
				s.handlerPanicked(c, g.id, v, stack)
				return
			}
			s.finishRequest(c)
		})
	}()
	c.route.h(c)
}

// handlerPanicked logs a handler panic, answers 500 if nothing was written and finishes
// the request. Loop-confined.
func (s *Server) handlerPanicked(c *Ctx, id uint64, v any, stack []byte) {
	s.log.Error("loop: handler panicked", "route", c.pattern, "method", c.Method(), "path", string(c.req.Path),
		"task", id, "panic", v, "stack", string(stack))
	switch {
	case c.head.Load() == headNone:
		c.hdrs = c.hdrs[:0]
		c.out = c.out[:0]
		c.respond(500, "text/plain; charset=utf-8", []byte("500 Internal Server Error\n"))
	case c.head.Load() == headHandler:
		c.aborted = true // a half-written response cannot be completed: close after it
	}
	s.finishRequest(c)
}

// finishRequest completes c's response, frees it, admits the next queued request and lets
// the connection move on. Loop-confined.
func (s *Server) finishRequest(c *Ctx) {
	cs := c.conn
	if c.deadline != nil {
		c.deadline.Stop()
	}
	switch c.head.Load() {
	case headNone:
		c.respond(200, "", nil)
	case headHandler:
		if c.chunked && !c.aborted {
			c.out = httpcodec.AppendFinalChunk(c.out)
		}
	}
	s.deliver(c)
	if c.closeConn || c.aborted || (c.streaming && !c.chunked) {
		cs.closeAfter = true
	}
	cs.ctx = nil
	s.inflight--
	s.completions++
	if c.counted {
		s.active--
		s.admitQueued()
	}
	s.markDirty(cs)
	if s.acct.on {
		if c.Task.t != nil {
			// Running in the task's last slice: onSliceStop records the request with the
			// reading the scheduler takes at the slice's end, then frees c.
			c.finished = true
			return
		}
		s.recordFinish(c, s.nanotime()) // multi-thread mode: on the loop, after the handler
	}
	s.releaseCtx(c)
}

// deliver moves the handler's output to its connection's output buffer. Loop-confined.
func (s *Server) deliver(c *Ctx) {
	if cs := c.conn; len(c.out) > 0 && !cs.closed {
		cs.out = append(cs.out, c.out...)
	}
	c.out = c.out[:0]
}

// inlineResponse answers c without running a handler. Loop-confined.
func (s *Server) inlineResponse(cs *conn, c *Ctx, status int, hname, hvalue string) {
	if hname != "" {
		c.addHeader(hname, hvalue)
	}
	c.String(status, httpcodec.StatusText(status)+"\n")
	s.deliver(c)
	if c.closeConn {
		cs.closeAfter = true
	}
	s.releaseCtx(c)
}

// handlerDeadline runs on the loop when a handler's HandlerTimeout passes: it cancels the
// task and, if the handler wrote nothing yet, answers 503 for it.
func (s *Server) handlerDeadline(c *Ctx) {
	c.deadline = nil
	// Claim the response before cancelling: a multi-thread handler woken by the
	// cancellation must find its writes already refused.
	claimed := c.head.CompareAndSwap(headNone, headServer)
	c.Task.cancel(context.DeadlineExceeded)
	if !claimed {
		return
	}
	s.log.Warn("loop: handler deadline passed", "route", c.pattern, "timeout", s.cfg.HandlerTimeout)
	cs := c.conn
	if cs.closed {
		return
	}
	body := "503 Service Unavailable: handler deadline exceeded\n"
	h := httpcodec.ResponseHead{
		Status:        503,
		Headers:       plainTextHeader,
		ContentLength: int64(len(body)),
		Close:         !c.req.KeepAlive || c.mustClose || s.draining,
		KeepAlive10:   c.req.KeepAlive && c.req.ProtoMinor == 0,
		Date:          *s.dateBytes.Load(),
	}
	if h.Close {
		cs.closeAfter = true
	}
	if c.isHead {
		body = ""
	}
	cs.out, _ = httpcodec.AppendResponseHead(cs.out, &h)
	cs.out = append(cs.out, body...)
	s.markDirty(cs)
}

// admitQueued starts queued requests while slots are free, oldest first. Loop-confined.
func (s *Server) admitQueued() {
	for len(s.queue) > 0 && s.active < s.cfg.RequestConcurrency {
		c := s.queue[0]
		copy(s.queue, s.queue[1:])
		s.queue[len(s.queue)-1] = nil
		s.queue = s.queue[:len(s.queue)-1]
		s.active++
		c.counted = true
		s.start(c, false) // this may run inside a finishing task: queue it
	}
}

// unqueue removes c from the admission queue (its client left). Loop-confined.
func (s *Server) unqueue(c *Ctx) bool {
	for i, q := range s.queue {
		if q == c {
			copy(s.queue[i:], s.queue[i+1:])
			s.queue[len(s.queue)-1] = nil
			s.queue = s.queue[:len(s.queue)-1]
			return true
		}
	}
	return false
}

// retryAfter estimates, in whole seconds, when a refused client would find room: the
// queue ahead of it divided by the measured completion rate, clamped to [1, 60].
func (s *Server) retryAfter() int {
	if s.drainRate <= 0 {
		return 1
	}
	secs := float64(len(s.queue)+1) / s.drainRate
	return int(min(max(secs+0.999, 1), retryAfterMax))
}

// updateDrainRate folds the completions since the last call into an exponentially
// weighted rate (per second). Called from housekeeping.
func (s *Server) updateDrainRate(now int64) {
	if s.rateAt == 0 {
		s.rateAt, s.rateCount = now, s.completions
		return
	}
	dt := float64(now-s.rateAt) / 1e9
	if dt < 0.1 {
		return
	}
	rate := float64(s.completions-s.rateCount) / dt
	const alpha = 0.3 // weight of the newest sample: reacts within a few sweeps
	if s.drainRate == 0 {
		s.drainRate = rate
	} else {
		s.drainRate = alpha*rate + (1-alpha)*s.drainRate
	}
	s.rateAt, s.rateCount = now, s.completions
}
