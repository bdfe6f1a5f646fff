package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/internal/recorder"
	"github.com/batonrt/baton/internal/scheduler"
	"github.com/batonrt/baton/offload"
)

// This file is the net/http adapter: an http.Handler served as a baton route.
//
// In single-thread mode the task of the request parks while the net/http handler runs on
// a goroutine of its own (a net/http handler blocks: it must never run on the loop). The
// two sides meet in an httpExchange: the handler's ResponseWriter hands the task one
// message at a time (a piece of body to flush, or the end of the response) and waits until
// the task has written it to the connection, where the loop's backpressure parks the task
// while the client is slow; so a slow client blocks the handler's goroutine, never the
// loop, and memory per response stays bounded (one writer buffer and the stream's
// high-water mark). In multi-thread mode the handler already runs on its own goroutine
// and the writer applies its messages to the Ctx directly.

// HTTPAdapterConfig bounds the net/http handlers mounted with HandleHTTP or HTTPHandler.
// They run on goroutines of their own, outside the offload pool's tokens (a net/http
// handler may stream for minutes: holding a token would starve the short blocking calls
// the pool is sized for), behind a gate of the offload package named "net/http" that the
// offload stats page shows. Its zero value gives the defaults.
type HTTPAdapterConfig struct {
	// MaxConcurrent is how many net/http handlers may run at once. Zero means
	// DefaultHTTPMaxConcurrent. Raise it for many long-lived streams (SSE).
	MaxConcurrent int
	// MaxQueue is how many requests may wait (parked, in FIFO order) for a place; past it
	// the client gets 503 with Retry-After: 1. Zero means DefaultHTTPMaxQueue; negative
	// means no queue. Each route's queue at its MaxRouteShare is bounded the same.
	MaxQueue int
	// MaxRouteShare is the largest share of MaxConcurrent that one route's handlers may
	// hold at once: cap = max(1, floor(MaxRouteShare x MaxConcurrent)). A request of a
	// route at its cap waits in that route's own queue (a gate named "net/http <route>"
	// on the offload stats page), which never delays other routes' requests. So a route
	// whose handlers hang (ignore their context) shuts out only itself, as offload's
	// MaxKeyShare does for offloaded calls. Between 0 and 1; 0 means
	// DefaultHTTPMaxRouteShare; 1 turns the cap off.
	MaxRouteShare float64
	// AbandonAfter: a handler still running this long after its request ended (the
	// client went away, the handler deadline passed, the server stops) stops counting
	// against the gate and its route's share: it is logged and counted as abandoned, and
	// its goroutine runs on (a goroutine cannot be killed). At most MaxConcurrent
	// handlers are abandoned at once; past that they keep their places, so the
	// goroutines of net/http handlers stay bounded at twice MaxConcurrent. Zero means
	// DefaultHTTPAbandonAfter; negative: never.
	AbandonAfter time.Duration
}

// Defaults of HTTPAdapterConfig.
const (
	// DefaultHTTPMaxConcurrent bounds the goroutines running net/http handlers: each costs a
	// stack (8 KiB and up) and a writer buffer (up to httpChunkBytes), so 256 of them stay
	// near 10 MiB under a flood, while 256 handlers each blocking for 10 ms still serve
	// 25,000 requests per second.
	DefaultHTTPMaxConcurrent = 256
	// DefaultHTTPMaxQueue lets a burst four times the concurrency wait (a queued request
	// holds only its parsed request and a parked task) before requests are refused.
	DefaultHTTPMaxQueue = 1024
	// DefaultHTTPMaxRouteShare: one route may hold at most half of the places, so a route
	// whose handlers hang leaves the other half to every other route (pprof, admin
	// pages), while a route that is most of the traffic still gets half the gate without
	// queueing behind its own cap. offload.DefaultMaxKeyShare's figure, for the same
	// reason.
	DefaultHTTPMaxRouteShare = 0.5
	// DefaultHTTPAbandonAfter: a handler whose request ended 10 s ago and still runs
	// ignores its context; by then its place is better given to a request that can still
	// be answered. Long enough for a handler that checks its context between steps of a
	// second or two.
	DefaultHTTPAbandonAfter = 10 * time.Second
)

