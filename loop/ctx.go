package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/batonrt/baton/httpcodec"
	"github.com/batonrt/baton/internal/router"
	"github.com/batonrt/baton/scheduler"
)

// HandlerFunc handles one request. It runs as a task on the loop: it may park (Sleep,
// Yield, Future.Await) but must never block the thread.
type HandlerFunc func(c *Ctx)

// ErrClientGone is returned by writes and waits of a task whose client disconnected.
var ErrClientGone = errors.New("loop: client connection closed")

// ctxPoolMax bounds the pooled request contexts kept for reuse: enough for a burst of
// thousands of parked requests, small enough that memory returns after a spike.
const ctxPoolMax = 4096

// maxKeptArena is the largest request arena a pooled Ctx keeps.
const maxKeptArena = 16 << 10

// streamFlushBytes is how much a Stream gathers before writing to the socket.
const streamFlushBytes = 32 << 10

// streamHighWater is how much unsent output a Stream tolerates before it parks its task
// until the client has read some: it bounds memory per slow reader.
const streamHighWater = 256 << 10

// streamPoll is how often a Stream parked on backpressure checks the socket again (gnet
// reports no "drained" event).
const streamPoll = time.Millisecond

// Task is the handle of the running task: a request's (embedded in Ctx) or a background
// task's (from Server.Go or Server.Every). Loop-confined: call its methods only from the
// task it belongs to, and not after that task's function has returned.
type Task struct {
	srv       *Server
	t         *scheduler.Task
	ctx       context.Context // created on first use
	cancelCtx context.CancelFunc
	err       error // why the task was cancelled, nil while it is not
}

// Sleep parks the task for d while the loop serves others. It returns nil after d, or the
// task's cancellation error (context.Canceled when the client went away) as soon as the
// task is cancelled.
func (t *Task) Sleep(d time.Duration) error { return t.t.Sleep(d) }

// Yield lets every other ready task and the loop's pending I/O run before this task
// continues: call it between steps of long CPU work.
func (t *Task) Yield() { t.t.Yield() }

// ID returns the task's id, unique within the server's lifetime.
func (t *Task) ID() uint64 { return t.t.ID() }

// parkFor parks the task for d with reason r (Sleep always reports ReasonSleep).
func (t *Task) parkFor(r scheduler.Reason, d time.Duration) error {
	wk := t.t.Waker()
	tm := t.srv.sched.AfterFunc(d, func() { wk.Wake() })
	err := t.t.Park(r)
	tm.Stop()
	return err
}

// Stats returns the task's scheduling figures so far, including the running slice.
func (t *Task) Stats() scheduler.Stats { return t.t.Stats() }

// Server returns the server the task runs on.
func (t *Task) Server() *Server { return t.srv }

// Err returns why the task was cancelled (context.Canceled when its client disconnected),
// or nil.
func (t *Task) Err() error { return t.err }

// Context returns a context cancelled when the task is cancelled (its client disconnected
// or the server stopped) and, for a request, when its handler returns. Pass it to code run
// off the loop (offloaded calls); on the loop, Sleep and Await already return early.
func (t *Task) Context() context.Context {
	if t.ctx == nil {
		t.ctx, t.cancelCtx = context.WithCancel(t.srv.baseCtx)
		if t.err != nil {
			t.cancelCtx()
		}
	}
	return t.ctx
}

// cancel records err, cancels the context if it exists and wakes the task if parked.
func (t *Task) cancel(err error) {
	if t.err != nil {
		return
	}
	t.err = err
	if t.cancelCtx != nil {
		t.cancelCtx()
	}
	if t.t != nil && !t.srv.schedDone {
		t.srv.sched.Cancel(t.t, err)
	}
}

// release cancels the context at the end of the task.
func (t *Task) release() {
	if t.cancelCtx != nil {
		t.cancelCtx()
	}
	t.ctx, t.cancelCtx, t.err, t.t = nil, nil, nil, nil
}

