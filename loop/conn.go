package loop

import (
	"context"
	"errors"
	"net"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/internal/httpcodec"
)

// maxKeptOutput is the largest output buffer a connection keeps between responses; a
// larger one (after a big response) is dropped so idle connections stay small.
const maxKeptOutput = 64 << 10

// connState is where a client connection is in its life. It only moves forward:
//
//	open ──response says close──▶ closeAfter ──output written──▶ closing ──write side shut──▶ lingering
//	  │                               │                             │                            │
//	  └───────────────────────────────┴──────── abort (stall, stop, deadline) ──▶ aborting ◀─────┘
//	                                                                                │
//	every state ──gnet reports the close (OnClose; the client may close first)──▶ closed
type connState uint8

const (
	// connOpen: requests are parsed and answered.
	connOpen connState = iota
	// connCloseAfter: the current response is the last; once it is written the connection
	// closes gracefully. No further request is parsed.
	connCloseAfter
	// connClosing: the last response is being written; the write side is shut once gnet
	// has sent it. Later output is dropped.
	connClosing
	// connLingering: the write side is shut (FIN sent); client bytes are read and dropped
	// until the client closes or LingerTimeout passes, so that unread bytes do not make
	// the kernel reset the connection and destroy the last response in flight.
	connLingering
	// connAborting: gnet was asked to close the connection now; OnClose follows.
	connAborting
	// connClosed: gnet reported the close. The gnet.Conn must not be touched again (its
	// file descriptor may already serve another client).
	connClosed
)

var connStateNames = [...]string{"open", "close-after", "closing", "lingering", "aborting", "closed"}

// String returns the state's name, e.g. "lingering".
func (st connState) String() string {
	if int(st) < len(connStateNames) {
		return connStateNames[st]
	}
	return "connState(?)"
}

// deadlineKind says what happens when a connection's deadline passes.
type deadlineKind uint8

const (
	deadlineNone   deadlineKind = iota
	deadlineIdle                // waiting for the first byte of a request: close gracefully
	deadlineHeader              // a request head (or body) is arriving too slowly: 408
	deadlineLinger              // lingering: close now
)

// conn is the loop's state for one client connection. Loop-confined.
type conn struct {
	// The fields every write of a taken-over connection reads (RawConn.Queued and Write,
	// flush) come first, in one or two cache lines: a broadcast writes to thousands of
	// connections a tick, each cold in the cache, and every line more is a miss more per
	// message (docs/bench.md, "Session 13's final build, twelve rounds").
	gc    gnet.Conn
	srv   *Server
	idx   int // position in connTable.all, -1 once removed
	state connState
	out   []byte   // output gathered for one write
	raw   *RawConn // set once a handler took the connection over (takeover.go)
	dirty bool     // queued in connTable.dirty
	// backlog says gnet may hold output of ours the socket has not taken yet: set by a
	// flush whose write left some in gnet's buffer, cleared when unsent finds none. Only
	// flush's write fills that buffer, so while backlog is false the buffer is empty and
	// unsent need not touch gnet's connection, another cold line per message.
	backlog bool

	parser httpcodec.Parser
	req    httpcodec.Request // views into gnet's buffer while a head is parsed
	body   httpcodec.BodyDecoder
	// pending is the request whose body is being read; ctx is the request whose handler is
	// running, parked or queued for admission. At most one of them is set.
	pending *Ctx
	ctx     *Ctx
	// stream is the body pipe of ctx while the loop feeds it (StreamBody routes;
	// bodystream.go); nil otherwise.
	stream *bodyPipe

	remote net.Addr // gc.RemoteAddr(), read once: each request's Ctx takes it

	// deadline (loop clock) and what happens at it; 0 means none.
	deadline     int64
	deadlineKind deadlineKind

	arrival, readAt int64 // the latest read's arrival bound and loop clock (arrival.go)

	stallOut   int   // unsent output at the last progress check
	stallSince int64 // loop clock since when the unsent output has not shrunk; 0 when none

	serving     bool // serve is on the stack for this connection
	direct      bool // serve runs in this connection's OnTraffic on gnet's read buffer alone (headinbuf.go)
	carried     bool // gnet's ring buffer may hold input left when OnTraffic last returned (headinbuf.go)
	blocked     bool // too much unsent output: parsing paused until the client reads
	discarding  bool // body holds the framing of a refused request's body, read and dropped (discardBody)
	beforeDrain bool // open when the drain began: the drain waits for it
	sndbufSet   bool // the socket's send buffer is bounded for streaming (streamshare.go)
	heard       bool // the client has sent something (noteRead): a drain answers a silent one (answerUnheard)

	// The bytes a stream's task has written in its current slice (streamshare.go): the
	// task's id and slice number, and the count.
	sliceTask, sliceRound uint64
	sliceOut              int
}