// Validate reports the first invalid field of c, naming it. Safe for concurrent use.
func (c HTTPAdapterConfig) Validate() error {
	if c.MaxConcurrent < 0 {
		return fmt.Errorf("loop: Config.HTTPAdapter.MaxConcurrent must not be negative, got %d", c.MaxConcurrent)
	}
	if math.IsNaN(c.MaxRouteShare) || c.MaxRouteShare < 0 || c.MaxRouteShare > 1 {
		return fmt.Errorf("loop: Config.HTTPAdapter.MaxRouteShare must be between 0 and 1 (0: default %v; 1: off), got %v",
			DefaultHTTPMaxRouteShare, c.MaxRouteShare)
	}
	return nil
}

// httpBufferBeforeCommit is how much body a net/http handler may write before the
// response head is sent: a handler that returns having written no more than this gets a
// Content-Length, a longer or flushed body is streamed (chunked). net/http's own threshold
// (bufferBeforeChunkingSize), so that both frame the same responses the same way.
const httpBufferBeforeCommit = 2048

// httpChunkBytes is how much body the writer gathers after the head before it hands a
// piece to the loop: large enough that a bulk response costs few door round trips, small
// enough to bound memory per response.
const httpChunkBytes = 32 << 10

// ecosystem is the server's state for the net/http adapter and the request hook.
type ecosystem struct {
	once     sync.Once
	gate     *offload.Gate // the net/http adapter's gate, made on first use; guarded by once
	routeCap int           // places one route may hold (MaxRouteShare); 0: no cap. Set by once
	queue    int           // the queue bound of the gate and of each route's. Set by once
	abandon  time.Duration // AbandonAfter resolved; negative: never. Set by once
	maxAband int64         // handlers abandoned at once at most (MaxConcurrent). Set by once

	routeMu sync.Mutex
	routes  map[string]*offload.Gate // each route's share of the gate; guarded by routeMu

	abandoned    atomic.Int64  // handlers abandoned and still running
	abandonTotal atomic.Uint64 // handlers ever abandoned
	abandonLog   *recorder.LogLimiter

	rec RequestRecord // loop-owned: the record handed to Config.OnRequestDone, reused
}

// httpGate returns the gate of net/http handlers, making it on first use. Any goroutine.
func (s *Server) httpGate() *offload.Gate {
	a := &s.eco
	a.once.Do(func() {
		cfg := s.cfg.HTTPAdapter
		n, q := cfg.MaxConcurrent, cfg.MaxQueue
		if n == 0 {
			n = DefaultHTTPMaxConcurrent
		}
		switch {
		case q == 0:
			q = DefaultHTTPMaxQueue
		case q < 0:
			q = 0
		}
		share := cfg.MaxRouteShare
		if share == 0 {
			share = DefaultHTTPMaxRouteShare
		}
		if share < 1 {
			a.routeCap = max(1, int(share*float64(n)))
		}
		a.abandon = cfg.AbandonAfter
		if a.abandon == 0 {
			a.abandon = DefaultHTTPAbandonAfter
		}
		a.queue, a.maxAband = q, int64(n)
		a.abandonLog = recorder.NewLogLimiter(1, 10*time.Second)
		a.gate = s.NewGate("net/http", n, q)
	})
	return a.gate
}

// httpRouteGate returns route's share of the net/http gate, making it on first use, or
// nil when routes are not capped (MaxRouteShare 1). Call httpGate first. Any goroutine.
func (s *Server) httpRouteGate(route string) *offload.Gate {
	a := &s.eco
	if a.routeCap == 0 {
		return nil
	}
	a.routeMu.Lock()
	defer a.routeMu.Unlock()
	g := a.routes[route]
	if g == nil {
		if a.routes == nil {
			a.routes = map[string]*offload.Gate{}
		}
		g = s.NewGate("net/http "+route, a.routeCap, a.queue)
		a.routes[route] = g
	}
	return g
}

