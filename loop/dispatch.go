package loop

import (
	"context"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/internal/recorder"
	"github.com/batonrt/baton/internal/router"
	"github.com/batonrt/baton/internal/scheduler"
)

// route is what the router maps a pattern to.
type route struct {
	h       HandlerFunc // the handler wrapped in the middleware that applied when it was added
	pattern string
	exempt  bool // not subject to admission control (RequestConcurrency)
	// streamBody: the request is admitted once its head is routed and its body is streamed
	// to the handler (StreamBody; bodystream.go).
	streamBody bool
	acct       *recorder.Route
	labels     context.Context // pprof labels of the route (Config.ProfileLabels), made once
}

// RouteOption changes how a route registered with Handle is served. Build one with Exempt
// or StreamBody.
type RouteOption struct{ apply func(*route) }

// Exempt exempts a route from the request concurrency limit and its queue, so that health,
// admin and stats routes keep answering under a flood. Exempt handlers still count as
// in flight for graceful shutdown.
func Exempt() RouteOption { return RouteOption{apply: func(r *route) { r.exempt = true }} }

// dispatch routes a request without a body, admits it and starts its handler. Loop-confined.
//
// It is the hot path, so it does what admit, start and loopMode.start do without calling
// them: the handler's first slice runs inside this call, on a coroutine, and when the
// coroutine switches back the CPU's return predictor holds the coroutine's calls, so every
// frame between serve and the scheduler costs a mispredicted return (measured in
// docs/bench.md). Its first-slice block is loopMode.start's, copied by hand (too large for
// the compiler to inline as a function): TestDispatchInlinesLoopModeStart fails when the
// two copies differ.
func (s *Server) dispatch(cs *conn, c *Ctx) {
	if !s.routeRequest(cs, c) || !s.admitNow(cs, c) {
		return
	}
	s.beginHandler(c)
	if s.handlersOnLoop && !s.chaining.picking { // loopMode.start(c, true) without its frame
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
	s.mode.start(c, true)
}

// drainRetryAfter is the Retry-After of the 503 refusing a request while draining, in
// seconds: a replacement process (or another one behind the proxy) serves it by then.
const drainRetryAfter = "1"

// routeRequest matches c to a route. A request that cannot run (draining: 503; no route:
// 404; wrong method: 405) is answered at once and routeRequest reports false. It runs
// before a request's body is read, so that a client sending "Expect: 100-continue" is not
// told to upload a body for a request that will be refused. Loop-confined.
func (s *Server) routeRequest(cs *conn, c *Ctx) bool {
	cs.deadline, cs.deadlineKind = 0, deadlineNone
	s.parsed++
	if s.trusted != nil {
		s.resolveClient(c) // realip.go
	}
	c.isHead = string(c.req.Method) == "HEAD"
	c.mustClose = cs.state != connOpen
	if s.life.draining() {
		s.refuseDraining(cs, c)
		return false
	}
	r, pattern, res, allow := s.lookupRoute(c)
	if res != router.Found {
		s.refuseUnrouted(cs, c, res, allow)
		return false
	}
	c.route, c.pattern = r, pattern
	return true
}

// refuseDraining answers a request that arrived during the drain with 503. Out of line, as
// are refuseUnrouted and admitLimited: a refusal's code stays off the request path's
// instruction-cache lines (docs/bench.md, "The split of loop").
//
//go:noinline
func (s *Server) refuseDraining(cs *conn, c *Ctx) {
	s.drain.report.RejectedDuring++
	cs.closeAfterResponse()
	// Retry-After: the request was not run, so any client (a POST's too) may send it
	// again; a proxy in front retries idempotent ones on another process at once.
	s.inlineResponse(cs, c, 503, "Retry-After", drainRetryAfter)
}

// refuseUnrouted answers a request no route takes: 405 with Allow, or 404.
//
//go:noinline
func (s *Server) refuseUnrouted(cs *conn, c *Ctx, res router.Result, allow string) {
	if res == router.MethodNotAllowed {
		s.inlineResponse(cs, c, 405, "Allow", allow)
		return
	}
	s.inlineResponse(cs, c, 404, "", "")
}

// admit runs a routed request whose body has been read, queues it for a handler slot, or
// refuses it with 429. Loop-confined.
func (s *Server) admit(cs *conn, c *Ctx) {
	if s.admitNow(cs, c) {
		s.start(c, true)
	}
}

// admitNow makes c its connection's current request and reports whether it may start now
// (taking a handler slot if its route is limited); if not, it was queued for a slot or
// refused with 429. Loop-confined.
func (s *Server) admitNow(cs *conn, c *Ctx) bool {
	c.acceptedAt = s.now() // when the loop began handling the read that completed it
	c.arrivedAt = arrivalOf(cs, c.acceptedAt)
	cs.ctx = c
	if c.route.exempt || !s.adm.enabled() {
		return true
	}
	return s.admitLimited(cs, c)
}

// admitLimited is admitNow for a request subject to RequestConcurrency.
//
//go:noinline
func (s *Server) admitLimited(cs *conn, c *Ctx) bool {
	switch s.adm.arrive(c) {
	case admitNow:
		c.counted = true
		return true
	case admitQueued:
		c.queuedAt = c.acceptedAt
	case admitRefused:
		cs.ctx = nil
		s.noteOldestRunning(c.acceptedAt)
		if ok, suppressed := s.refusalLog.Allow(s.timeAt(c.acceptedAt)); ok {
			s.log.Warn("loop: admission queue full; refusing requests with 429", "route", c.pattern,
				"refused_total", s.adm.refused, "suppressed", suppressed, "retry_after", s.adm.retryAfter())
		}
		s.inlineResponse(cs, c, 429, "Retry-After", strconv.Itoa(s.adm.retryAfter()))
	}
	return false
}

// start runs c's handler in the server's mode. first (loop only, not from inside a task)
// runs a loop task's first slice at once, ahead of the tasks already ready; otherwise the
// task waits its turn in the ready queue.
func (s *Server) start(c *Ctx, first bool) {
	s.beginHandler(c)
	s.mode.start(c, first)
}

// beginHandler counts c as in flight and arms what runs alongside its handler: accounting,
// the admission queue's wait, the handler deadline. Loop-confined.
func (s *Server) beginHandler(c *Ctx) {
	s.inflight++
	if c.route.acct != nil {
		c.route.acct.Start()
		s.acct.loop.TaskStarted()
	}
	if c.queuedAt != 0 || s.cfg.HandlerTimeout > 0 {
		s.beginWaited(c)
	}
}

// beginWaited is beginHandler's part for a request that waited in the admission queue or
// has a handler deadline. Out of line, as above.
//
//go:noinline
func (s *Server) beginWaited(c *Ctx) {
	if c.queuedAt != 0 {
		c.queueWait = time.Duration(s.nanotime() - c.queuedAt)
	}
	if s.cfg.HandlerTimeout > 0 {
		c.deadline = s.sched.AfterFunc(s.cfg.HandlerTimeout, c.deadlineFn)
	}
}

// panicked logs a handler panic (rate-limited: every panic is counted, a sample is logged
// with its stack), answers 500 if nothing was written, cuts a half-written response short
// and finishes the request. Loop-confined.
func (s *Server) handlerPanicked(c *Ctx, id uint64, v any, stack []byte) {
	s.panics++
	if ok, suppressed := s.panicLog.Allow(s.timeAt(s.now())); ok {
		s.log.Error("loop: handler panicked", "route", c.pattern, "method", c.Method(), "path", string(c.req.Path),
			"task", id, "panic", v, "panics_total", s.panics, "suppressed", suppressed, "stack", string(stack))
	}
	switch c.headState() {
	case headNone:
		c.hdrs = c.hdrs[:0]
		c.out = c.out[:0]
		c.respond(500, ctypeText, []byte("500 Internal Server Error\n"))
	case headHandler:
		c.aborted = true // a half-written response cannot be completed: close after it
	}
	s.finishRequest(c)
}

// finishRequest completes c's response, frees it, admits the next queued request and lets
// the connection move on. Loop-confined.
func (s *Server) finishRequest(c *Ctx) {
	cs := c.conn
	if cs.raw != nil || c.deadline != nil {
		s.finishSeams(c)
	}
	switch c.headState() {
	case headNone:
		c.respond(200, "", nil)
	case headHandler:
		if c.chunked || c.owed {
			c.finishBody()
		}
	}
	s.deliver(c)
	if cs.stream != nil { // the handler returned before its body was read
		s.endStream(cs, true)
	}
	if cs.raw == nil && (c.closeConn || c.aborted || c.mustClose || (c.streaming && !c.chunked && !c.noBody && !c.sized)) {
		cs.closeAfterResponse() // a taken connection is its protocol's to close
	}
	cs.ctx = nil
	s.inflight--
	if c.counted {
		s.finishCounted(c)
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
	if s.cfg.OnRequestDone != nil {
		s.requestDone(c, s.nanotime())
	}
	s.releaseCtx(c)
}

// finishSeams is finishRequest's part for a request whose connection was taken over or
// that has a handler deadline. Out of line, as are finishBody and finishCounted: what a
// plain request does not run stays off the lines finishRequest's path occupies in the
// instruction cache (docs/bench.md, "The split of loop").
//
//go:noinline
func (s *Server) finishSeams(c *Ctx) {
	if cs := c.conn; cs.raw != nil {
		s.rawReturned(cs.raw, c)
	}
	if c.deadline != nil {
		c.deadline.Stop()
	}
}

// finishBody ends the body of a response whose head the handler wrote, where it is chunked
// (its last chunk) or shorter than its Content-Length (the connection closes after it).
//
//go:noinline
func (c *Ctx) finishBody() {
	if c.chunked && !c.aborted && !c.isHead {
		c.appendBodyEnd() // responseframing.go
	} else if c.owed && !c.isHead {
		c.aborted = true // a body shorter than its Content-Length: only a close tells the client
	}
}

// finishCounted gives back the handler slot c held (RequestConcurrency) and starts the
// request queued for it, if any.
//
//go:noinline
func (s *Server) finishCounted(c *Ctx) {
	now := s.now()
	service := now - c.acceptedAt - int64(c.queueWait)
	if next := s.adm.finish(service); next != nil {
		next.counted = true
		s.start(next, false) // this may run inside a finishing task: queue it
	}
}

// deliver moves the handler's output to its connection's output buffer. Loop-confined.
func (s *Server) deliver(c *Ctx) {
	if cs := c.conn; len(c.out) > 0 && cs.writable() {
		cs.out = append(cs.out, c.out...)
		if s.cfg.OnRequestDone != nil {
			c.bytesOut += int64(len(c.out))
		}
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
	if cs.stream != nil { // the handler returned before its body was read
		s.endStream(cs, true)
	}
	if c.closeConn {
		cs.closeAfterResponse()
	}
	if s.cfg.OnRequestDone != nil {
		s.requestDone(c, s.now())
	}
	s.releaseCtx(c)
}

// handlerDeadline runs on the loop when a handler's HandlerTimeout passes: it cancels the
// task and, if the handler wrote nothing yet, answers 503 for it. A streamed response the
// handler had begun is cut short: it ends without its terminating chunk and the connection
// closes, so the client sees a truncated body, never one that looks complete.
func (s *Server) handlerDeadline(c *Ctx) {
	c.deadline = nil
	// Claim the response before cancelling: a multi-thread handler woken by the
	// cancellation must find its writes already refused.
	claimed := c.claimHead(headServer)
	if !claimed && c.streaming {
		c.aborted = true
		s.log.Warn("loop: handler deadline passed mid-stream; response cut short", "route", c.pattern,
			"timeout", s.cfg.HandlerTimeout)
	}
	c.Task.cancel(context.DeadlineExceeded)
	if !claimed {
		return
	}
	s.log.Warn("loop: handler deadline passed", "route", c.pattern, "timeout", s.cfg.HandlerTimeout)
	cs := c.conn
	if !cs.writable() {
		return
	}
	body := "503 Service Unavailable: handler deadline exceeded\n"
	closeConn := !c.req.KeepAlive || c.mustClose || s.life.draining()
	if closeConn {
		cs.closeAfterResponse()
	}
	if c.isHead {
		body = ""
	}
	cs.out = appendPlainResponse(cs.out, 503, body, closeConn, !closeConn && c.req.KeepAlive && c.req.ProtoMinor == 0, *s.dateBytes.Load())
	s.markDirty(cs)
}

// onTaskPanic turns a task panic into a logged error and, for a request, a 500.
func (s *Server) onTaskPanic(t *scheduler.Task, v any, stack []byte) {
	if t == nil {
		s.log.Error("loop: timer callback panicked", "panic", v, "stack", string(stack))
		return
	}
	switch a := t.Arg().(type) {
	case *Ctx:
		s.handlerPanicked(a, t.ID(), v, stack)
	default:
		s.panics++
		if ok, suppressed := s.panicLog.Allow(s.timeAt(s.now())); ok {
			s.log.Error("loop: background task panicked", "task", t.ID(), "name", t.Label(), "panic", v,
				"panics_total", s.panics, "suppressed", suppressed, "stack", string(stack))
		}
	}
}

// goexitPanic is what a multi-thread handler that called runtime.Goexit is reported as:
// like a panic, it is answered with 500 and logged.
type goexitPanic struct{}

func (goexitPanic) String() string { return "runtime.Goexit called in a handler" }

// runGoroutine is the body of every request handler in multi-thread mode.
func (s *Server) runGoroutine(c *Ctx) {
	defer s.handlerGoroutineEnded()
	g := c.Task.g
	g.begin(time.Now())
	returned := false
	defer func() {
		v := recover()
		g.end(time.Now())
		var stack []byte
		if v == nil && !returned {
			v = goexitPanic{} // runtime.Goexit: the goroutine ends either way; answer as for a panic
		}
		if v != nil {
			stack = debug.Stack()
		}
		_ = s.post(func() {
			if v != nil {
				s.handlerPanicked(c, g.gid, v, stack)
				return
			}
			s.finishRequest(c)
		})
	}()
	if s.cfg.ProfileLabels {
		setRouteLabels(c.route) // the goroutine ends with the handler: no reset
	}
	c.route.h(c)
	returned = true
}