// writable reports whether output may still be written to the connection.
func (cs *conn) writable() bool { return cs.state <= connCloseAfter }

// accepting reports whether the connection may parse another request.
func (cs *conn) accepting() bool { return cs.state == connOpen }

// busy reports whether a request of the connection is being read or handled.
func (cs *conn) busy() bool { return cs.ctx != nil || cs.pending != nil }

// closeAfterResponse makes the current response the connection's last.
func (cs *conn) closeAfterResponse() {
	if cs.state == connOpen {
		cs.state = connCloseAfter
	}
}

// connTable is the loop's registry of open client connections and of the ones with work
// for the flush phase. Loop-confined.
type connTable struct {
	all         []*conn // open connections, each knowing its index
	dirty       []*conn // connections with output to write or requests to parse
	beforeDrain int     // of all, the ones open when the drain began
}

func (t *connTable) add(cs *conn) {
	cs.idx = len(t.all)
	t.all = append(t.all, cs)
}

func (t *connTable) remove(cs *conn) {
	if cs.idx < 0 {
		return
	}
	last := len(t.all) - 1
	t.all[cs.idx] = t.all[last]
	t.all[cs.idx].idx = cs.idx
	t.all[last] = nil
	t.all = t.all[:last]
	cs.idx = -1
	if cs.beforeDrain {
		cs.beforeDrain = false
		t.beforeDrain--
	}
}

func (s *Server) newConn(gc gnet.Conn) *conn {
	cs := &conn{gc: gc, remote: gc.RemoteAddr(), srv: s}
	cs.parser.Init(s.cfg.Limits)
	s.noteOpen(cs)
	s.conns.add(cs)
	s.setIdle(cs)
	return cs
}

// setIdle arms the idle deadline of a connection waiting for its next request; during a
// drain the connection gets only a short grace instead.
func (s *Server) setIdle(cs *conn) {
	switch {
	case s.life.draining():
		cs.deadline, cs.deadlineKind = s.now()+int64(drainIdleGrace), deadlineIdle
	case s.cfg.IdleTimeout > 0:
		cs.deadline, cs.deadlineKind = s.now()+int64(s.cfg.IdleTimeout), deadlineIdle
	default:
		cs.deadline, cs.deadlineKind = 0, deadlineNone
	}
}

// connClosed records that gnet closed cs. It may run in the middle of anything the loop is
// doing (a failed write calls it), so it only records state and cancels the task.
func (s *Server) connClosed(cs *conn) {
	if cs.state == connClosed {
		return
	}
	cs.state = connClosed
	s.conns.remove(cs)
	s.drains.closed(cs)
	if cs.raw != nil {
		s.rawClosed(cs.raw)
	}
	if cs.pending != nil {
		s.releaseCtx(cs.pending)
		cs.pending = nil
	}
	if cs.stream != nil {
		cs.stream.fail(errBodyClientGone)
		cs.stream = nil
	}
	defer s.checkDrained()
	if c := cs.ctx; c != nil {
		if !c.counted && c.queuedAt != 0 && s.adm.remove(c) {
			cs.ctx = nil // it never started: nothing else refers to it
			s.releaseCtx(c)
			return
		}
		c.Task.cancel(context.Canceled)
	}
}

// closeNow closes cs without lingering; it also ends a lingering close.
func (s *Server) closeNow(cs *conn) {
	if cs.state >= connAborting {
		return
	}
	cs.state = connAborting
	_ = cs.gc.Close() // asynchronous: OnClose follows on the loop
}

// beginClose starts closing cs after its last response: output first, then a half-close,
// then a short linger reading client bytes so the kernel does not reset the response away.
func (s *Server) beginClose(cs *conn) {
	if cs.state >= connClosing {
		return
	}
	if s.cfg.LingerTimeout < 0 {
		s.closeNow(cs)
		return
	}
	cs.state = connClosing
	cs.deadline, cs.deadlineKind = s.now()+int64(s.cfg.LingerTimeout), deadlineLinger
	if cs.raw != nil {
		cs.raw.boundLinger()
	}
	s.tryShutdownWrite(cs)
}

