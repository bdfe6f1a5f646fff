package loop

import (
	"context"
	"errors"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/httpcodec"
)

// maxKeptOutput is the largest output buffer a connection keeps between responses; a
// larger one (after a big response) is dropped so idle connections stay small.
const maxKeptOutput = 64 << 10

// conn is the loop's state for one client connection. Loop-confined.
type conn struct {
	gc  gnet.Conn
	srv *Server
	idx int // position in Server.conns, -1 once removed

	parser httpcodec.Parser
	req    httpcodec.Request // views into gnet's buffer while a head is parsed
	body   httpcodec.BodyDecoder
	inBody bool // a head was parsed and its body is being read into pending
	// pending is the request whose body is being read; ctx is the request whose task is
	// running or parked. At most one of them is set.
	pending *Ctx
	ctx     *Ctx

	out []byte // output gathered for one write

	// deadline (loop nanotime) and what happens at it; 0 means none.
	deadline     int64
	deadlineKind deadlineKind

	stallOut   int   // unsent output at the last progress check
	stallSince int64 // loop nanotime since when the unsent output has not shrunk; 0 when none

	serving     bool // serve is on the stack for this connection
	blocked     bool // too much unsent output: parsing paused until the client reads
	dirty       bool // queued in Server.dirty
	closeAfter  bool // close once the current response is written
	closing     bool // no more writes: the connection is being closed
	closeCalled bool // gnet was asked to close it
	lingering   bool // write side shut; draining client bytes until close or deadline
	closed      bool // gnet reported the close; the gnet.Conn must not be touched again
}

type deadlineKind uint8

const (
	deadlineNone   deadlineKind = iota
	deadlineIdle                // waiting for the first byte of a request
	deadlineHeader              // a request head (or body) is arriving too slowly
	deadlineLinger              // closing: waiting for the client to go away
)

func (s *Server) newConn(gc gnet.Conn) *conn {
	cs := &conn{gc: gc, srv: s, idx: len(s.conns)}
	cs.parser.Init(s.cfg.Limits)
	s.conns = append(s.conns, cs)
	s.setIdle(cs)
	return cs
}

func (s *Server) setIdle(cs *conn) {
	if s.draining {
		cs.deadline, cs.deadlineKind = s.now()+int64(drainIdleGrace), deadlineIdle
		return
	}
	if s.cfg.IdleTimeout > 0 {
		cs.deadline, cs.deadlineKind = s.now()+int64(s.cfg.IdleTimeout), deadlineIdle
	} else {
		cs.deadline, cs.deadlineKind = 0, deadlineNone
	}
}

// connClosed records that gnet closed cs. It may run in the middle of anything the loop is
// doing (a failed write calls it), so it only records state and cancels the task.
func (s *Server) connClosed(cs *conn) {
	if cs.closed {
		return
	}
	cs.closed, cs.closing = true, true
	if cs.idx >= 0 {
		last := len(s.conns) - 1
		s.conns[cs.idx] = s.conns[last]
		s.conns[cs.idx].idx = cs.idx
		s.conns[last] = nil
		s.conns = s.conns[:last]
		cs.idx = -1
	}
	if cs.pending != nil {
		s.releaseCtx(cs.pending)
		cs.pending = nil
	}
	defer s.checkDrained()
	if c := cs.ctx; c != nil {
		if !c.counted && c.queuedAt != 0 && s.unqueue(c) {
			cs.ctx = nil // it never started: nothing else refers to it
			s.releaseCtx(c)
			return
		}
		c.Task.cancel(context.Canceled)
	}
}

// closeNow closes cs without lingering; it also ends a lingering close.
func (s *Server) closeNow(cs *conn) {
	if cs.closeCalled || cs.closed {
		return
	}
	cs.closing, cs.closeCalled = true, true
	_ = cs.gc.Close() // asynchronous: OnClose follows on the loop
}