// task returns the scheduler task; it lets Future and Event accept both *Task and *Ctx.
func (t *Task) task() *scheduler.Task { return t.t }

// Ctx is one request and its response. A handler receives it and may use it until it
// returns; the server reuses it afterwards, so do not keep it (or slices it returned) past
// that. Strings it returns are copies and may be kept. Loop-confined.
type Ctx struct {
	Task

	conn    *conn
	req     httpcodec.Request // views into arena
	arena   []byte
	body    []byte
	reader  bytes.Reader
	params  router.Params
	pattern string
	handler HandlerFunc
	query   url.Values

	status    int
	hdrs      []httpcodec.Header // response headers, views into hdrArena
	hdrArena  []byte
	wrote     bool // the response head was written
	chunked   bool // the body is being streamed with chunked coding
	streaming bool
	head      bool // HEAD request: no body is sent
}

func (s *Server) acquireCtx(cs *conn) *Ctx {
	var c *Ctx
	if n := len(s.ctxFree); n > 0 {
		c = s.ctxFree[n-1]
		s.ctxFree[n-1] = nil
		s.ctxFree = s.ctxFree[:n-1]
	} else {
		c = &Ctx{}
		c.Task.srv = s
	}
	c.conn = cs
	return c
}

func (s *Server) releaseCtx(c *Ctx) {
	c.Task.release()
	c.conn, c.handler, c.pattern, c.query = nil, nil, "", nil
	c.req.Reset()
	c.params.Reset()
	c.reader.Reset(nil)
	c.body = c.body[:0]
	if cap(c.body) > maxKeptArena {
		c.body = nil
	}
	if cap(c.arena) > maxKeptArena {
		c.arena = nil
	}
	c.hdrs, c.hdrArena = c.hdrs[:0], c.hdrArena[:0]
	c.status, c.wrote, c.chunked, c.streaming, c.head = 0, false, false, false, false
	if len(s.ctxFree) < ctxPoolMax {
		s.ctxFree = append(s.ctxFree, c)
	}
}

// dispatch routes c and starts its task, or answers 404/405 at once.
func (s *Server) dispatch(cs *conn, c *Ctx) {
	cs.deadline, cs.deadlineKind = 0, deadlineNone
	c.head = bytesEqualString(c.req.Method, "HEAD")
	if s.draining {
		s.drained.RejectedDuring++
		cs.closeAfter = true
		s.inlineResponse(cs, c, 503, "")
		return
	}
	h, pattern, res, allow := s.router.Lookup(unsafeString(c.req.Method), unsafeString(c.req.Path), &c.params)
	switch res {
	case router.Found:
	case router.MethodNotAllowed:
		s.inlineResponse(cs, c, 405, allow)
		return
	default:
		s.inlineResponse(cs, c, 404, "")
		return
	}
	c.handler, c.pattern = h, pattern
	cs.ctx = c
	s.inflight++
	c.Task.t = s.sched.Spawn(s.runTaskFn, c)
	c.Task.t.SetLabel(pattern)
}

// inlineResponse answers c without running a task.
func (s *Server) inlineResponse(cs *conn, c *Ctx, status int, allow string) {
	cs.ctx = c
	if allow != "" {
		c.SetHeader("Allow", allow)
	}
	c.String(status, httpcodec.StatusText(status)+"\n")
	cs.ctx = nil
	if !c.req.KeepAlive {
		cs.closeAfter = true
	}
	s.releaseCtx(c)
}

// runTask is the body of every request task.
func (s *Server) runTask(t *scheduler.Task) {
	c := t.Arg().(*Ctx)
	c.handler(c)
	s.finishRequest(c)
}