// httpPlace is a net/http handler's place in the gate and its route's share: given back
// once, when the handler returns or when it is abandoned. Safe for concurrent use.
type httpPlace struct {
	s      *Server
	route  string
	gate   *offload.Gate
	rg     *offload.Gate // nil: no route cap
	left   atomic.Bool
	aband  atomic.Bool // counted in ecosystem.abandoned
	timer  atomic.Pointer[time.Timer]
	stopCh func() bool // stops the context.AfterFunc that arms the timer
}

// leave gives the places back and reports whether this call did. Any goroutine.
func (p *httpPlace) leave() bool {
	if !p.left.CompareAndSwap(false, true) {
		return false
	}
	p.gate.Leave()
	if p.rg != nil {
		p.rg.Leave()
	}
	return true
}

// watch arms the abandonment of the place: AbandonAfter once ctx (the request's) ends.
// Any goroutine.
func (p *httpPlace) watch(ctx context.Context) {
	if p.s.eco.abandon < 0 {
		return
	}
	p.stopCh = context.AfterFunc(ctx, p.arm)
}

// arm starts the grace period. On a goroutine of its own (context.AfterFunc, time.AfterFunc).
func (p *httpPlace) arm() {
	if p.left.Load() {
		return
	}
	t := time.AfterFunc(p.s.eco.abandon, p.expire)
	p.timer.Store(t)
	if p.left.Load() {
		t.Stop()
	}
}

// expire abandons the handler, unless it returned meanwhile or MaxConcurrent handlers are
// abandoned already (then it looks again after another grace period). On a timer's
// goroutine.
func (p *httpPlace) expire() {
	a := &p.s.eco
	if p.left.Load() {
		return
	}
	if a.abandoned.Add(1) > a.maxAband {
		a.abandoned.Add(-1)
		p.arm()
		return
	}
	if !p.leave() {
		a.abandoned.Add(-1)
		return
	}
	p.aband.Store(true)
	total := a.abandonTotal.Add(1)
	if ok, suppressed := a.abandonLog.Allow(time.Now()); ok {
		p.s.log.Warn("loop: net/http handler still running after its request ended: abandoned, its place in the gate given back; it ignores its request's context",
			"route", p.route, "after", a.abandon, "abandoned_running", a.abandoned.Load(), "abandoned_total", total, "suppressed", suppressed)
	}
}

// done runs when the handler returned: the places go back (unless abandoned already).
// On the handler's goroutine.
func (p *httpPlace) done() {
	p.leave()
	if p.stopCh != nil {
		p.stopCh()
	}
	if t := p.timer.Load(); t != nil {
		t.Stop()
	}
	if p.aband.Load() {
		p.s.eco.abandoned.Add(-1)
	}
}

// enterHTTP takes a place for c's net/http handler: first in its route's share, then in
// the gate, parking in each queue while full. It answers 503 itself when a queue is full
// and returns nil then, or when c was cancelled while waiting. On c's task or goroutine.
func (s *Server) enterHTTP(c *Ctx) *httpPlace {
	p := &httpPlace{s: s, route: c.pattern, gate: s.httpGate()}
	p.rg = s.httpRouteGate(c.pattern)
	if p.rg != nil {
		if err := p.rg.Enter(c); err != nil {
			if errors.Is(err, offload.ErrGateQueueFull) {
				c.SetHeader("Retry-After", "1")
				c.String(503, "503 Service Unavailable: too many net/http handlers of this route\n")
			}
			return nil
		}
	}
	if err := p.gate.Enter(c); err != nil {
		if p.rg != nil {
			p.rg.Leave()
		}
		if errors.Is(err, offload.ErrGateQueueFull) {
			c.SetHeader("Retry-After", "1")
			c.String(503, "503 Service Unavailable: too many net/http handlers\n")
		}
		return nil
	}
	return p
}