// tryShutdownWrite half-closes a closing cs once gnet has written all its output.
func (s *Server) tryShutdownWrite(cs *conn) {
	if cs.state != connClosing || cs.unsent() > 0 {
		return
	}
	cs.state = connLingering
	if err := unix.Shutdown(cs.gc.Fd(), unix.SHUT_WR); err != nil {
		s.closeNow(cs)
	}
}

// markDirty queues cs for the flush phase of the current pump.
func (s *Server) markDirty(cs *conn) {
	if cs.dirty || cs.serving || cs.state == connClosed {
		return
	}
	cs.dirty = true
	s.conns.dirty = append(s.conns.dirty, cs)
}

// flushDirty serves the next pipelined request of every connection whose task finished and
// writes every gathered output.
func (s *Server) flushDirty() {
	for i := 0; i < len(s.conns.dirty); i++ {
		cs := s.conns.dirty[i]
		s.conns.dirty[i] = nil
		cs.dirty = false
		switch {
		case cs.state == connClosed:
		case cs.ctx == nil && cs.accepting() && cs.raw == nil:
			s.serve(cs)
		default:
			s.flush(cs)
		}
	}
	s.conns.dirty = s.conns.dirty[:0]
}

// flush writes cs's gathered output with one write and, when the connection is to close
// after its response, starts closing it.
func (s *Server) flush(cs *conn) {
	if len(cs.out) > 0 {
		if !cs.writable() {
			cs.out = cs.out[:0]
		} else {
			_, _ = cs.gc.Write(cs.out) // gnet copies what the socket does not take
			s.lastAt = 0               // a write syscall since: the next task start reads the clock
			// Read while gnet's buffer is in cache from the write; a failed write closed cs.
			cs.backlog = cs.state != connClosed && cs.gc.OutboundBuffered() > 0
			if cap(cs.out) > maxKeptOutput {
				cs.out = nil
			} else {
				cs.out = cs.out[:0]
			}
		}
	}
	if cs.state == connCloseAfter && !cs.busy() {
		s.beginClose(cs)
	}
}

// unsent returns the output gnet holds for cs that the socket has not taken yet (gnet's
// OutboundBuffered), asking gnet only while cs.backlog says there may be some. Not for a
// closed connection, whose gnet.Conn must not be touched. Loop-confined.
func (cs *conn) unsent() int {
	if !cs.backlog {
		return 0
	}
	n := cs.gc.OutboundBuffered()
	cs.backlog = n > 0
	return n
}

// discard drops the first n bytes of a connection's input. gnet's Discard drops all of it
// when n <= 0, so a parser that consumed nothing (an incomplete frame, chunk or head is
// buffered) must not call it: those bytes would go, and the stream behind them be misread.
// Loop-confined.
func discard(gc gnet.Conn, n int) {
	if n > 0 {
		_, _ = gc.Discard(n)
	}
}

// inputBound reports whether cs holds more unparsed input than Config.MaxBufferedInput
// allows while it cannot parse it (a request is in flight, or its output is backed up).
// Such a client is answered up to its current request and closed: gnet would otherwise
// keep appending its bytes to the connection's buffer without bound.
func (s *Server) inputBound(cs *conn) bool {
	return cs.gc.InboundBuffered() > s.cfg.MaxBufferedInput
}

// serve parses and dispatches the buffered requests of cs, in order, until one parks, the
// input runs out or the connection is to close; then it writes the gathered output.
func (s *Server) serve(cs *conn) {
	cs.serving = true
	for {
		c, more := s.serveStep(cs)
		if c != nil {
			s.dispatch(cs, c) // runs the handler's first slice at once
			continue
		}
		if !more {
			break
		}
	}
	cs.serving = false
	if c := cs.ctx; c != nil && c.headInBuf {
		// Parked, yielded or queued in its first slice (serveStep does not parse past a
		// request in flight): it outlives the read buffer its head points into.
		s.keepHead(c)
	}
	s.flush(cs)
}

