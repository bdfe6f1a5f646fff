// Package nethttp serves net/http handlers as baton routes: an http.ServeMux, a
// FileServer, net/http/pprof or any middleware stack of the net/http world, mounted on a
// loop.Server beside native handlers. It is a client of package loop's exported API only.
//
// A net/http handler blocks, so it never runs on a loop. In single-thread mode the task of
// the request parks while the handler runs on a goroutine of its own; the two sides meet
// in an exchange: the handler's ResponseWriter hands the task one message at a time (a
// piece of body to write, or the end of the response) and waits until the task has written
// it to the connection, where the loop's backpressure parks the task while the client is
// slow. So a slow client blocks the handler's goroutine, never the loop, and memory per
// response stays bounded (one writer buffer and the stream's high-water mark). In
// multi-thread mode (loop.Config.MultiThread) the handler runs right on the request's own
// goroutine (loop.Task.MayBlock) and the writer applies its messages to the Ctx itself.
//
// The handlers run outside the offload pool's tokens (a net/http handler may stream for
// minutes: holding a token would starve the short blocking calls the pool is sized for),
// behind a gate of the offload package named "net/http" that the offload stats page shows,
// with a share per route (Config).
package nethttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// Config bounds the net/http handlers of an Adapter. Its zero value gives the defaults
// given on each field.
type Config struct {
	// MaxConcurrent is how many net/http handlers may run at once. Zero means 256: each
	// handler costs a stack (8 KiB and up) and a writer buffer (up to 32 KiB), so 256 of
	// them stay near 10 MiB under a flood, while 256 handlers each blocking for 10 ms still
	// serve 25,000 requests per second. Raise it for many long-lived streams (SSE).
	MaxConcurrent int
	// MaxQueue is how many requests may wait (parked, in FIFO order) for a place; past it
	// the client gets 503 with Retry-After: 1. Zero means 1024 (a burst four times the
	// default concurrency: a queued request holds only its parsed request and a parked
	// task); negative means no queue. Each route's queue at its MaxRouteShare is bounded
	// the same.
	MaxQueue int
	// MaxRouteShare is the largest share of MaxConcurrent that one route's handlers may
	// hold at once: cap = max(1, floor(MaxRouteShare x MaxConcurrent)). A request of a
	// route at its cap waits in that route's own queue (a gate named "net/http <route>"
	// on the offload stats page), which never delays other routes' requests. So a route
	// whose handlers hang (ignore their context) shuts out only itself, as offload's
	// MaxKeyShare does for offloaded calls. Between 0 and 1; 0 means 0.5 (a route that is
	// most of the traffic still gets half the gate, and a hung one leaves the other half
	// to pprof and admin pages; offload.DefaultMaxKeyShare's figure, for the same reason);
	// 1 turns the cap off.
	MaxRouteShare float64
	// AbandonAfter: a handler still running this long after its request ended (the
	// client went away, the handler deadline passed, the server stops) stops counting
	// against the gate and its route's share: it is logged and counted as abandoned, and
	// its goroutine runs on (a goroutine cannot be killed). At most MaxConcurrent
	// handlers are abandoned at once; past that they keep their places, so the
	// goroutines of net/http handlers stay bounded at twice MaxConcurrent. Zero means
	// 10 s (a handler that still runs 10 s after its request ended ignores its context,
	// and its place is better given to a request that can still be answered; long enough
	// for a handler that checks its context between steps of a second or two); negative:
	// never.
	AbandonAfter time.Duration
}

// The defaults of Config's fields.
const (
	defaultMaxConcurrent = 256
	defaultMaxQueue      = 1024
	defaultMaxRouteShare = 0.5
	defaultAbandonAfter  = 10 * time.Second
)

