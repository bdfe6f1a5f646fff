package loop

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/internal/scheduler"
)

// This file is the engine's streamed request bodies (routes registered with StreamBody).
// Such a request is admitted as soon as its head is parsed and routed; the loop then
// decodes body bytes as they arrive into a bounded pipe that Ctx.BodyReader reads: on the
// loop the reading task parks until bytes arrive, on any other goroutine (a multi-thread
// handler, a goroutine the handler handed the reader to, as loop/nethttp does) Read
// blocks that goroutine. While the pipe is full the loop leaves the connection's input in
// gnet's buffer; a Read wakes the loop (a posted function) once it has made room. Other
// routes keep the buffered body (Ctx.Body).

// bodyPipeBytes bounds the decoded body bytes held for one streamed request: the handler
// reads at most this far behind the loop.
const bodyPipeBytes = 64 << 10

// errBodyClientGone is what a streamed body's Read returns once the client has gone or the
// request ended before the body was read.
var errBodyClientGone = errors.New("loop: client disconnected before the request body was read")

// errBodyCut is what a streamed body's Read returns once the client got more than
// Config.MaxBufferedInput ahead of the handler.
var errBodyCut = errors.New("loop: request body cut: the client sent more than Config.MaxBufferedInput ahead of the handler")

// StreamBody makes a route's handler start as soon as the request head is routed, before
// its body has arrived, and read the body as it arrives: Ctx.Body is then empty and
// Ctx.BodyReader returns the streamed body, an io.ReadCloser for one reader at a time: the
// handler's own task, or a goroutine off the loop the handler hands it to (never another
// task of the loop: a Read on the loop parks the request's task).
//
// Read waits until bytes arrive: on the loop (a single-thread handler) it parks the task,
// elsewhere it blocks its goroutine. It returns io.EOF after the last byte,
// *http.MaxBytesError past Config.Limits.MaxBodyBytes (decided as soon as a Content-Length
// says so, before any byte is read), and an error once the client disconnected, the body's
// framing was broken or the client got more than Config.MaxBufferedInput ahead of the
// reader (then the connection closes after the response). A Read with an empty buffer
// never waits: it returns (0, nil) while the body is going well, and the error the body
// ended with once its bytes are read (and *http.MaxBytesError at once): a handler that
// did not read the body asks it why. "Expect: 100-continue" is answered at the first
// Read with a non-empty buffer, unless the response head went out first. Close makes
// later Reads fail; the rest of the body is dropped and the connection closes after the
// response. The loop holds at most 64 KiB of decoded body per request plus
// Config.MaxBufferedInput of input. A body the handler leaves unread when it returns is
// dropped and its connection closed.
//
// loop/nethttp mounts net/http handlers with it (their Request.Body); a native handler
// that consumes an upload as it arrives uses it too. Any goroutine.
func StreamBody() RouteOption {
	return RouteOption{apply: func(r *route) { r.streamBody = true }}
}

// bodyPipe carries one request's body from the loop (writer) to the reader: the handler's
// task or a goroutine it handed the body to. Fields under mu are shared; the rest are
// loop-owned.
type bodyPipe struct {
	srv   *Server
	task  *Task         // the request's task: a Read on the loop parks it
	ready chan struct{} // wakes a reader blocked off the loop (capacity 1)

	mu         sync.Mutex
	buf        []byte // decoded bytes not yet read: buf[off:]
	off        int
	err        error  // io.EOF after the last byte, or why the body ended early
	loopWaits  bool   // the loop stopped feeding: the pipe was full
	wantCont   bool   // the client waits for 100 Continue; sent at the first Read
	tooLarge   bool   // the body went past Config.Limits.MaxBodyBytes
	readerDone bool   // Close was called
	maxHeld    int    // the most bytes held for the request (gnet's input and the pipe), for tests
	resume     func() // wakes the task parked in Read on the loop; nil when none is

	// Loop side.
	cs      *conn
	scratch []byte
	limit   int64
}

// newBodyPipe makes the pipe of c's streamed body on cs. Loop-confined.
func newBodyPipe(s *Server, cs *conn, c *Ctx) *bodyPipe {
	return &bodyPipe{srv: s, cs: cs, task: &c.Task, ready: make(chan struct{}, 1), wantCont: c.req.Expect100,
		buf: make([]byte, 0, bodyPipeBytes), limit: s.cfg.Limits.MaxBodyBytes}
}

// wake wakes the reader, parked on the loop or blocked elsewhere. Any goroutine, p.mu not
// held.
func (p *bodyPipe) wake() {
	p.mu.Lock()
	resume := p.resume
	p.resume = nil
	p.mu.Unlock()
	if resume != nil {
		resume()
	}
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// Read reads decoded body bytes, waiting until some arrive (see StreamBody). By one
// goroutine at a time: the handler's task, or a goroutine it handed the body to.
func (p *bodyPipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	if len(b) == 0 { // never waits: how a handler that did not read asks how the body ended
		err := p.err
		if p.off < len(p.buf) && !p.tooLarge {
			err = nil // bytes still to read come first
		}
		p.mu.Unlock()
		return 0, err
	}
	if p.wantCont {
		p.wantCont = false
		if p.err == nil { // no 100 Continue for a body already refused (too large)
			p.srv.postStream(p, (*Server).sendContinue)
		}
	}
	for p.off == len(p.buf) && p.err == nil {
		if p.srv.sched.OnLoop() {
			// The task on the loop: blocking would stop the loop that feeds the pipe.
			// OnLoop costs a stack read, only here, where the reader waits anyway.
			resume, park := p.task.ops.suspend(p.task, scheduler.ReasonOther)
			p.resume = resume
			p.mu.Unlock()
			err := park()
			p.mu.Lock()
			p.resume = nil
			if err != nil {
				p.mu.Unlock()
				return 0, err
			}
			continue
		}
		p.mu.Unlock()
		<-p.ready
		p.mu.Lock()
	}
	if p.off == len(p.buf) {
		err := p.err
		p.mu.Unlock()
		return 0, err
	}
	n := copy(b, p.buf[p.off:])
	p.off += n
	if p.off == len(p.buf) {
		p.buf, p.off = p.buf[:0], 0
	}
	resume := p.loopWaits && len(p.buf)-p.off <= bodyPipeBytes/2
	if resume {
		p.loopWaits = false
	}
	p.mu.Unlock()
	if resume {
		p.srv.postStream(p, (*Server).feedStream)
	}
	return n, nil
}

// Close makes later Reads fail; the loop drops the rest of the body and closes the
// connection after the response. By the reader.
func (p *bodyPipe) Close() error {
	p.mu.Lock()
	p.readerDone = true
	if p.err == nil {
		p.err = http.ErrBodyReadAfterClose
	}
	p.mu.Unlock()
	p.wake()
	return nil
}

// fail ends the body with err unless it already ended. Any goroutine.
func (p *bodyPipe) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.wake()
}