// HandleHTTP registers the net/http handler h for pattern, like Handle. A pattern ending
// in "/" is a prefix, as in net/http's ServeMux: "/static/" serves "/static/" and every
// path below it (it registers "/static/{httpPath...}"). h sees the request as net/http
// would give it (see HTTPHandler). Call it before ListenAndServe, from one goroutine.
func (s *Server) HandleHTTP(pattern string, h http.Handler, opts ...RouteOption) {
	if h == nil {
		panic("loop: HandleHTTP: nil handler for " + pattern)
	}
	if strings.HasSuffix(pattern, "/") {
		pattern += "{httpPath...}"
	}
	s.Handle(pattern, HTTPHandler(h), append(opts[:len(opts):len(opts)], streamBodyOption())...)
}

// HTTPHandler returns a HandlerFunc that serves the request with the net/http handler h.
//
// h runs on a goroutine of its own (in multi-thread mode, on the handler's goroutine),
// never on the loop, behind the server's net/http gate (Config.HTTPAdapter); the task
// parks meanwhile. h gets an *http.Request with the method, URL (path and raw query as
// sent), protocol, headers (canonical keys, Host moved to Request.Host), Host, RemoteAddr,
// RequestURI, ContentLength and the body; its Context is cancelled when the client
// disconnects, the handler deadline passes, the server stops, or h returns. Mounted with
// HandleHTTP, h starts once the head is routed and its body streams: Read blocks on h's
// goroutine until bytes arrive (the loop holds at most 64 KiB decoded per request plus
// Config.MaxBufferedInput of input), "Expect: 100-continue" is answered at the first Read,
// and past Config.Limits.MaxBodyBytes Read fails with *http.MaxBytesError (413 if h then
// wrote nothing). Mounted with Handle, the loop reads the whole body first (bounded by
// Config.Limits.MaxBodyBytes) and h reads a copy. The ResponseWriter implements
// http.Flusher (each Flush reaches the socket within a loop turn, and blocks h while the
// client is more than 256 KiB behind), trailers (the "Trailer" header and
// http.TrailerPrefix), Content-Type sniffing, and http.ResponseController's Flush,
// SetReadDeadline (a no-op) and EnableFullDuplex; it does not implement http.Hijacker or
// 1xx responses, and the server writes Date, Connection and the framing headers itself.
//
// h must not touch loop-owned state (Ctx, Task, anything a handler of this server owns
// without locks): it runs concurrently with the loop. To reach the loop it may call
// Loop.Post, and it may use anything safe for concurrent use. A panic in h is answered
// with 500 (or cuts a begun response short) and logged; the server goes on.
func HTTPHandler(h http.Handler) HandlerFunc {
	if h == nil {
		panic("loop: HTTPHandler(nil)")
	}
	return func(c *Ctx) { c.srv.serveHTTP(c, h) }
}

// serveHTTP runs h for c. On c's task or goroutine.
func (s *Server) serveHTTP(c *Ctx, h http.Handler) {
	place := s.enterHTTP(c)
	if place == nil {
		return
	}
	r, err := c.httpRequest()
	if err != nil {
		place.leave()
		c.String(400, "400 Bad Request\n")
		return
	}
	place.watch(r.Context())
	x := &httpExchange{ack: make(chan struct{}, 1)}
	w := &httpWriter{x: x, ctx: r.Context(), header: make(http.Header), isHead: c.isHead,
		http10: c.req.ProtoMinor == 0, declared: -1}
	if _, multi := s.mode.(goroutineMode); multi {
		defer place.done()
		x.direct = c
		h.ServeHTTP(w, r) // a panic goes to runGoroutine's recovery: 500
		answerTooLarge(w, c.stream)
		w.finish(nil, nil)
		return
	}
	body := c.stream // c is not the goroutine's to read
	s.mtWG.Add(1)    // ListenAndServe waits for it after cancelling its context
	go func() {
		defer s.mtWG.Done()
		defer place.done()
		var pv any
		var stack []byte
		finished := false
		defer func() {
			if !finished {
				// runtime.Goexit in h (t.FailNow, log.Fatal's kin): the goroutine ends, and
				// its request is answered like a panic's (500, or cut short), as a native
				// handler's is, instead of leaving the task parked for good.
				w.finish(goexitPanic{}, debug.Stack())
			}
		}()
		func() {
			defer func() {
				if v := recover(); v != nil {
					pv, stack = v, debug.Stack()
				}
			}()
			h.ServeHTTP(w, r)
		}()
		if pv == nil {
			answerTooLarge(w, body)
		}
		finished = true
		w.finish(pv, stack)
	}()
	x.serve(c)
}

