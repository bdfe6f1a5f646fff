package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/internal/router"
	"github.com/batonrt/baton/internal/scheduler"
)

// HandlerFunc handles one request. In single-thread mode it runs as a task on the loop: it
// may park (Sleep, Yield, Future.Await, offloaded calls) but must never block the thread.
type HandlerFunc func(c *Ctx)

// ErrClientGone is returned by writes of a task whose client disconnected.
var ErrClientGone = errors.New("loop: client connection closed")

// ctxPoolMax bounds the pooled request contexts kept for reuse: enough for a burst of
// thousands of parked requests, small enough that memory returns after a spike.
const ctxPoolMax = 4096

// maxKeptArena is the largest request arena, body or output buffer a pooled Ctx keeps.
const maxKeptArena = 16 << 10

// streamHighWater is how much unsent output a Stream tolerates before it parks its task
// until the client has read some: it bounds memory per slow reader.
const streamHighWater = 256 << 10

// streamPoll is how often a Stream parked on backpressure checks the socket again (gnet
// reports no "drained" event).
const streamPoll = time.Millisecond

// Response head states of a Ctx (Ctx.head). A handler's head write and the handler
// deadline's 503 race in multi-thread mode, so the state moves by compare-and-swap there
// (claimHead).
const (
	headNone    int32 = iota // nothing written yet
	headHandler              // the handler wrote the response head
	headServer               // the server answered (deadline): the handler's writes are dropped
)

// Ctx is one request and its response. A handler receives it and may use it until it
// returns; the server reuses it afterwards, so do not keep it (or slices it returned) past
// that. Strings it returns are copies and may be kept.
//
// Methods must be called from the handler's own task (or goroutine, in multi-thread mode).
type Ctx struct {
	Task

	conn    *conn // loop-owned: never touched by a multi-thread handler
	route   *route
	remote  net.Addr
	req     httpcodec.Request // views into arena, or into gnet's read buffer while headInBuf
	arena   []byte
	body    []byte
	stream  *bodyPipe // the streamed body (StreamBody routes; bodystream.go), nil otherwise
	reader  bytes.Reader
	params  router.Params
	pattern string
	query   url.Values

	out       []byte // response bytes produced by the handler, moved to the connection on the loop
	hdrs      []httpcodec.Header
	hdrArena  []byte
	status    int
	head      int32 // headNone, headHandler or headServer: headState, claimHead
	chunked   bool  // the body is being streamed with chunked coding
	streaming bool
	noBody    bool // a streamed response whose status allows no body (204, 304): writes are refused
	sized     bool // a body of a declared length (responseframing.go)
	owed      bool // a declared-length body with bytes still to write: a short body
	trailers  bool // hdrArena holds trailer lines (Stream.Trailer), no longer the head's headers
	aborted   bool // a panic cut a streamed body short: the connection must close
	isHead    bool // HEAD request: no body is sent
	closeConn bool // the response says Connection: close
	mustClose bool // decided at dispatch or set by the handler: the connection closes after this response
	declared  bool // hdrs holds a Content-Length the handler set, for the next Stream (responseframing.go)

	// Loop-owned bookkeeping.
	acceptedAt int64 // loop nanotime when the head was parsed
	arrivedAt  int64 // its arrival (arrival.go): where its latency starts
	queuedAt   int64 // loop nanotime when it entered the admission queue, 0 if never
	queueWait  time.Duration
	counted    bool // holds an admission slot
	deadline   *scheduler.Timer
	deadlineFn func()
	finished   bool  // finishRequest ran in the task's last slice; onSliceStop frees c
	headInBuf  bool  // req's views are in gnet's read buffer, not in arena (headinbuf.go)
	bytesOut   int64 // response bytes delivered, counted only with Config.OnRequestDone

	values []ctxValue // request-scoped values set by middleware (SetValue)
}

// ctxValue is one request-scoped value.
type ctxValue struct {
	key, val any
}

func (s *Server) acquireCtx(cs *conn) *Ctx {
	var c *Ctx
	if n := len(s.ctxFree); n > 0 {
		c = s.ctxFree[n-1]
		s.ctxFree[n-1] = nil
		s.ctxFree = s.ctxFree[:n-1]
	} else {
		c = &Ctx{}
		c.Task.srv, c.Task.c = s, c
		c.Task.ops = loopTask{} // goroutineMode.start replaces it; Ctxs are pooled only in loop mode
		c.deadlineFn = func() { s.handlerDeadline(c) }
	}
	c.conn = cs
	c.remote = cs.remote
	return c
}