// Validate reports the first invalid field of c, naming it. Safe for concurrent use.
func (c Config) Validate() error {
	if c.MaxConcurrent < 0 {
		return fmt.Errorf("nethttp: Config.MaxConcurrent must not be negative, got %d", c.MaxConcurrent)
	}
	if math.IsNaN(c.MaxRouteShare) || c.MaxRouteShare < 0 || c.MaxRouteShare > 1 {
		return fmt.Errorf("nethttp: Config.MaxRouteShare must be between 0 and 1 (0: default %v; 1: off), got %v",
			defaultMaxRouteShare, c.MaxRouteShare)
	}
	return nil
}

// bufferBeforeCommit is how much body a net/http handler may write before the response
// head is sent: a handler that returns having written no more than this gets a
// Content-Length, a longer or flushed body is streamed (chunked). net/http's own threshold
// (bufferBeforeChunkingSize), so that both frame the same responses the same way.
const bufferBeforeCommit = 2048

// chunkBytes is how much body the writer gathers after the head before it hands a piece
// to the loop: large enough that a bulk response costs few round trips, small enough to
// bound memory per response.
const chunkBytes = 32 << 10

// Adapter serves net/http handlers on one loop.Server, behind one gate (Config). Make it
// with New, before ListenAndServe; mount handlers with Handle or Handler. Safe for
// concurrent use.
type Adapter struct {
	srv      *loop.Server
	log      *slog.Logger
	gate     *offload.Gate
	routeCap int           // places one route may hold (MaxRouteShare); 0: no cap
	queue    int           // the queue bound of the gate and of each route's
	abandon  time.Duration // AbandonAfter resolved; negative: never
	maxAband int64         // handlers abandoned at once at most (MaxConcurrent)

	routeMu sync.Mutex
	routes  map[string]*offload.Gate // each route's share of the gate; guarded by routeMu

	abandoned    atomic.Int64  // handlers abandoned and still running
	abandonTotal atomic.Uint64 // handlers ever abandoned
	abandonLog   logLimiter
}

// New returns an Adapter for srv with cfg's bounds (zero fields take the defaults) and
// registers its gate, named "net/http", on srv's offload stats. It returns cfg.Validate's
// error. Make one per server: each Adapter is a gate of its own. Any goroutine.
func New(srv *loop.Server, cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n, q := cfg.MaxConcurrent, cfg.MaxQueue
	if n == 0 {
		n = defaultMaxConcurrent
	}
	switch {
	case q == 0:
		q = defaultMaxQueue
	case q < 0:
		q = 0
	}
	a := &Adapter{srv: srv, log: srv.Config().Logger, queue: q, maxAband: int64(n), abandon: cfg.AbandonAfter}
	if a.log == nil {
		a.log = slog.Default()
	}
	share := cfg.MaxRouteShare
	if share == 0 {
		share = defaultMaxRouteShare
	}
	if share < 1 {
		a.routeCap = max(1, int(share*float64(n)))
	}
	if a.abandon == 0 {
		a.abandon = defaultAbandonAfter
	}
	a.abandonLog.every = 10 * time.Second
	a.gate = srv.NewGate("net/http", n, q)
	return a, nil
}

// Handle registers the net/http handler h for pattern on the Adapter's server, like
// loop.Server.Handle. A pattern ending in "/" is a prefix, as in net/http's ServeMux:
// "/static/" serves "/static/" and every path below it (it registers
// "/static/{httpPath...}"). The route streams request bodies (loop.StreamBody): h starts
// once the head is routed and Request.Body reads the body as it arrives (Read blocks h's
// goroutine until bytes arrive; the loop holds at most 64 KiB decoded per request plus
// loop.Config.MaxBufferedInput of input), "Expect: 100-continue" is answered at the first
// Read, and past loop.Config.Limits.MaxBodyBytes Read fails with *http.MaxBytesError (413
// if h then wrote nothing). h sees the request as Handler describes. Call it before
// ListenAndServe, from one goroutine.
func (a *Adapter) Handle(pattern string, h http.Handler, opts ...loop.RouteOption) {
	if h == nil {
		panic("nethttp: Handle: nil handler for " + pattern)
	}
	if strings.HasSuffix(pattern, "/") {
		pattern += "{httpPath...}"
	}
	a.srv.Handle(pattern, a.Handler(h), append(opts[:len(opts):len(opts)], loop.StreamBody())...)
}