// beginClose starts closing cs after its last response: output first, then a half-close,
// then a short linger reading client bytes so the kernel does not reset the response away.
func (s *Server) beginClose(cs *conn) {
	if cs.closing {
		return
	}
	if s.cfg.LingerTimeout < 0 {
		s.closeNow(cs)
		return
	}
	cs.closing = true
	cs.deadline, cs.deadlineKind = s.now()+int64(s.cfg.LingerTimeout), deadlineLinger
	s.tryShutdownWrite(cs)
}

// tryShutdownWrite half-closes cs once gnet has written all its output.
func (s *Server) tryShutdownWrite(cs *conn) {
	if cs.lingering || cs.closed || cs.gc.OutboundBuffered() > 0 {
		return
	}
	cs.lingering = true
	if err := unix.Shutdown(cs.gc.Fd(), unix.SHUT_WR); err != nil {
		s.closeNow(cs)
	}
}

// markDirty queues cs for the flush phase of the current pump.
func (s *Server) markDirty(cs *conn) {
	if cs.dirty || cs.serving || cs.closed {
		return
	}
	cs.dirty = true
	s.dirty = append(s.dirty, cs)
}

// flushDirty serves the next pipelined request of every connection whose task finished and
// writes every gathered output.
func (s *Server) flushDirty() {
	for i := 0; i < len(s.dirty); i++ {
		cs := s.dirty[i]
		s.dirty[i] = nil
		cs.dirty = false
		if cs.closed {
			continue
		}
		if cs.ctx == nil && !cs.closing {
			s.serve(cs)
		} else {
			s.flush(cs)
		}
	}
	s.dirty = s.dirty[:0]
}

// flush writes cs's gathered output with one write and, when the connection is to close
// after its response, starts closing it.
func (s *Server) flush(cs *conn) {
	if len(cs.out) > 0 {
		if cs.closed || (cs.closing && !cs.closeAfter) {
			cs.out = cs.out[:0]
		} else {
			_, _ = cs.gc.Write(cs.out) // gnet copies what the socket does not take
			s.lastAt = 0               // a write syscall since: the next task start reads the clock
			if cap(cs.out) > maxKeptOutput {
				cs.out = nil
			} else {
				cs.out = cs.out[:0]
			}
		}
	}
	if cs.closeAfter && cs.ctx == nil && cs.pending == nil && !cs.closed {
		s.beginClose(cs)
	}
}

// serve parses and dispatches the buffered requests of cs, in order, until one parks, the
// input runs out or the connection is to close; then it writes the gathered output.
func (s *Server) serve(cs *conn) {
	cs.serving = true
	for !cs.closed && !cs.closing && !cs.closeAfter && cs.ctx == nil && !s.stopping {
		if cs.gc.OutboundBuffered()+len(cs.out) >= s.cfg.MaxOutputBytes {
			cs.blocked = true // the sweep resumes it once the client has read
			break
		}
		buf, _ := cs.gc.Peek(-1)
		if len(buf) == 0 {
			if cs.deadlineKind != deadlineIdle {
				s.setIdle(cs)
			}
			break
		}
		if !cs.inBody {
			if cs.deadlineKind != deadlineHeader && s.cfg.ReadHeaderTimeout > 0 {
				cs.deadline, cs.deadlineKind = s.now()+int64(s.cfg.ReadHeaderTimeout), deadlineHeader
			}
			n, err := cs.parser.ParseHead(buf, &cs.req)
			if err != nil {
				if errors.Is(err, httpcodec.ErrNeedMore) {
					break
				}
				s.rejectRequest(cs, err)
				break
			}
			c := s.acquireCtx(cs)
			c.arena = cs.req.CopyTo(&c.req, c.arena[:0])
			_, _ = cs.gc.Discard(n)
			if !c.req.Chunked && c.req.ContentLength <= 0 {
				s.dispatch(cs, c) // runs the handler's first slice at once
				continue
			}
			cs.inBody, cs.pending = true, c
			cs.body.Init(&c.req, s.cfg.Limits)
			if s.cfg.ReadHeaderTimeout > 0 {
				cs.deadline = s.now() + int64(s.cfg.ReadHeaderTimeout)
			}
			if c.req.Expect100 && !s.draining && len(buf) == n {
				cs.out = httpcodec.AppendContinue(cs.out)
				s.flush(cs)
			}
			continue
		}
		c := cs.pending
		consumed, out, done, err := cs.body.Decode(buf, c.body)
		c.body = out
		_, _ = cs.gc.Discard(consumed)
		if consumed > 0 && s.cfg.ReadHeaderTimeout > 0 {
			// A body may take long; it must only keep moving.
			cs.deadline = s.now() + int64(s.cfg.ReadHeaderTimeout)
		}
		if err != nil {
			cs.inBody, cs.pending = false, nil
			s.releaseCtx(c)
			s.rejectRequest(cs, err)
			break
		}
		if !done {
			break
		}
		cs.inBody, cs.pending = false, nil
		s.dispatch(cs, c)
	}
	cs.serving = false
	s.flush(cs)
}