func (s *Server) releaseCtx(c *Ctx) {
	c.Task.release()
	c.conn, c.route, c.remote, c.pattern, c.query = nil, nil, nil, "", nil
	// c.req is overwritten whole before its next use (serveStep copies or moves a parsed
	// head in); what it still points to is the arena kept below or gnet's read buffer,
	// which lives as long as the loop. Only the headers' length matters: it is the
	// capacity kept. The parameters must be empty for the route memo (routememo.go).
	c.req.Headers = c.req.Headers[:0]
	if c.params.Len() > 0 {
		c.resetParams()
	}
	c.reader.Reset(nil)
	c.stream = nil
	if cap(c.body) > maxKeptArena || cap(c.arena) > maxKeptArena || cap(c.out) > maxKeptArena {
		c.dropBuffers()
	}
	c.body = c.body[:0]
	c.arena = c.arena[:0]
	c.out = c.out[:0]
	c.hdrs = c.hdrs[:0]
	c.hdrArena = c.hdrArena[:0]
	c.status = 0
	c.head = headNone // c's handler is over: nothing else reads it any more
	c.chunked, c.streaming, c.aborted, c.isHead, c.closeConn, c.mustClose = false, false, false, false, false, false
	c.noBody, c.sized, c.owed, c.trailers, c.declared = false, false, false, false, false
	c.acceptedAt, c.queuedAt, c.queueWait, c.counted, c.deadline = 0, 0, 0, false, nil
	c.finished, c.bytesOut, c.headInBuf = false, 0, false
	if len(c.values) > 0 {
		c.clearValues()
	}
	if n := len(s.ctxFree); n < ctxPoolMax && s.poolCtx {
		if n == cap(s.ctxFree) {
			s.growCtxFree()
		}
		s.ctxFree = s.ctxFree[:n+1]
		s.ctxFree[n] = c
	}
}

// growCtxFree makes room in the pool of free contexts. Out of line, as below.
//
//go:noinline
func (s *Server) growCtxFree() { s.ctxFree = append(s.ctxFree, nil)[:len(s.ctxFree)] }

// resetParams, dropBuffers and clearValues are releaseCtx's parts for what a plain request
// does not leave behind (route parameters, a buffer grown past maxKeptArena, request
// values). Out of line: their code stays off the request path's instruction-cache lines
// (docs/bench.md, "The split of loop").
//
//go:noinline
func (c *Ctx) resetParams() { c.params.Reset() }

//go:noinline
func (c *Ctx) dropBuffers() {
	trimKept(&c.body)
	trimKept(&c.arena)
	trimKept(&c.out)
}

//go:noinline
func (c *Ctx) clearValues() {
	clear(c.values)
	c.values = c.values[:0]
}

// trimKept empties *b, and lets it go if it grew past maxKeptArena. The kept case only
// shortens the slice in place (no pointer written, so no write barrier): releaseCtx runs
// once per request.
func trimKept(b *[]byte) {
	if cap(*b) > maxKeptArena {
		*b = nil
		return
	}
	*b = (*b)[:0]
}

// Method returns the request method, e.g. "GET".
func (c *Ctx) Method() string {
	m := c.req.Method
	for _, k := range commonMethods {
		if string(m) == k {
			return k
		}
	}
	return string(m)
}

var commonMethods = [...]string{"GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"}

// Path returns the request path as sent (not unescaped), without the query.
func (c *Ctx) Path() string { return string(c.req.Path) }

// RequestURI returns the request-target as sent in the request line: "/p?q" usually,
// "http://host/p?q" from a client talking to a proxy, "*" for "OPTIONS *" (what net/http
// calls Request.RequestURI).
func (c *Ctx) RequestURI() string { return string(c.req.Target) }

// Proto returns the request's protocol version, "HTTP/1.1" or "HTTP/1.0".
func (c *Ctx) Proto() string {
	if c.req.ProtoMinor == 0 {
		return "HTTP/1.0"
	}
	return "HTTP/1.1"
}

// RawQuery returns the query string without the '?', as sent.
func (c *Ctx) RawQuery() string { return string(c.req.RawQuery) }

// Query returns the first value of the query parameter name, or "".
func (c *Ctx) Query(name string) string {
	if c.query == nil {
		c.query, _ = url.ParseQuery(string(c.req.RawQuery))
	}
	return c.query.Get(name)
}

// PathValue returns the value of the {name} segment of the matched route pattern,
// unescaped as net/http's Request.PathValue does ("caf%C3%A9" gives "café"), or "". A
// segment that is not valid escaping is returned as sent.
func (c *Ctx) PathValue(name string) string {
	v, _ := c.params.Get(name)
	if strings.IndexByte(v, '%') < 0 {
		return strings.Clone(v)
	}
	u, err := url.PathUnescape(v)
	if err != nil {
		return strings.Clone(v)
	}
	return u
}