// serveStep is one step of serve: it parses the next buffered request head of cs (or body
// bytes of its pending request) and handles what it can without running a handler. It
// returns a parsed request without a body, for the caller to dispatch (serve, or a
// finished task serving the next request on its coroutine: chainNext), or nil with more
// reporting whether serve should step again. Loop-confined.
func (s *Server) serveStep(cs *conn) (next *Ctx, more bool) {
	if !cs.accepting() || cs.ctx != nil || cs.raw != nil || s.life.load() >= stateStopping {
		return nil, false // a taken connection's input is its protocol's (takeover.go)
	}
	if cs.unsent()+len(cs.out) >= s.cfg.MaxOutputBytes {
		cs.blocked = true // the sweep resumes it once the client has read
		return nil, false
	}
	buf, _ := cs.gc.Peek(-1)
	if cs.discarding {
		return s.discardBody(cs, buf)
	}
	if len(buf) == 0 {
		if cs.deadlineKind != deadlineIdle {
			s.setIdle(cs)
		}
		return nil, false
	}
	if cs.pending == nil {
		if cs.deadlineKind != deadlineHeader && s.cfg.ReadHeaderTimeout > 0 {
			cs.deadline, cs.deadlineKind = s.now()+int64(s.cfg.ReadHeaderTimeout), deadlineHeader
		}
		n, err := cs.parser.ParseHead(buf, &cs.req)
		if err != nil {
			if !errors.Is(err, httpcodec.ErrNeedMore) {
				s.rejectRequest(cs, err)
			}
			return nil, false
		}
		c := s.acquireCtx(cs)
		if cs.direct && !cs.req.Chunked && cs.req.ContentLength <= 0 {
			// The head stays in gnet's read buffer: copied only if the request outlives
			// its first slice (serve, keepHead).
			h := c.req.Headers
			c.req = cs.req
			cs.req.Headers = h[:0]
			c.headInBuf = true
			discard(cs.gc, n)
			return c, true
		}
		c.arena = cs.req.CopyTo(&c.req, c.arena[:0])
		discard(cs.gc, n)
		if !c.req.Chunked && c.req.ContentLength <= 0 {
			return c, true
		}
		return s.serveWithBody(cs, c, buf, n)
	}
	return s.serveBody(cs, buf)
}

// serveWithBody is serveStep for a parsed head c with a body (n bytes of buf were the
// head): it routes c before the body is read, then reads the body, streams it or drops it.
// Out of line: serveStep stays the short path of a request without a body.
//
//go:noinline
func (s *Server) serveWithBody(cs *conn, c *Ctx, buf []byte, n int) (next *Ctx, more bool) {
	// Route before reading the body: a request that will be refused (404, 405,
	// draining) must not be told to send its body first (Expect: 100-continue).
	framing := httpcodec.Request{Chunked: c.req.Chunked, ContentLength: c.req.ContentLength}
	expect := c.req.Expect100
	if !s.routeRequest(cs, c) { // answered at once, and c released
		if cs.accepting() && !expect && framing.ContentLength <= unroutedBodyMax {
			// The body is read and dropped, as net/http does, so that the requests
			// pipelined behind it are answered.
			lim := s.cfg.Limits
			if lim.MaxBodyBytes <= 0 || lim.MaxBodyBytes > unroutedBodyMax {
				lim.MaxBodyBytes = unroutedBodyMax
			}
			cs.body.Init(&framing, lim)
			cs.discarding = true
			if s.cfg.ReadHeaderTimeout > 0 {
				cs.deadline, cs.deadlineKind = s.now()+int64(s.cfg.ReadHeaderTimeout), deadlineHeader
			}
			return nil, true
		}
		// Too large to read for nothing, or a client waiting for 100 Continue that may
		// or may not send it: the rest of the input cannot be trusted.
		cs.closeAfterResponse()
		_, _ = cs.gc.Discard(-1)
		return nil, false
	}
	if c.route.streamBody { // StreamBody: the handler reads the body as it arrives
		s.startStream(cs, c)
		return nil, false
	}
	cs.pending = c
	cs.body.Init(&c.req, s.cfg.Limits)
	if s.cfg.ReadHeaderTimeout > 0 {
		cs.deadline = s.now() + int64(s.cfg.ReadHeaderTimeout)
	}
	if c.req.Expect100 && len(buf) == n {
		cs.out = httpcodec.AppendContinue(cs.out)
		s.flush(cs)
	}
	return nil, true
}

// serveBody is serveStep for the body bytes of cs's pending request, in buf. Out of line:
// serveStep stays the short path of a request without a body.
//
//go:noinline
func (s *Server) serveBody(cs *conn, buf []byte) (next *Ctx, more bool) {
	c := cs.pending
	consumed, out, done, err := cs.body.Decode(buf, c.body)
	c.body = out
	discard(cs.gc, consumed)
	if consumed > 0 && s.cfg.ReadHeaderTimeout > 0 {
		// A body may take long; it must only keep moving.
		cs.deadline = s.now() + int64(s.cfg.ReadHeaderTimeout)
	}
	if err != nil {
		cs.pending = nil
		s.releaseCtx(c)
		s.rejectRequest(cs, err)
		return nil, false
	}
	if !done {
		return nil, false
	}
	cs.pending = nil
	s.admit(cs, c)
	return nil, true
}