// finishRequest completes c's response, frees it and lets its connection move on.
func (s *Server) finishRequest(c *Ctx) {
	cs := c.conn
	if !c.wrote {
		c.Bytes(200, "", nil)
	} else if c.chunked && !cs.closed {
		cs.out = httpcodec.AppendFinalChunk(cs.out)
	}
	if !c.req.KeepAlive || (c.streaming && !c.chunked) {
		cs.closeAfter = true
	}
	cs.ctx = nil
	s.inflight--
	s.releaseCtx(c)
	s.markDirty(cs)
}

// Method returns the request method, e.g. "GET".
func (c *Ctx) Method() string {
	m := c.req.Method
	for _, k := range commonMethods {
		if bytesEqualString(m, k) {
			return k
		}
	}
	return string(m)
}

var commonMethods = [...]string{"GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"}

// Path returns the request path as sent (not unescaped), without the query.
func (c *Ctx) Path() string { return string(c.req.Path) }

// RawQuery returns the query string without the '?', as sent.
func (c *Ctx) RawQuery() string { return string(c.req.RawQuery) }

// Query returns the first value of the query parameter name, or "".
func (c *Ctx) Query(name string) string {
	if c.query == nil {
		c.query, _ = url.ParseQuery(unsafeString(c.req.RawQuery))
	}
	return c.query.Get(name)
}

// PathValue returns the value of the {name} segment of the matched route pattern, or "".
func (c *Ctx) PathValue(name string) string {
	v, _ := c.params.Get(name)
	return strings.Clone(v)
}

// Route returns the pattern of the matched route, e.g. "GET /users/{id}".
func (c *Ctx) Route() string { return c.pattern }

// Header returns the first value of the request header name (case-insensitive), or "".
func (c *Ctx) Header(name string) string {
	v, _ := c.req.Get(name)
	return string(v)
}

// HeaderValues returns every value of the request header name, in order.
func (c *Ctx) HeaderValues(name string) []string {
	var vs []string
	for _, h := range c.req.Headers {
		if len(h.Name) == len(name) && strings.EqualFold(unsafeString(h.Name), name) {
			vs = append(vs, string(h.Value))
		}
	}
	return vs
}

// ProtoMinor returns 1 for HTTP/1.1 and 0 for HTTP/1.0.
func (c *Ctx) ProtoMinor() int { return c.req.ProtoMinor }

// Body returns the request body, decoded from Content-Length or chunked framing. The slice
// is valid until the handler returns; copy what you keep.
func (c *Ctx) Body() []byte { return c.body }

// BodyReader returns the request body as an io.Reader, valid until the handler returns.
func (c *Ctx) BodyReader() io.Reader {
	c.reader.Reset(c.body)
	return &c.reader
}

// RemoteAddr returns the client's address.
func (c *Ctx) RemoteAddr() net.Addr { return c.conn.gc.RemoteAddr() }

// SetHeader sets response header name to value, replacing earlier values. It panics if the
// name is not a valid token or the value contains CR, LF or NUL (header injection), or if
// the response head was already written.
func (c *Ctx) SetHeader(name, value string) {
	c.delHeader(name)
	c.AddHeader(name, value)
}