// Route returns the pattern of the matched route, e.g. "GET /users/{id}".
func (c *Ctx) Route() string { return c.pattern }

// Header returns the first value of the request header name (case-insensitive), or "".
func (c *Ctx) Header(name string) string {
	v, _ := c.req.Get(name)
	return string(v)
}

// Headers returns every request header as (name, value) pairs, in the order received,
// names as sent. The strings are copies.
func (c *Ctx) Headers() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, h := range c.req.Headers {
			if !yield(string(h.Name), string(h.Value)) {
				return
			}
		}
	}
}

// SetValue stores a request-scoped value under key, replacing an earlier one: middleware
// hands what it learnt (the authenticated player) to the handler, and Context carries it
// to context-based libraries and offloaded functions. Keys compare like map keys; use an
// unexported type of your own to avoid collisions.
func (c *Ctx) SetValue(key, val any) {
	if c.Task.ctx != nil { // made already: the value joins it (Context carries the values)
		c.Task.ctx = context.WithValue(c.Task.ctx, key, val)
	}
	for i := range c.values {
		if c.values[i].key == key {
			c.values[i].val = val
			return
		}
	}
	c.values = append(c.values, ctxValue{key, val})
}

// SetContext makes ctx the request's context: what Context returns from now on, and the
// parent of the context offloaded functions get. ctx must derive from c.Context(), so that
// the client's disconnect, the handler deadline and the handler's return still cancel it:
// a middleware starts a tracing span or attaches a logger with
// c.SetContext(trace.ContextWithSpan(c.Context(), span)). From the handler's task.
func (c *Ctx) SetContext(ctx context.Context) {
	c.Context() // made (and its cancellation wired) first
	c.Task.ctx = ctx
}

// Value returns the value SetValue stored under key, or nil.
func (c *Ctx) Value(key any) any {
	for i := range c.values {
		if c.values[i].key == key {
			return c.values[i].val
		}
	}
	return nil
}

// Body returns the request body, decoded from Content-Length or chunked framing. The slice
// is valid until the handler returns; copy what you keep.
func (c *Ctx) Body() []byte { return c.body }

// BodyReader returns the request body as an io.Reader, valid until the handler returns. On
// a route registered with StreamBody, a request with a body gets its streamed body: an
// io.ReadCloser that reads the body as it arrives (see StreamBody).
func (c *Ctx) BodyReader() io.Reader {
	if c.stream != nil {
		return c.stream
	}
	c.reader.Reset(c.body)
	return &c.reader
}

// RemoteAddr returns the client's address: the connection's peer, or, for a request from
// one of Config.TrustedProxies, the client its Forwarded or X-Forwarded-For header names.
func (c *Ctx) RemoteAddr() net.Addr { return c.remote }

// SetHeader sets response header name to value, replacing earlier values. It panics if the
// name is not a valid token, the value contains CR, LF or NUL (header injection), the
// header is one the server writes (Transfer-Encoding, Date, and Content-Length or
// Connection but as below), or the response head was already written.
//
// Two of the server's headers state the response's framing, as with net/http:
// "Connection: close" makes the connection close after this response (the server reads no
// further request from it), and "Content-Length: N" (N >= 0) makes a Stream started later
// send a body of N bytes with a Content-Length instead of chunked coding, for HTTP/1.0 and
// HTTP/1.1 clients alike: Write refuses bytes past N with http.ErrContentLength, and a
// handler that returns having written fewer leaves the client a short body and the
// connection closes after it. String, Bytes and JSON send their own body's length. Any
// other value of these two panics.
func (c *Ctx) SetHeader(name, value string) {
	if reservedHeader(name) {
		c.setFraming(name, value)
		return
	}
	c.delHeader(name)
	c.addValid(name, value)
}

// AddHeader adds a value for response header name; it panics like SetHeader, and on the
// headers the server writes (Content-Length and Connection included: set them with
// SetHeader).
func (c *Ctx) AddHeader(name, value string) {
	if reservedHeader(name) {
		panic("loop: response header " + name + " is set by the server")
	}
	c.addValid(name, value)
}

// addValid adds a header that is not the server's, checking the head is not written yet
// and the name and value are valid. From the handler's task.
func (c *Ctx) addValid(name, value string) {
	if c.headState() == headHandler {
		panic("loop: header " + name + " set after the response head was written")
	}
	if !httpcodec.ValidHeaderName(unsafeBytes(name)) || !httpcodec.ValidHeaderValue(unsafeBytes(value)) {
		panic("loop: invalid response header " + strconv.Quote(name) + ": " + strconv.Quote(value))
	}
	c.addHeader(name, value)
}