// unroutedBodyMax bounds the body of a refused request (404, 405) that is read and dropped
// to keep the connection: net/http's bound (maxPostHandlerReadBytes). A larger one closes it.
const unroutedBodyMax = 256 << 10

// discardBody is serveStep reading the body of a request refused before its body was read
// (cs.discarding): buf is the input. It drops what belongs to the body and reports whether
// serve should step on (the body is over: the next request follows). A body that turns out
// malformed or larger than unroutedBodyMax closes the connection: its refusal was sent, and
// what follows cannot be trusted. Loop-confined.
func (s *Server) discardBody(cs *conn, buf []byte) (next *Ctx, more bool) {
	var scratch [2048]byte // decoded bytes land here, piece by piece: never more than the piece
	used := 0
	for used < len(buf) {
		piece := buf[used:min(len(buf), used+len(scratch))]
		n, _, done, err := cs.body.Decode(piece, scratch[:0])
		used += n
		if err != nil {
			cs.discarding = false
			_, _ = cs.gc.Discard(-1)
			cs.closeAfterResponse()
			return nil, false
		}
		if done {
			cs.discarding = false
			discard(cs.gc, used)
			cs.deadline, cs.deadlineKind = 0, deadlineNone
			return nil, true
		}
	}
	discard(cs.gc, used)
	if used > 0 && s.cfg.ReadHeaderTimeout > 0 {
		cs.deadline = s.now() + int64(s.cfg.ReadHeaderTimeout) // it must only keep moving
	}
	return nil, false
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
	cs.closeAfterResponse()
	cs.out = appendPlainResponse(cs.out, status, httpcodec.StatusText(status)+"\n", true, false, s.date.Bytes())
}

var plainTextHeader = []httpcodec.Header{{Name: []byte("Content-Type"), Value: []byte("text/plain; charset=utf-8")}}

// appendPlainResponse appends a complete text/plain response written by the server itself.
func appendPlainResponse(dst []byte, status int, body string, closeConn, keepAlive10 bool, date []byte) []byte {
	h := httpcodec.ResponseHead{
		Status:        status,
		Headers:       plainTextHeader,
		ContentLength: int64(len(body)),
		Close:         closeConn,
		KeepAlive10:   keepAlive10,
		Date:          date,
	}
	dst, _ = httpcodec.AppendResponseHead(dst, &h)
	return append(dst, body...)
}

// writeStalled tracks progress of cs's unsent output and reports whether it has made none
// for WriteStallTimeout.
func (s *Server) writeStalled(cs *conn, now int64) bool {
	if s.cfg.WriteStallTimeout < 0 || cs.state == connClosed {
		return false
	}
	out := cs.unsent()
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
	for i := 0; i < len(s.conns.all); i++ {
		cs := s.conns.all[i]
		if cs.state == connClosing {
			s.tryShutdownWrite(cs)
		}
		if cs.raw != nil && cs.state == connOpen {
			s.rawSweep(cs.raw, now) // its handler owns its timeouts (takeover.go)
			continue
		}
		if s.writeStalled(cs, now) {
			s.log.Debug("loop: client stopped reading; dropping it", "remote", cs.gc.RemoteAddr())
			s.closeNow(cs)
			continue
		}
		if cs.blocked && cs.accepting() && cs.unsent() < s.cfg.MaxOutputBytes/2 {
			cs.blocked = false
			s.markDirty(cs)
		}
		if cs.deadline == 0 || now < cs.deadline || cs.state == connClosed {
			continue
		}
		kind := cs.deadlineKind
		cs.deadline, cs.deadlineKind = 0, deadlineNone // the cases below may set a new one
		switch kind {
		case deadlineIdle:
			if !cs.busy() && cs.accepting() {
				if s.life.draining() && s.answerUnserved(cs) {
					s.flush(cs) // and closes it gracefully
					continue
				}
				s.beginClose(cs) // graceful: a request racing the close is not reset
			}
		case deadlineHeader:
			if cs.discarding { // a refused request's body stopped moving: it was answered
				cs.discarding = false
				s.beginClose(cs)
				continue
			}
			if cs.ctx == nil && cs.accepting() {
				if cs.pending != nil {
					s.releaseCtx(cs.pending)
					cs.pending = nil
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