// rejectRequest answers a request that could not be parsed and closes the connection
// afterwards: after a framing error the rest of the input cannot be trusted.
func (s *Server) rejectRequest(cs *conn, err error) {
	status := 400
	var perr *httpcodec.Error
	if errors.As(err, &perr) {
		status = perr.Status
	}
	_, _ = cs.gc.Discard(-1)
	cs.closeAfter = true
	body := httpcodec.StatusText(status)
	h := httpcodec.ResponseHead{
		Status:        status,
		Headers:       plainTextHeader,
		ContentLength: int64(len(body) + 1),
		Close:         true,
		Date:          s.date.Bytes(),
	}
	cs.out, _ = httpcodec.AppendResponseHead(cs.out, &h)
	cs.out = append(cs.out, body...)
	cs.out = append(cs.out, '\n')
}

var plainTextHeader = []httpcodec.Header{{Name: []byte("Content-Type"), Value: []byte("text/plain; charset=utf-8")}}

// writeStalled tracks progress of cs's unsent output and reports whether it has made none
// for WriteStallTimeout.
func (s *Server) writeStalled(cs *conn, now int64) bool {
	if s.cfg.WriteStallTimeout < 0 || cs.closed {
		return false
	}
	out := cs.gc.OutboundBuffered()
	switch {
	case out == 0:
		cs.stallSince = 0
	case cs.stallSince == 0 || out < cs.stallOut:
		cs.stallSince, cs.stallOut = now, out
	case now-cs.stallSince > int64(s.cfg.WriteStallTimeout):
		return true
	default:
		cs.stallOut = out
	}
	return false
}

// sweep enforces connection deadlines. It runs every sweepEvery on the loop.
func (s *Server) sweep(now int64) {
	for i := 0; i < len(s.conns); i++ {
		cs := s.conns[i]
		if cs.deadlineKind == deadlineLinger {
			s.tryShutdownWrite(cs)
		}
		if s.writeStalled(cs, now) {
			s.log.Debug("loop: client stopped reading; dropping it", "remote", cs.gc.RemoteAddr())
			s.closeNow(cs)
			continue
		}
		if cs.blocked && !cs.closing && cs.gc.OutboundBuffered() < s.cfg.MaxOutputBytes/2 {
			cs.blocked = false
			s.markDirty(cs)
		}
		if cs.deadline == 0 || now < cs.deadline || cs.closed {
			continue
		}
		kind := cs.deadlineKind
		cs.deadline, cs.deadlineKind = 0, deadlineNone // the cases below may set a new one
		switch kind {
		case deadlineIdle:
			if cs.ctx == nil && cs.pending == nil && !cs.closing {
				s.beginClose(cs) // graceful: a request racing the close is not reset
			}
		case deadlineHeader:
			if cs.ctx == nil && !cs.closing {
				if cs.pending != nil {
					s.releaseCtx(cs.pending)
					cs.pending, cs.inBody = nil, false
				}
				s.log.Debug("loop: request head timeout", "remote", cs.gc.RemoteAddr())
				s.rejectRequest(cs, &httpcodec.Error{Status: 408, Reason: "request head timeout"})
				s.flush(cs)
			}
		case deadlineLinger:
			s.closeNow(cs)
		}
	}
}