// addHeader appends a header without validation, for values already checked or set by
// the server.
func (c *Ctx) addHeader(name, value string) {
	start := len(c.hdrArena)
	c.hdrArena = append(c.hdrArena, name...)
	c.hdrArena = append(c.hdrArena, value...)
	c.hdrs = append(c.hdrs, httpcodec.Header{
		Name:  c.hdrArena[start : start+len(name) : start+len(name)],
		Value: c.hdrArena[start+len(name) : len(c.hdrArena) : len(c.hdrArena)],
	})
}

func (c *Ctx) delHeader(name string) {
	kept := c.hdrs[:0]
	for _, h := range c.hdrs {
		if !strings.EqualFold(unsafeString(h.Name), name) {
			kept = append(kept, h)
		}
	}
	clear(c.hdrs[len(kept):])
	c.hdrs = kept
}

func (c *Ctx) hasHeader(name string) bool {
	for _, h := range c.hdrs {
		if strings.EqualFold(unsafeString(h.Name), name) {
			return true
		}
	}
	return false
}

// reservedHeader reports headers that framing depends on: the server writes them.
func reservedHeader(name string) bool {
	return strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Transfer-Encoding") ||
		strings.EqualFold(name, "Connection") || strings.EqualFold(name, "Date")
}

// Status returns the status of the response head written so far: the handler's, or 503
// when the server answered for it (the handler's deadline passed); 0 while no head has
// been written (a head is written once, so nonzero means the response has begun). What a
// middleware records after next returned (a handler that wrote nothing gets an empty 200
// after the middleware returns). From the handler's task.
func (c *Ctx) Status() int {
	switch c.headState() {
	case headHandler:
		return c.status
	case headServer:
		return 503
	}
	return 0
}

// String answers with status and a text/plain body. Like every writer it panics on a
// status below 200 (1xx heads are not responses; 101 is Upgrade's), which answers 500; a
// 204 or 304 response, and any response to HEAD, is sent without its body.
func (c *Ctx) String(status int, body string) {
	c.respond(status, ctypeText, unsafeBytes(body))
}

// Bytes answers with status, a Content-Type (omitted if empty) and body.
func (c *Ctx) Bytes(status int, contentType string, body []byte) {
	c.respond(status, contentType, body)
}

// JSON answers with status and v encoded as JSON. If v cannot be encoded the answer is 500
// and the error is logged.
func (c *Ctx) JSON(status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.srv.log.Error("loop: JSON response", "route", c.pattern, "err", err)
		c.String(500, "500 Internal Server Error\n")
		return
	}
	b = append(b, '\n')
	c.respond(status, ctypeJSON, b)
}

// respond writes a complete response. It panics if the handler already wrote one; it does
// nothing if the server already answered for the handler (deadline).
func (c *Ctx) respond(status int, contentType string, body []byte) {
	cl := int64(len(body))
	if status == 204 || status == 304 {
		cl = -1
		body = nil
	}
	if !c.writeHead(status, contentType, cl, false) {
		return
	}
	if !c.isHead {
		c.out = append(c.out, body...)
	}
}

// writeHead appends the status line and headers to the response output. It reports false
// (and writes nothing) when the server already answered for this handler.
func (c *Ctx) writeHead(status int, contentType string, contentLength int64, chunked bool) bool {
	if status < 200 || status > 999 {
		badStatus(status)
	}
	if !c.claimHead(headHandler) {
		if c.headState() == headServer {
			return false
		}
		panic("loop: response already written")
	}
	c.status = status
	if c.declared { // a body written whole states its own length
		c.undeclare()
	}
	if len(c.hdrs) == 0 && c.writeHeadCached(status, contentType, contentLength, chunked) {
		return true
	}
	c.writeHeadFull(status, contentType, contentLength, chunked)
	return true
}

// badStatus panics for a status writeHead refuses. Out of line, as undeclare and
// writeHeadFull: what a plain response does not run stays off the request path's
// instruction-cache lines (docs/bench.md, "The split of loop").
//
//go:noinline
func badStatus(status int) {
	if status < 100 || status > 999 {
		panic("loop: invalid status code " + strconv.Itoa(status))
	}
	// An interim head as the only response leaves the client waiting for the final one
	// (or taking the next pipelined response as this one's); 101 without the switch it
	// announces is the same lie. The panic is the handler's: answered with 500, logged.
	panic("loop: status " + strconv.Itoa(status) + " is not a final response: a handler answers with 200-999 (101 only through Upgrade)")
}