// postStream runs fn on the loop for p's connection if p is still its streamed body.
func (s *Server) postStream(p *bodyPipe, fn func(*Server, *conn)) {
	_ = s.post(func() {
		cs := p.cs
		if cs.stream != p || cs.state == connClosed {
			return
		}
		fn(s, cs)
		s.flush(cs)
	})
}

// sendContinue answers "Expect: 100-continue" when the handler first reads the body, as
// net/http does; nothing is sent once the handler's response head went out. Loop-confined.
func (s *Server) sendContinue(cs *conn) {
	if c := cs.ctx; c != nil && c.headState() == headNone && cs.writable() {
		cs.out = httpcodec.AppendContinue(cs.out)
	}
}

// startStream admits c (routed, with a body) at once and makes cs feed its body to the
// handler through a pipe. Loop-confined.
func (s *Server) startStream(cs *conn, c *Ctx) {
	cs.body.Init(&c.req, s.cfg.Limits)
	p := newBodyPipe(s, cs, c)
	c.stream, cs.stream = p, p
	if s.admitNow(cs, c) {
		s.start(c, true) // its first slice may end the request: finishRequest ends the stream
	} else if cs.ctx != c { // refused (429): the body will not be read
		s.endStream(cs, true)
		return
	}
	s.feedStream(cs)
}

// feedStream decodes the buffered body bytes of cs's streamed request into its pipe until
// the input runs out, the pipe is full or the body ends. Loop-confined.
func (s *Server) feedStream(cs *conn) {
	p := cs.stream
	for p != nil {
		buf, _ := cs.gc.Peek(-1)
		p.mu.Lock()
		if held := len(buf) + len(p.buf) - p.off; held > p.maxHeld {
			p.maxHeld = held
		}
		if p.readerDone {
			p.mu.Unlock()
			s.endStream(cs, true)
			return
		}
		room := cap(p.buf) - (len(p.buf) - p.off)
		if room == 0 {
			p.loopWaits = true
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		in := buf // empty: Decode still reports a Content-Length over the limit
		if len(in) > room {
			in = in[:room] // decoded bytes never outnumber the input bytes
		}
		consumed, out, done, err := cs.body.Decode(in, p.scratch[:0])
		p.scratch = out[:0]
		discard(cs.gc, consumed)
		p.mu.Lock()
		if len(out) > 0 {
			if len(p.buf)+len(out) > cap(p.buf) {
				n := copy(p.buf, p.buf[p.off:])
				p.buf, p.off = p.buf[:n], 0
			}
			p.buf = append(p.buf, out...)
		}
		switch {
		case err != nil:
			var perr *httpcodec.Error
			if errors.As(err, &perr) && perr.Status == 413 {
				p.tooLarge = true
				p.err = &http.MaxBytesError{Limit: p.limit}
			} else {
				p.err = err
			}
		case done:
			p.err = io.EOF
		case consumed == 0 && len(in) < len(buf):
			p.loopWaits = true // a chunk header did not fit the room left: wait for the reader
		}
		p.mu.Unlock()
		p.wake()
		switch {
		case err != nil:
			s.endStream(cs, true)
			return
		case done:
			cs.stream = nil
			return
		case consumed == 0:
			return
		}
	}
}

// endStream stops feeding cs's streamed body; with untrusted, the rest of the input is
// dropped and the connection closes after the response. Loop-confined.
func (s *Server) endStream(cs *conn, untrusted bool) {
	if cs.stream == nil {
		return
	}
	cs.stream.fail(errBodyClientGone)
	cs.stream = nil
	if untrusted {
		cs.closeAfterResponse()
		_, _ = cs.gc.Discard(-1)
	}
}

// streamTraffic feeds newly read body bytes of cs's streamed request. Past
// Config.MaxBufferedInput of input held while the handler is behind (gnet v2.10 cannot
// pause reading a connection), the body is cut: the handler's Read fails and the
// connection closes after the response. Loop-confined.
func (s *Server) streamTraffic(cs *conn) {
	s.feedStream(cs)
	p := cs.stream
	if p == nil {
		return
	}
	p.mu.Lock()
	if held := cs.gc.InboundBuffered() + len(p.buf) - p.off; held > p.maxHeld {
		p.maxHeld = held
	}
	p.mu.Unlock()
	if s.inputBound(cs) {
		s.log.Debug("loop: client sends the body faster than the handler reads it; cutting it", "remote", cs.gc.RemoteAddr())
		p.fail(errBodyCut)
		s.endStream(cs, true)
	}
}