// httpRequest builds the *http.Request for c. On c's task or goroutine.
func (c *Ctx) httpRequest() (*http.Request, error) {
	target := string(c.req.Target)
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, err
	}
	hdr := make(http.Header, len(c.req.Headers))
	for _, h := range c.req.Headers {
		k := textproto.CanonicalMIMEHeaderKey(string(h.Name))
		if k == "Host" {
			continue
		}
		hdr[k] = append(hdr[k], string(h.Value))
	}
	r := &http.Request{
		Method: c.Method(), URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: c.req.ProtoMinor,
		Header: hdr, Host: string(c.req.Host), RequestURI: target, Close: !c.req.KeepAlive,
		ContentLength: c.req.ContentLength, Body: http.NoBody,
	}
	if c.req.ProtoMinor == 0 {
		r.Proto = "HTTP/1.0"
	}
	if u.Host != "" {
		r.Host = u.Host
	}
	if c.remote != nil {
		r.RemoteAddr = c.remote.String()
	}
	if c.req.Chunked {
		r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
	}
	if c.stream != nil {
		r.Body = c.stream // streamed as it arrives (nethttp_body.go)
	} else if len(c.body) > 0 || c.req.Chunked {
		// A copy: the handler's goroutine may outlive the task (client gone, shutdown
		// deadline), and the Ctx's buffer is reused after it.
		r.Body = io.NopCloser(bytes.NewReader(bytes.Clone(c.body)))
	} else if r.ContentLength < 0 {
		r.ContentLength = 0
	}
	ctx := c.Context()
	if a := c.srv.Addr(); a != nil {
		ctx = context.WithValue(ctx, http.LocalAddrContextKey, a)
	}
	return r.WithContext(ctx), nil
}

// httpMsg is what the writer hands the task.
type httpMsg uint8

const (
	httpMsgNone  httpMsg = iota
	httpMsgFlush         // write data to the connection now, then acknowledge
	httpMsgFinal         // the handler returned: write data and end the response
)

// httpHead is the response head as the handler left it when it was committed: immutable.
type httpHead struct {
	status    int
	hdrs      [][2]string // sanitised, without the headers the server writes
	cl        int64       // Content-Length, -1 when none
	chunked   bool        // chunked body (HTTP/1.1 without a length)
	closeConn bool        // the handler said "Connection: close"
	noBody    bool        // 1xx, 204 or 304
}

// httpExchange is where a net/http handler's goroutine (the writer) and the request's
// task meet. Fields under mu are shared; the rest belong to one side, as marked.
type httpExchange struct {
	direct *Ctx // multi-thread mode: the writer applies its messages to this Ctx itself

	mu       sync.Mutex
	msg      httpMsg     // the pending message, httpMsgNone when there is none
	data     []byte      // its body bytes, the writer's: the task copies them under mu
	head     *httpHead   // set with the first message that commits the head
	trailers http.Header // with httpMsgFinal: the trailers, immutable
	panicV   any         // with httpMsgFinal: the handler's panic, if it panicked
	stack    []byte
	resume   func() // the task's wake while it is parked waiting for a message
	err      error  // set by the task: what the writer's writes return from now on
	gone     bool   // the task no longer takes messages

	ack chan struct{} // the task acknowledges a flush (capacity 1)

	// Task side.
	committed bool
	dropped   bool // the server answered for the handler (deadline): write nothing
	sent      int64
}