//go:noinline
func (c *Ctx) undeclare() {
	c.delHeader("Content-Length")
	c.declared = false
}

// writeHeadFull is writeHead's path for a head the cache does not hold: headers of the
// handler's own, Server-Timing, multi-thread mode.
//
//go:noinline
func (c *Ctx) writeHeadFull(status int, contentType string, contentLength int64, chunked bool) {
	if contentType != "" && !c.hasHeader("Content-Type") {
		// Not copied into hdrArena: strings are immutable and nothing writes through the
		// views (AppendResponseHead only reads them).
		c.hdrs = append(c.hdrs, httpcodec.Header{Name: contentTypeName, Value: unsafeBytes(contentType)})
	}
	if c.srv.cfg.ServerTiming && c.route != nil {
		c.appendServerTiming()
	}
	bodyByClose := contentLength < 0 && !chunked && status >= 200 && status != 204 && status != 304
	c.closeConn = !c.req.KeepAlive || c.mustClose || c.srv.life.draining() || bodyByClose
	h := httpcodec.ResponseHead{
		Status:        status,
		Headers:       c.hdrs,
		ContentLength: contentLength,
		Chunked:       chunked,
		Close:         c.closeConn,
		KeepAlive10:   !c.closeConn && c.req.ProtoMinor == 0,
		Date:          *c.srv.dateBytes.Load(),
	}
	var err error
	if c.out, err = httpcodec.AppendResponseHead(c.out, &h); err != nil {
		panic("loop: " + err.Error()) // headers are validated when set: unreachable
	}
}

// Stream starts a streamed response with status and contentType and returns its writer.
// HTTP/1.1 clients get chunked coding; HTTP/1.0 clients get a body delimited by closing
// the connection. A HEAD request gets the head only (writes are dropped); a status that
// allows no body (204, 304) gets the head only too, and Write refuses its bytes with
// http.ErrBodyNotAllowed. The response ends when the handler returns. Like String, it panics
// on a status below 200.
func (c *Ctx) Stream(status int, contentType string) *Stream {
	if c.declared {
		return c.streamLength(status, contentType)
	}
	noBody := status == 204 || status == 304
	chunked := c.req.ProtoMinor >= 1 && !noBody
	if c.writeHead(status, contentType, -1, chunked) {
		c.streaming, c.chunked, c.noBody = true, chunked, noBody
	}
	return &Stream{c: c}
}

// Stream writes a response body in pieces. Each piece written reaches the socket within
// one loop turn: at the latest when the task next parks, yields or returns (pieces written
// in the same turn leave in one write). When the client reads slower than the handler
// writes, Write parks the task until the client's backlog is under 256 KiB, so memory per
// slow reader stays bounded (with the socket's send buffer, Config.StreamSendBuffer); in
// single-thread mode a Write that brings the bytes written in one slice to 32 KiB yields,
// so many streams share the loop. Use it only from the handler that created it, before the
// handler returns.
type Stream struct {
	c      *Ctx
	remain int64 // a declared-length body's bytes still to write
}

// Write appends p to the response and hands it to the connection (see Stream), parking
// while the client is too far behind. A Write of no bytes hands what was written so far
// to the connection now: the head of a stream with no body yet (what http.Flusher's Flush
// does). It returns http.ErrBodyNotAllowed for bytes of a 204 or 304 response,
// ErrClientGone once the client has disconnected, or the task's cancellation error.
func (w *Stream) Write(p []byte) (int, error) {
	c := w.c
	if !c.streaming {
		return len(p), nil // the server answered for the handler (deadline): drop
	}
	if len(p) == 0 {
		return 0, w.flush()
	}
	if c.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if err := c.Err(); errors.Is(err, context.Canceled) {
		return 0, ErrClientGone
	}
	if c.sized {
		if err := w.sizedWrite(p); err != nil {
			return 0, err
		}
	}
	if len(p) == 0 || c.isHead {
		return len(p), nil
	}
	if c.chunked {
		c.out = httpcodec.AppendChunk(c.out, p)
	} else {
		c.out = append(c.out, p...)
	}
	if err := w.flush(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush hands what was written to the connection now and parks while the client is too
// far behind (Write of no bytes). From the handler's task.
func (w *Stream) flush() error { return w.c.srv.mode.flush(w.c) }

// contentTypeName is the header name writeHead adds, shared by every response.
var contentTypeName = []byte("Content-Type")

// unsafeBytes views s as bytes for read-only use.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// unsafeString views b as a string without copying; the result must not outlive b's
// contents and must never be handed to user code that could keep it.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