// AddHeader adds a value for response header name; panics like SetHeader.
func (c *Ctx) AddHeader(name, value string) {
	if c.wrote {
		panic("loop: header " + name + " set after the response head was written")
	}
	if !httpcodec.ValidHeaderName(unsafeBytes(name)) || !httpcodec.ValidHeaderValue(unsafeBytes(value)) {
		panic("loop: invalid response header " + strconv.Quote(name) + ": " + strconv.Quote(value))
	}
	if reservedHeader(name) {
		panic("loop: response header " + name + " is set by the server")
	}
	c.addHeader(name, value)
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

// Written reports whether the response head has been written.
func (c *Ctx) Written() bool { return c.wrote }

// String answers with status and a text/plain body.
func (c *Ctx) String(status int, body string) {
	c.respond(status, "text/plain; charset=utf-8", unsafeBytes(body))
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
	c.respond(status, "application/json", b)
}

// NoContent answers 204 with no body.
func (c *Ctx) NoContent() { c.respond(204, "", nil) }

// respond writes a complete response. It panics if the response was already written.
func (c *Ctx) respond(status int, contentType string, body []byte) {
	cl := int64(len(body))
	if status == 204 || status == 304 || status < 200 {
		cl = -1
		body = nil
	}
	c.writeHead(status, contentType, cl, false)
	if !c.head && !c.conn.closed {
		c.conn.out = append(c.conn.out, body...)
	}
}

// writeHead appends the status line and headers to the connection's output.
func (c *Ctx) writeHead(status int, contentType string, contentLength int64, chunked bool) {
	if c.wrote {
		panic("loop: response already written")
	}
	if status < 100 || status > 999 {
		panic("loop: invalid status code " + strconv.Itoa(status))
	}
	c.wrote, c.status = true, status
	cs := c.conn
	if contentType != "" && !c.hasHeader("Content-Type") {
		c.addHeader("Content-Type", contentType)
	}
	closeConn := !c.req.KeepAlive || cs.closeAfter || c.srv.draining || (contentLength < 0 && !chunked && status >= 200 && status != 204 && status != 304)
	if closeConn {
		cs.closeAfter = true
	}
	if cs.closed {
		return
	}
	h := httpcodec.ResponseHead{
		Status:        status,
		Headers:       c.hdrs,
		ContentLength: contentLength,
		Chunked:       chunked,
		Close:         closeConn,
		KeepAlive10:   !closeConn && c.req.ProtoMinor == 0,
		Date:          c.srv.date.Bytes(),
	}
	var err error
	if cs.out, err = httpcodec.AppendResponseHead(cs.out, &h); err != nil {
		panic("loop: " + err.Error()) // headers are validated when set: unreachable
	}
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

// Stream starts a streamed response with status and contentType and returns its writer.
// HTTP/1.1 clients get chunked coding; HTTP/1.0 clients get a body delimited by closing
// the connection. The response ends when the handler returns.
func (c *Ctx) Stream(status int, contentType string) *Stream {
	chunked := c.req.ProtoMinor >= 1
	c.writeHead(status, contentType, -1, chunked)
	c.streaming, c.chunked = true, chunked
	return &Stream{c: c}
}

// Stream writes a response body in pieces. Loop-confined: use it only from the handler
// that created it, before the handler returns.
type Stream struct{ c *Ctx }

// Write appends p to the response. When enough output has gathered it is written to the
// socket; when the client reads slower than the handler writes, Write parks the task until
// the backlog shrinks (bounding memory per connection). It returns ErrClientGone once the
// client has disconnected.
func (w *Stream) Write(p []byte) (int, error) {
	c := w.c
	cs := c.conn
	if cs.closed {
		return 0, ErrClientGone
	}
	if len(p) == 0 || c.head {
		return len(p), nil
	}
	if c.chunked {
		cs.out = httpcodec.AppendChunk(cs.out, p)
	} else {
		cs.out = append(cs.out, p...)
	}
	if len(cs.out) >= streamFlushBytes {
		if err := w.Flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush writes the gathered output to the socket now, then parks while the client is too
// far behind. It returns ErrClientGone once the client has disconnected, or the task's
// cancellation error.
func (w *Stream) Flush() error {
	c := w.c
	cs := c.conn
	c.srv.flush(cs)
	for !cs.closed && cs.gc.OutboundBuffered() > streamHighWater {
		if err := c.parkFor(scheduler.ReasonWrite, streamPoll); err != nil {
			return err
		}
	}
	if cs.closed {
		return ErrClientGone
	}
	return nil
}

func bytesEqualString(b []byte, s string) bool { return string(b) == s }

// unsafeBytes views s as bytes for read-only use.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// unsafeString views b as a string without copying; the result must not outlive b's
// contents and must never be handed to user code that could keep it.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