// serve takes the writer's messages and writes them to c until the handler returns or the
// task is cancelled. On c's task (loop mode).
func (x *httpExchange) serve(c *Ctx) {
	for {
		resume, park := c.Task.ops.suspend(&c.Task, scheduler.ReasonOffload)
		x.mu.Lock()
		msg := x.msg
		if msg == httpMsgNone {
			x.resume = resume
			x.mu.Unlock()
			if err := park(); err != nil {
				x.shut(err)
				return
			}
			continue
		}
		x.take(c)
		x.mu.Unlock()
		if msg == httpMsgFinal {
			x.end(c)
			return
		}
		err := c.srv.mode.flush(c)
		x.mu.Lock()
		if err != nil && x.err == nil {
			x.err, x.gone = err, true
		}
		x.mu.Unlock()
		select { // a full channel holds an ack the writer has yet to take: it wakes either way
		case x.ack <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// shut stops taking messages: the task was cancelled (err) and is about to end.
func (x *httpExchange) shut(err error) {
	x.mu.Lock()
	x.gone = true
	if x.err == nil {
		x.err = err
	}
	x.resume = nil
	x.mu.Unlock()
	select {
	case x.ack <- struct{}{}:
	default:
	}
}

// take writes the pending message's head and body bytes into c's output and clears it.
// x.mu held; on c's task or goroutine.
func (x *httpExchange) take(c *Ctx) {
	data := x.data
	x.msg, x.data = httpMsgNone, nil
	if !x.committed && x.head != nil {
		x.committed = true
		x.commit(c, x.head)
	}
	if x.dropped || len(data) == 0 || c.isHead || x.head == nil || x.head.noBody {
		return
	}
	x.sent += int64(len(data))
	if c.chunked {
		c.out = httpcodec.AppendChunk(c.out, data)
	} else {
		c.out = append(c.out, data...)
	}
}

// commit writes the response head. On c's task or goroutine.
func (x *httpExchange) commit(c *Ctx, h *httpHead) {
	for _, kv := range h.hdrs {
		c.addHeader(kv[0], kv[1])
	}
	if h.closeConn {
		c.mustClose = true
	}
	cl := h.cl
	if h.noBody {
		cl = -1
	}
	if !c.writeHead(h.status, "", cl, h.chunked) {
		x.dropped = true
		return
	}
	if !h.noBody && cl < 0 {
		c.streaming, c.chunked = true, h.chunked // finishRequest ends or closes it
	}
}

// end finishes the response after the final message: trailers, a short Content-Length
// body, or the handler's panic (re-raised on the task, answered like a handler panic).
func (x *httpExchange) end(c *Ctx) {
	x.mu.Lock()
	pv, stack, trailers, h := x.panicV, x.stack, x.trailers, x.head
	x.gone = true
	x.mu.Unlock()
	if pv != nil {
		panic(&httpPanic{v: pv, stack: stack})
	}
	if x.dropped || h == nil {
		return
	}
	if !h.noBody && h.cl >= 0 && x.sent < h.cl && !c.isHead {
		c.aborted = true // fewer bytes than declared: net/http closes the connection too
	}
	if c.chunked && len(trailers) > 0 && !c.isHead {
		c.out = append(c.out, "0\r\n"...)
		for _, k := range sortedKeys(trailers) {
			if !validHTTPField(k) {
				continue
			}
			for _, v := range trailers[k] {
				c.out = append(c.out, k...)
				c.out = append(c.out, ": "...)
				c.out = append(c.out, sanitizeValue(v)...)
				c.out = append(c.out, "\r\n"...)
			}
		}
		c.out = append(c.out, "\r\n"...)
		c.chunked, c.streaming = false, false // ended here: finishRequest adds nothing
	}
}

// httpPanic is how a net/http handler's panic is re-raised on its task: the loop logs it
// (with the handler goroutine's stack) and answers 500.
type httpPanic struct {
	v     any
	stack []byte
}

func (p *httpPanic) String() string {
	return fmt.Sprintf("%v (net/http handler; its goroutine's stack: %s)", p.v, p.stack)
}

// Unwrap returns the handler's panic value when it is an error (http.ErrAbortHandler).
func (p *httpPanic) Unwrap() error {
	err, _ := p.v.(error)
	return err
}

// Error makes the re-raised value an error.
func (p *httpPanic) Error() string { return p.String() }