// Handler returns a loop.HandlerFunc that serves the request with the net/http handler h.
//
// h runs on a goroutine of its own (in multi-thread mode, on the request's goroutine),
// never on a loop, behind the Adapter's gate; the task parks meanwhile. h gets an
// *http.Request with the method, URL (path and raw query as sent), protocol, headers
// (canonical keys, Host moved to Request.Host), Host, RemoteAddr, RequestURI,
// ContentLength and the body; its Context is cancelled when the client disconnects, the
// handler deadline passes, the server stops, or h returns. On a route registered with
// loop.StreamBody (as Handle does) the body streams; on another, the loop reads the whole
// body first (bounded by loop.Config.Limits.MaxBodyBytes) and h reads a copy. The
// ResponseWriter implements http.Flusher (each Flush reaches the socket within a loop
// turn, and blocks h while the client is more than 256 KiB behind), trailers (the
// "Trailer" header and http.TrailerPrefix), Content-Type sniffing, and
// http.ResponseController's Flush, SetReadDeadline (a no-op) and EnableFullDuplex; it
// does not implement http.Hijacker or 1xx responses, and the server writes Date,
// Connection and the framing headers itself.
//
// h must not touch loop-owned state (Ctx, Task, anything a handler of this server owns
// without locks): it runs concurrently with the loop. To reach the loop it may call
// loop.Loop.Post, and it may use anything safe for concurrent use. A panic in h is
// answered with 500 (or cuts a begun response short) and logged; the server goes on. Any
// goroutine.
func (a *Adapter) Handler(h http.Handler) loop.HandlerFunc {
	if h == nil {
		panic("nethttp: Handler(nil)")
	}
	return func(c *loop.Ctx) { a.serve(c, h) }
}

// serve runs h for c. On c's task or goroutine.
func (a *Adapter) serve(c *loop.Ctx, h http.Handler) {
	place := a.enter(c)
	if place == nil {
		return
	}
	r, body, err := a.request(c)
	if err != nil {
		place.leave()
		c.String(400, "400 Bad Request\n")
		return
	}
	place.watch(r.Context())
	x := &exchange{ack: make(chan struct{}, 1)}
	w := &writer{x: x, ctx: r.Context(), header: make(http.Header), isHead: r.Method == "HEAD",
		http10: r.ProtoMinor == 0, declared: -1}
	if c.MayBlock() { // a goroutine of its own already (multi-thread mode)
		defer place.done()
		x.direct = c
		h.ServeHTTP(w, r) // a panic or Goexit goes to the engine's recovery: 500
		answerTooLarge(w, body)
		w.finish(nil, nil)
		return
	}
	a.srv.RunOffLoop(func() { // ListenAndServe waits for it after cancelling its context
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
	})
	x.serve(c)
}

// request builds the *http.Request for c, and returns the streamed body too (nil when the
// body is not streamed). On c's task or goroutine.
func (a *Adapter) request(c *loop.Ctx) (*http.Request, io.ReadCloser, error) {
	target := c.RequestURI()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, nil, err
	}
	n := 0
	for range c.Headers() {
		n++
	}
	hdr := make(http.Header, n)
	var host string
	hasClose, hasKeepAlive := false, false
	for name, v := range c.Headers() {
		k := textproto.CanonicalMIMEHeaderKey(name)
		switch k {
		case "Host":
			if host == "" {
				host = v
			}
			continue
		case "Connection":
			for tok := range strings.SplitSeq(v, ",") {
				tok = strings.TrimSpace(tok)
				hasClose = hasClose || strings.EqualFold(tok, "close")
				hasKeepAlive = hasKeepAlive || strings.EqualFold(tok, "keep-alive")
			}
		}
		hdr[k] = append(hdr[k], v)
	}
	proto := c.Proto()
	minor := 1
	if proto == "HTTP/1.0" {
		minor = 0
	}
	r := &http.Request{
		Method: c.Method(), URL: u, Proto: proto, ProtoMajor: 1, ProtoMinor: minor,
		Header: hdr, Host: host, RequestURI: target, Body: http.NoBody, ContentLength: -1,
		Close: hasClose || (minor == 0 && !hasKeepAlive),
	}
	if u.Host != "" {
		r.Host = u.Host
	}
	if ra := c.RemoteAddr(); ra != nil {
		r.RemoteAddr = ra.String()
	}
	chunked := false
	for _, te := range hdr["Transfer-Encoding"] {
		chunked = chunked || strings.Contains(strings.ToLower(te), "chunked") // the loop accepts chunked only
	}
	if cl := hdr.Get("Content-Length"); cl != "" && !chunked {
		// Checked by the loop's parser (a request with a bad one was answered 400).
		r.ContentLength, _ = strconv.ParseInt(strings.TrimSpace(strings.Split(cl, ",")[0]), 10, 64)
	}
	if chunked {
		r.TransferEncoding = []string{"chunked"}
	}
	var streamed io.ReadCloser
	if rc, ok := c.BodyReader().(io.ReadCloser); ok {
		streamed = rc // streamed as it arrives (loop.StreamBody)
		r.Body = rc
	} else if b := c.Body(); len(b) > 0 || chunked {
		// A copy: the handler's goroutine may outlive the task (client gone, shutdown
		// deadline), and the Ctx's buffer is reused after it.
		r.Body = io.NopCloser(bytes.NewReader(bytes.Clone(b)))
	} else if r.ContentLength < 0 {
		r.ContentLength = 0
	}
	ctx := c.Context()
	if la := a.srv.Addr(); la != nil {
		ctx = context.WithValue(ctx, http.LocalAddrContextKey, la)
	}
	return r.WithContext(ctx), streamed, nil
}

// answerTooLarge answers 413 for a handler that wrote nothing after its streamed body went
// past loop.Config.Limits.MaxBodyBytes. On the handler's goroutine, after it returned.
func answerTooLarge(w *writer, body io.ReadCloser) {
	if body == nil || w.status != 0 {
		return
	}
	var mbe *http.MaxBytesError
	if _, err := body.Read(nil); errors.As(err, &mbe) { // an empty Read never waits (loop.StreamBody)
		http.Error(w, "413 Request Entity Too Large", http.StatusRequestEntityTooLarge)
	}
}

// goexitPanic is how a handler goroutine that called runtime.Goexit is reported: like a
// panic, it is answered with 500 and logged.
type goexitPanic struct{}

func (goexitPanic) String() string { return "runtime.Goexit called in a net/http handler" }

// handlerPanic is how a net/http handler's panic is re-raised on its task: the loop logs
// it (with the handler goroutine's stack) and answers 500.
type handlerPanic struct {
	v     any
	stack []byte
}

func (p *handlerPanic) String() string {
	return fmt.Sprintf("%v (net/http handler; its goroutine's stack: %s)", p.v, p.stack)
}

// Unwrap returns the handler's panic value when it is an error (http.ErrAbortHandler).
func (p *handlerPanic) Unwrap() error {
	err, _ := p.v.(error)
	return err
}

// Error makes the re-raised value an error.
func (p *handlerPanic) Error() string { return p.String() }

// logLimiter lets one log line through per interval and counts the rest. Safe for
// concurrent use.
type logLimiter struct {
	every      time.Duration
	mu         sync.Mutex
	next       time.Time
	suppressed int
}

// allow reports whether a line may be logged at now, and how many were suppressed since
// the last one.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.next, l.suppressed = now.Add(l.every), 0
	return true, n
}
