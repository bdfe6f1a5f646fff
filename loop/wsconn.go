package loop

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/internal/scheduler"
)

// wsState is where a WebSocket is in its life; it only moves forward.
type wsState uint8

const (
	// wsOpen: messages flow both ways.
	wsOpen wsState = iota
	// wsClosing: the server sent its close frame and waits (CloseTimeout) for the
	// client's. Data the client still sends is dropped; nothing more is sent.
	wsClosing
	// wsDone: ended; err says why. The TCP connection is closing or closed.
	wsDone
)

var wsStateNames = [...]string{"open", "closing", "done"}

// wsInputSlack is how much input beyond one whole message a connection may buffer while
// its reader has not taken the previous message (or the callback form's handler has not
// returned): a burst of small messages fits, a client that floods a busy reader is closed
// (1008) instead of growing the server's buffers.
const wsInputSlack = 64 << 10

// wsQueueHead is the size of a queued message's header in WSConn.queue: a kind byte
// (1 binary) and the payload length (4 bytes).
const wsQueueHead = 5

// maxKeptWSBuf is the largest message buffer a connection keeps between messages; a larger
// one (after a big message) is dropped so that idle connections stay small.
const maxKeptWSBuf = 16 << 10

// WSConn is one WebSocket connection, made by Ctx.Upgrade. It is loop-confined: call its
// methods from tasks on the loop (the handler's, or another such as a room's tick) or from
// functions run on the loop, never from other goroutines. It stays valid after the
// connection closed (its methods then return the reason), so a room may hold it.
type WSConn struct {
	srv    *Server
	cs     *conn
	c      *Ctx       // the handler's request while the handler runs; nil after
	h      *WSHandler // the callback form's handler (UpgradeTo); nil in the task form
	id     uint64
	route  *wsRoute
	proto  string
	remote net.Addr
	since  int64 // loop clock at the upgrade

	rd     httpcodec.WSReader
	msg    httpcodec.WSMessage
	need   int    // input needed before the frame being read can complete; 0 when unknown
	buf    []byte // the message for the reader (a copy: gnet's input buffer moves)
	held   bool   // buf holds a message the reader has not released
	taken  bool   // the reader has it (released at its next ReadMessage)
	binary bool

	// Messages parsed while they could not be delivered (the task form's reader has not
	// released the previous one; the callback form's handler has not returned), so that
	// the control frames behind them are answered whatever the handler does. Each is a
	// wsQueueHead header and the payload; queueOff is where the next one starts. partial
	// counts the frames consumed of a message not yet whole. Bounded with the input:
	// past MaxMessageBytes + wsInputSlack the client is closed (1008).
	queue    []byte
	queueOff int
	partial  int

	state      wsState
	err        error // why it ended (wsDone)
	peerClosed bool  // the client's close frame arrived
	closeAt    int64 // loop clock when the server's close frame was queued
	drainClose bool  // the server's close was the shutdown's 1001
	drainDone  bool  // counted in the drain report

	reader  scheduler.Waker   // the parked reader
	closer  scheduler.Waker   // a task parked in Close
	writers []scheduler.Waker // tasks parked on backpressure
	watched bool              // a drain watch is armed for the writers

	lastIn  int64  // loop clock of the last bytes from the client
	pingAt  int64  // loop clock of the unanswered ping, 0 when none; moved up by output progress
	pingAck uint64 // bytes the client acknowledged, at the last sweep while a ping is unanswered

	mark int64 // the reader task's on-loop time when it took the last message; -1 when none

	// pong holds the payload of the latest ping left unanswered because the output was
	// over MaxQueuedBytes (pongDue); it is answered once the client has read its output
	// down.
	pongDue bool
	pong    []byte

	laterQueued bool // in wsServer.later (callback form)
	closeCalled bool // OnClose ran (callback form)

	st wsFigures
}

// wsFigures are one connection's counters.
type wsFigures struct {
	msgsIn, bytesIn, msgsOut, bytesOut uint64
	onLoop, onLoopMax                  time.Duration
}

// Upgrade turns the request into a WebSocket connection: it checks the request
// (method, headers, version, key; then opts.CheckOrigin), picks a subprotocol from
// opts.Subprotocols and answers 101. The handler's task then continues as the
// connection's task: read messages in a loop; when the handler returns, the connection is
// closed (with 1000 unless it was closed otherwise; 1011 if the handler panicked). On
// failure Upgrade answers the request itself (400 a malformed upgrade, 403 a refused
// origin, 405 not GET, 426 a wrong version, 501 in multi-thread mode, 503 while the server
// drains) and returns an error saying why. Call it from the handler, before writing
// anything. UpgradeTo is the callback form, whose idle connections hold no task.
func (c *Ctx) Upgrade(opts UpgradeOptions) (*WSConn, error) { return c.upgrade(opts, nil) }

// upgrade is Upgrade (h nil) and UpgradeTo.
func (c *Ctx) upgrade(opts UpgradeOptions, h *WSHandler) (*WSConn, error) {
	s := c.srv
	if c.Task.g != nil || s.cfg.MultiThread {
		c.String(501, "501 Not Implemented: "+ErrWSMultiThread.Error()+"\n")
		return nil, ErrWSMultiThread
	}
	if c.headState() != headNone {
		return nil, errors.New("loop: Upgrade after the response was written")
	}
	cs := c.conn
	if s.life.draining() || c.mustClose || !cs.accepting() {
		c.String(503, "503 Service Unavailable: the server is shutting down\n")
		return nil, errors.New("loop: websocket upgrade refused: the server is shutting down")
	}
	if busy := s.wsSaturated(); busy != "" {
		// Each connection adds inputs and output to a loop that keeps up with what it has
		// no longer: refuse the newcomer, and let the players it has play on.
		s.ws.saturatedRefusals++
		if s.ws.slowLog.allow(s) {
			s.log.Warn("loop: websocket upgrade refused: the loop is saturated (503)", "route", c.pattern,
				"check", busy, "saturated_refusals_total", s.ws.saturatedRefusals)
		}
		c.addHeader("Retry-After", strconv.Itoa(wsSaturatedRetryAfter))
		c.String(503, "503 Service Unavailable: the server is saturated ("+busy+"); retry later\n")
		return nil, fmt.Errorf("loop: websocket upgrade refused (503): the loop is saturated (%s)", busy)
	}
	s.keepHead(c) // the WebSocket reader consumes the input the head may lie in
	key, err := httpcodec.CheckWSUpgrade(&c.req)
	if err != nil {
		status, reason := 400, err.Error()
		var perr *httpcodec.Error
		if errors.As(err, &perr) {
			status, reason = perr.Status, perr.Reason
		}
		switch status {
		case 426:
			c.addHeader("Sec-WebSocket-Version", "13")
		case 405:
			c.addHeader("Allow", "GET")
		}
		c.String(status, httpcodec.StatusText(status)+": "+reason+"\n")
		return nil, fmt.Errorf("loop: websocket upgrade refused (%d): %w", status, err)
	}
	origin, _ := c.req.Get("Origin")
	ok := false
	if opts.CheckOrigin != nil {
		ok = opts.CheckOrigin(c, string(origin))
	} else {
		host, _ := c.req.Get("Host")
		ok = sameOrigin(origin, host)
	}
	if !ok {
		c.String(403, "403 Forbidden: origin not allowed\n")
		return nil, fmt.Errorf("loop: websocket upgrade refused (403): origin %q not allowed", origin)
	}
	proto, err := httpcodec.WSSelectProtocol(&c.req, opts.Subprotocols)
	if err != nil {
		c.String(400, "400 Bad Request: "+err.Error()+"\n")
		return nil, fmt.Errorf("loop: websocket upgrade refused (400): %w", err)
	}
	if !c.claimHead(headHandler) {
		return nil, errors.New("loop: Upgrade after the response was written")
	}
	c.status = 101
	if c.out, err = httpcodec.AppendWSUpgradeResponse(c.out, key, proto); err != nil {
		panic("loop: " + err.Error()) // the subprotocol was checked to be a token
	}
	// The handler's task is now the connection's: no handler deadline, and no admission
	// slot (a game holds thousands of sockets open; the slots are for requests).
	if c.deadline != nil {
		c.deadline.Stop()
		c.deadline = nil
	}
	now := s.now()
	if c.counted {
		c.counted = false
		if next := s.adm.finish(now - c.acceptedAt - int64(c.queueWait)); next != nil {
			next.counted = true
			s.start(next, false)
		}
	}
	w := &WSConn{srv: s, cs: cs, c: c, h: h, proto: string(proto), remote: c.remote, since: now, lastIn: now, mark: -1}
	w.rd.Init(httpcodec.Config{MaxWSMessageBytes: s.cfg.WebSocket.MaxMessageBytes})
	s.ws.opened(w, c.pattern)
	cs.ws = w
	s.deliver(c)
	s.flush(cs)
	// An idle WebSocket keeps no buffer of the HTTP side: the parsed head (the request's
	// copy in c stays for the handler), the output buffers (made again by the first write).
	cs.req = httpcodec.Request{}
	cs.out, c.out = nil, nil
	w.pump() // frames that arrived with the request
	return w, nil
}

// wsSaturatedRetryAfter is the Retry-After, in seconds, of an upgrade refused because the
// loop is saturated: the lag check looks at the last one to two seconds, so a loop that
// caught up passes it again within two.
const wsSaturatedRetryAfter = 2

// wsSaturated names the check of the loop itself that fails now and has failed for a
// while ("loop_lag", "utilisation"; Config.WebSocket.SaturatedLag and
// SaturatedUtilisation set their limits, a negative one turns it off), or returns "" while
// the loop keeps up. The lag must have passed the limit
// in the previous second and in this one (or this one is too young to tell: its first
// three samples): one late sample (a collection, a moment without a CPU) refuses no
// player. Loop-confined.
func (s *Server) wsSaturated() string {
	h, cfg := &s.lag, &s.cfg.WebSocket
	if lim := int64(cfg.SaturatedLag); lim >= 0 && h.prevMax > lim &&
		(h.curMax > lim || s.nanotime()-h.winStart < int64(3*lagSampleEvery)) {
		return "loop_lag"
	}
	if cfg.SaturatedUtilisation >= 0 {
		if u := math.Float64frombits(h.util.Load()); !math.IsNaN(u) && u > cfg.SaturatedUtilisation {
			return "utilisation"
		}
	}
	return ""
}

// sameOrigin is the default origin policy (gorilla's): no Origin header, or one whose host
// equals the Host header, ignoring ASCII case.
func sameOrigin(origin, host []byte) bool {
	if len(origin) == 0 {
		return true
	}
	u, err := url.Parse(string(origin))
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, string(host))
}

// wsTraffic handles input of an upgraded connection: frames are parsed until a message
// waits for its reader, control frames answered at once. Loop-confined.
func (s *Server) wsTraffic(cs *conn) gnet.Action {
	w := cs.ws
	if w.state == wsDone {
		_, _ = cs.gc.Discard(-1)
		return gnet.None
	}
	w.lastIn, w.pingAt = s.now(), 0 // any traffic shows the client is alive
	_, before := s.sched.Len()
	w.pump()
	if _, ready := s.sched.Len(); ready > 0 && before == 0 {
		// Only the reader this input woke is ready: run it now, as a new request's first
		// slice runs at once, instead of a turn later through the control socket. No task
		// that was ready before gets an extra slice for this read.
		s.pump()
		return gnet.None
	}
	s.flushDirty()
	if _, ready := s.sched.Len(); ready > 0 {
		s.postPump()
	} else {
		s.pumpTimers()
	}
	return gnet.None
}

// pump parses buffered input until a data message waits for the reader, the input runs
// out or the connection ends. Loop-confined.
func (w *WSConn) pump() {
	cs := w.cs
	w.answerDuePong()
	if w.h != nil && w.c == nil {
		w.deliverQueued() // callback form: what waited for the handler's return, first
	}
	for w.state != wsDone && cs.state == connOpen {
		if w.inputOverflow() {
			return
		}
		in := cs.gc.InboundBuffered()
		if in == 0 || in < w.need {
			return // the frame is still incomplete: no need to look at it again
		}
		buf, _ := cs.gc.Peek(-1)
		n, ok, err := w.rd.Next(buf, &w.msg)
		if err != nil {
			if errors.Is(err, httpcodec.ErrNeedMore) {
				w.need = wsFrameNeed(buf)
				return
			}
			var we *httpcodec.WSError
			if !errors.As(err, &we) {
				we = &httpcodec.WSError{Code: httpcodec.WSCloseProtocolError, Reason: err.Error()}
			}
			_, _ = cs.gc.Discard(-1)
			w.dropQueue() // as the input behind the violation: a broken client's messages go
			w.srv.ws.protocolErrors++
			w.fail(we.Code, we.Reason, we, true)
			return
		}
		w.need = 0
		if ok {
			w.handle(&w.msg)
			w.msg.Payload, w.msg.CloseReason = nil, nil // views into gnet's buffer: keep none
		} else {
			w.partial += n
		}
		if cs.state == connClosed {
			return // closed while handling it (a failed write): the buffer is gnet's again
		}
		_, _ = cs.gc.Discard(n)
	}
	if w.state != wsDone && cs.state == connOpen {
		w.inputOverflow()
	}
}

// inputOverflow closes the client with 1008 and reports true when, while its messages
// cannot be delivered, the input it sent and the server holds (the messages queued, the
// one in progress, gnet's buffer) passes MaxMessageBytes + wsInputSlack. Loop-confined.
func (w *WSConn) inputOverflow() bool {
	if !w.held && w.queueOff == len(w.queue) && (w.h == nil || w.c == nil) {
		return false // delivered as it comes: the reader's limits bound the input
	}
	cs := w.cs
	if int64(len(w.queue)-w.queueOff+w.partial+cs.gc.InboundBuffered()) <= w.srv.cfg.WebSocket.MaxMessageBytes+wsInputSlack {
		return false
	}
	w.srv.ws.inputOverflows++
	_, _ = cs.gc.Discard(-1)
	w.dropQueue()
	w.fail(httpcodec.WSClosePolicyViolation, "input not read", ErrSlowConsumer, true)
	return true
}

// enqueue keeps a whole message that cannot be delivered now. Loop-confined.
func (w *WSConn) enqueue(bin bool, p []byte) {
	kind := byte(0)
	if bin {
		kind = 1
	}
	w.queue = append(w.queue, kind, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(w.queue[len(w.queue)-4:], uint32(len(p)))
	w.queue = append(w.queue, p...)
}

// dequeue returns the oldest queued message (p is a view into the queue, valid until
// the next enqueue or dropQueue) and reports whether there was one. Loop-confined.
func (w *WSConn) dequeue() (bin bool, p []byte, ok bool) {
	if w.queueOff == len(w.queue) {
		return false, nil, false
	}
	q := w.queue[w.queueOff:]
	n := int(binary.BigEndian.Uint32(q[1:wsQueueHead]))
	w.queueOff += wsQueueHead + n
	return q[0] == 1, q[wsQueueHead : wsQueueHead+n], true
}

// dropQueue forgets the queued messages and gives the queue's memory back once it was
// large. Loop-confined.
func (w *WSConn) dropQueue() {
	w.queueOff = 0
	if cap(w.queue) > maxKeptWSBuf {
		w.queue = nil
	} else {
		w.queue = w.queue[:0]
	}
}

// deliverQueued runs OnMessage for the messages that waited for the callback form's
// handler to return, in order: all of them when the connection had already ended (they
// arrived before its end), until one ends it otherwise (a panic, a close). Loop-confined.
func (w *WSConn) deliverQueued() {
	ended := w.state == wsDone
	for {
		if !ended && w.state == wsDone {
			break
		}
		bin, p, ok := w.dequeue()
		if !ok {
			break
		}
		w.deliver(bin, p)
	}
	w.dropQueue()
}

// wsFrameNeed returns how many bytes the frame at buf's start needs in all, as far as its
// header has arrived: at least len(buf)+1.
func wsFrameNeed(b []byte) int {
	if len(b) < 2 {
		return len(b) + 1
	}
	h, n := 2, int64(b[1]&0x7f)
	if b[1]&0x80 != 0 {
		h += 4
	}
	switch n {
	case 126:
		if len(b) < 4 {
			return len(b) + 1
		}
		n, h = int64(binary.BigEndian.Uint16(b[2:])), h+2
	case 127:
		if len(b) < 10 {
			return len(b) + 1
		}
		v := binary.BigEndian.Uint64(b[2:])
		if v > 1<<40 {
			return len(b) + 1 // the reader refuses it: do not compute with it
		}
		n, h = int64(v), h+8
	}
	return max(h+int(n), len(b)+1)
}

// handle acts on a complete message or control frame. Loop-confined.
func (w *WSConn) handle(m *httpcodec.WSMessage) {
	cs := w.cs
	switch m.Opcode {
	case httpcodec.WSText, httpcodec.WSBinary:
		if w.state != wsOpen {
			return // after the server's close frame: dropped
		}
		w.partial = 0
		w.st.msgsIn++
		w.st.bytesIn += uint64(len(m.Payload))
		w.route.msgsIn++
		w.route.bytesIn += uint64(len(m.Payload))
		bin := m.Opcode == httpcodec.WSBinary
		switch {
		case w.held || w.queueOff < len(w.queue) || (w.h != nil && w.c != nil):
			// The reader has not released the previous message, or the callback form's
			// handler still runs: keep it, and read on for the control frames behind it.
			w.enqueue(bin, m.Payload)
		case w.h != nil:
			w.deliver(bin, m.Payload)
		default:
			w.hold(bin, m.Payload)
		}
	case httpcodec.WSPing:
		if w.state == wsOpen {
			w.answerPing(m.Payload)
		}
	case httpcodec.WSClose:
		w.peerClosed = true
		if w.state == wsOpen {
			code := m.CloseCode
			if code == httpcodec.WSCloseNoStatus {
				code = 0 // echo "no code" as an empty close frame
			}
			cs.out, _ = httpcodec.AppendWSClose(cs.out, code, nil)
			w.route.peerCloses++
			w.finish(&CloseError{Code: m.CloseCode, Reason: string(m.CloseReason)}, true)
			return
		}
		w.finish(ErrWSClosed, true) // the answer to the server's close
	}
}

// hold gives the task form's reader the message p (copied: gnet's input buffer moves).
// Loop-confined.
func (w *WSConn) hold(bin bool, p []byte) {
	w.buf = append(w.buf[:0], p...)
	w.binary = bin
	w.held = true
	w.reader.Wake()
}

// answerPing queues the pong for a ping with payload p. Pongs count against
// MaxQueuedBytes like any output: while a pong would take the output past the bound,
// only the latest ping is kept (RFC 6455, 5.5.3, lets an endpoint answer only the most
// recent of the pings it has not answered), answered once the client has read its output
// down (answerDuePong). So a client that floods pings and never reads makes the server
// hold at most MaxQueuedBytes plus one pong, however long it goes on; while the output
// flows, every ping gets its pong. Loop-confined.
func (w *WSConn) answerPing(p []byte) {
	s, cs := w.srv, w.cs
	if q := w.queued(); q > 0 && q+httpcodec.WSFrameHeaderLen(len(p))+len(p) > s.cfg.WebSocket.MaxQueuedBytes {
		w.pong = append(w.pong[:0], p...)
		w.pongDue = true
		return
	}
	w.pongDue = false
	cs.out, _ = httpcodec.AppendWSFrame(cs.out, httpcodec.WSPong, true, p)
	s.markDirty(cs)
}

// answerDuePong queues the pong of the latest ping left unanswered over the output bound,
// once the output is back under it. Loop-confined.
func (w *WSConn) answerDuePong() {
	if !w.pongDue || w.state != wsOpen || w.cs.state != connOpen {
		return
	}
	if w.queued()+httpcodec.WSFrameHeaderLen(len(w.pong))+len(w.pong) > w.srv.cfg.WebSocket.MaxQueuedBytes {
		return
	}
	w.pongDue = false
	w.cs.out, _ = httpcodec.AppendWSFrame(w.cs.out, httpcodec.WSPong, true, w.pong)
	w.srv.markDirty(w.cs)
}

// fail queues a close frame with code and reason (when the server has not sent one yet),
// ends the connection with err and closes it gracefully; cancel also cancels the handler's
// task with err (a protocol error: its parks return err). Loop-confined.
func (w *WSConn) fail(code uint16, reason string, err error, cancel bool) {
	if w.state == wsOpen {
		w.cs.out = appendWSCloseFrame(w.cs.out, code, reason)
	}
	if cancel && w.c != nil {
		w.c.Task.cancel(err)
	}
	w.finish(err, true)
}

// appendWSCloseFrame appends a close frame, dropping a reason that cannot be sent (too long
// or not UTF-8) rather than the frame.
func appendWSCloseFrame(dst []byte, code uint16, reason string) []byte {
	if len(reason) > httpcodec.WSMaxControlPayload-2 {
		reason = reason[:httpcodec.WSMaxControlPayload-2]
	}
	out, err := httpcodec.AppendWSClose(dst, code, unsafeBytes(reason))
	if err != nil {
		out, _ = httpcodec.AppendWSClose(dst, code, nil)
	}
	return out
}

// finish ends the connection with err (if it has not ended) and closes TCP: graceful
// writes what is queued (the close frame last) and half-closes, as the server closes
// first after a close handshake; otherwise it drops the connection at once.
// Loop-confined.
func (w *WSConn) finish(err error, graceful bool) {
	s, cs := w.srv, w.cs
	w.end(err)
	if w.drainClose && !w.drainDone {
		w.drainDone = true
		if graceful && w.peerClosed {
			s.drain.report.WebSocketsClosed++
		} else {
			s.drain.report.WebSocketsForced++
		}
	}
	if cs.state != connOpen {
		return
	}
	if !graceful {
		s.flush(cs) // one last try: gnet writes what the socket takes before closing
		s.closeNow(cs)
		return
	}
	s.flush(cs)
	if cs.state == connOpen {
		s.beginClose(cs)
		if s.cfg.WebSocket.CloseTimeout > 0 && cs.deadlineKind == deadlineLinger {
			cs.deadline = min(cs.deadline, s.now()+int64(s.cfg.WebSocket.CloseTimeout))
		}
	}
}

// end records that the connection ended with err and wakes every task waiting on it.
func (w *WSConn) end(err error) {
	if w.state == wsDone {
		return
	}
	w.state, w.err = wsDone, err
	w.srv.ws.closed(w)
	if w.h != nil {
		w.later() // OnClose, once what ended it has been handled
		return
	}
	w.reader.Wake()
	w.closer.Wake()
	w.wakeWriters()
}

func (w *WSConn) wakeWriters() {
	for i, wk := range w.writers {
		wk.Wake()
		w.writers[i] = scheduler.Waker{}
	}
	w.writers = w.writers[:0]
	w.watched = false
}

// endErr is what a method returns on a connection that is closing or ended.
func (w *WSConn) endErr() error {
	if w.err != nil {
		return w.err
	}
	return ErrWSClosed
}

// ReadMessage parks the calling task until a whole message has arrived and returns it:
// binary false for a text message (valid UTF-8). data is valid until the next
// ReadMessage. One task reads at a time. Once the connection ends it returns why:
// *CloseError when the client closed it, *httpcodec.WSError when the client broke the
// protocol (the server closed with its code), ErrClientGone when the connection was lost,
// ErrSlowConsumer, ErrPingTimeout, ErrWSClosed (the server closed it), or the task's
// cancellation error; on a callback-form connection (UpgradeTo) it returns
// ErrWSCallbackForm. Loop-confined; outside a task it returns a message only if one is
// already waiting.
func (w *WSConn) ReadMessage() (binary bool, data []byte, err error) {
	if w.h != nil {
		return false, nil, ErrWSCallbackForm
	}
	s := w.srv
	t := s.sched.Current()
	cur := int64(-1) // the task's on-loop time now, when measured
	if w.taken {
		w.taken, w.held = false, false
		if w.mark >= 0 && t != nil && s.acct.on {
			// The reader's on-loop time since it took the message: what handling it cost.
			cur = int64(t.StatsAt(s.nanotime()).OnLoop)
			d := time.Duration(cur - w.mark)
			w.st.onLoop += d
			w.st.onLoopMax = max(w.st.onLoopMax, d)
			w.route.recordOnLoop(d)
		}
		w.mark = -1
		if cap(w.buf) > maxKeptWSBuf {
			w.buf = nil
		}
		if bin, p, ok := w.dequeue(); ok {
			w.hold(bin, p) // the next message that arrived meanwhile (even after the end)
			if w.queueOff == len(w.queue) {
				w.dropQueue()
			}
		}
		if w.state != wsDone {
			w.pump()
		}
	}
	for !w.held {
		if w.state == wsDone {
			return false, nil, w.err
		}
		if t == nil {
			return false, nil, errors.New("loop: WSConn.ReadMessage outside a task: nothing to park")
		}
		w.reader = t.Waker()
		perr := t.Park(scheduler.ReasonWait)
		w.reader = scheduler.Waker{}
		cur = -1 // a new slice: measure from its start
		if perr != nil && !w.held {
			if w.state == wsDone {
				return false, nil, w.err
			}
			if errors.Is(perr, context.Canceled) {
				return false, nil, ErrClientGone
			}
			return false, nil, perr
		}
	}
	w.taken = true
	if t != nil && s.acct.on {
		if cur < 0 {
			onLoop, _, _ := t.Totals() // up to the slice's start, which is about now
			cur = int64(onLoop)
		}
		w.mark = cur
	}
	return w.binary, w.buf, nil
}

// WriteText queues p as one text message (p must be UTF-8; it is not checked) and, while
// the connection's queued output is over Config.WebSocket.MaxQueuedBytes, parks the
// calling task until the client has read some. Called outside a task (a function run on
// the loop) or on a callback-form connection (UpgradeTo) it never parks: past the bound
// it closes the client as Send does.
// It returns the connection's end reason once it is closing or ended (the message may
// then not be delivered). Loop-confined.
func (w *WSConn) WriteText(p []byte) error { return w.write(httpcodec.WSText, p) }

// WriteBinary is WriteText for a binary message.
func (w *WSConn) WriteBinary(p []byte) error { return w.write(httpcodec.WSBinary, p) }

func (w *WSConn) write(op httpcodec.WSOpcode, p []byte) error {
	if w.state != wsOpen {
		return w.endErr()
	}
	s, cs := w.srv, w.cs
	limit := s.cfg.WebSocket.MaxQueuedBytes
	t := s.sched.Current()
	if t == nil || w.h != nil {
		// Nothing to park, or the callback form: the bound holds as for Send.
		if q := w.queued(); q > 0 && q+httpcodec.WSFrameHeaderLen(len(p))+len(p) > limit {
			w.slowConsumer(false)
			return ErrSlowConsumer
		}
		t = nil
	}
	cs.out, _ = httpcodec.AppendWSFrame(cs.out, op, true, p)
	w.sent(len(p))
	s.markDirty(cs)
	if t == nil || w.queued() <= limit {
		return nil
	}
	for w.state == wsOpen && w.queued() > limit {
		s.flush(cs) // hand it to gnet now so the watch sees the true backlog
		if w.state != wsOpen || cs.state != connOpen || w.queued() <= limit {
			break
		}
		d := streamPoll
		if w.watched || s.drains.watchBelow(cs, limit/2, w.wakeWriters) {
			// Registered only with a watch to wake it: without one (drainWatch) the park
			// times out every streamPoll, and registering each time would grow writers.
			w.watched, d = true, drainWatchBound
			w.writers = append(w.writers, t.Waker())
		}
		if err := t.ParkTimeout(scheduler.ReasonWrite, d); err != nil && !errors.Is(err, scheduler.ErrTimeout) {
			if w.state != wsOpen {
				return w.endErr()
			}
			if errors.Is(err, context.Canceled) {
				return ErrClientGone
			}
			return err
		}
	}
	if w.state != wsOpen {
		return w.endErr()
	}
	return nil
}

// queued is the output queued in the server for w: gathered and in gnet's buffer.
func (w *WSConn) queued() int { return w.cs.gc.OutboundBuffered() + len(w.cs.out) }

func (w *WSConn) sent(n int) {
	w.st.msgsOut++
	w.st.bytesOut += uint64(n)
	w.route.msgsOut++
	w.route.bytesOut += uint64(n)
}

// Send queues the prepared message m and never parks: if the connection's queued output
// would go past Config.WebSocket.MaxQueuedBytes, the client is a slow consumer: the
// connection is closed (1008) and counted, and Send returns ErrSlowConsumer. It returns
// the end reason of a connection that is closing or ended. Loop-confined.
func (w *WSConn) Send(m *PreparedMessage) error {
	if w.state != wsOpen {
		return w.endErr()
	}
	s, cs := w.srv, w.cs
	if q := w.queued(); q > 0 && q+len(m.frame) > s.cfg.WebSocket.MaxQueuedBytes {
		w.slowConsumer(false)
		return ErrSlowConsumer
	}
	cs.out = append(cs.out, m.frame...)
	w.sent(m.n)
	s.markDirty(cs)
	return nil
}

// slowConsumer closes a client that does not read: the output not yet handed to gnet is
// dropped and a 1008 close frame queued behind what gnet holds; the connection then has
// CloseTimeout to take it (a client that resumes reading sees why it was closed) before it
// is dropped. stalled says the stall timeout found it.
func (w *WSConn) slowConsumer(stalled bool) {
	s := w.srv
	s.ws.slowConsumers++
	w.route.slowConsumers++
	if stalled {
		s.ws.stalls++
	}
	if s.ws.slowLog.allow(s) {
		s.log.Warn("loop: websocket client does not read; closing it (1008)", "route", w.route.pattern,
			"remote", w.remote, "queued", w.queued(), "stalled", stalled, "slow_consumers_total", s.ws.slowConsumers)
	}
	w.cs.out = w.cs.out[:0]
	if stalled {
		w.fail(httpcodec.WSClosePolicyViolation, "slow consumer", ErrSlowConsumer, false)
		w.srv.closeNow(w.cs) // it read nothing for StallTimeout: free its memory now
		return
	}
	w.fail(httpcodec.WSClosePolicyViolation, "slow consumer", ErrSlowConsumer, false)
}

// Close starts the close handshake with code (0: none; else a code the RFC lets an
// endpoint send, e.g. 1000, 1001, 1008, 3000-4999) and reason (at most 123 bytes of
// UTF-8), then, called from a task, parks until the client's close frame arrives or
// Config.WebSocket.CloseTimeout passes; then the connection is closed. Closing a closing
// or closed connection returns nil. It returns an error for an invalid code or reason.
// Loop-confined.
func (w *WSConn) Close(code uint16, reason string) error {
	if w.state != wsOpen {
		return nil
	}
	s, cs := w.srv, w.cs
	out, err := httpcodec.AppendWSClose(cs.out, code, unsafeBytes(reason))
	if err != nil {
		return fmt.Errorf("loop: WSConn.Close(%d, %q): %w", code, reason, err)
	}
	cs.out = out
	w.startClosing()
	t := s.sched.Current()
	if t == nil || w.h != nil {
		return nil // the sweep enforces CloseTimeout
	}
	deadline := w.closeAt + int64(s.cfg.WebSocket.CloseTimeout)
	for w.state == wsClosing {
		d := time.Duration(deadline - s.nanotime())
		if d <= 0 {
			break
		}
		w.closer = t.Waker()
		perr := t.ParkTimeout(scheduler.ReasonWait, d)
		w.closer = scheduler.Waker{}
		if perr != nil && !errors.Is(perr, scheduler.ErrTimeout) {
			break
		}
	}
	if w.state == wsClosing {
		w.finish(ErrWSClosed, false) // no answer in time
	}
	return nil
}

// startClosing records that the server's close frame is queued. Loop-confined.
func (w *WSConn) startClosing() {
	w.state = wsClosing
	w.closeAt = w.srv.nanotime()
	w.srv.markDirty(w.cs)
	w.reader.Wake() // a reader gets ErrWSClosed once the answer arrives
	w.wakeWriters()
}

// handlerDone runs when the handler that upgraded returns (in its task's last slice, from
// finishRequest): a connection still open gets a close frame (1000, or 1011 after a panic),
// and in every case it is closed once its output is written. Loop-confined.
func (w *WSConn) handlerDone(c *Ctx) {
	w.c = nil
	if w.h != nil && !c.aborted {
		// The callback form lives on without the task. Input that arrived while the
		// handler ran, or an end that happened meanwhile, is handled after this slice.
		if w.state == wsDone || w.queueOff < len(w.queue) || (w.cs.state == connOpen && w.cs.gc.InboundBuffered() > 0) {
			w.later()
		}
		return
	}
	if w.state == wsOpen {
		code, reason := httpcodec.WSCloseNormal, ""
		if c.aborted {
			code, reason = httpcodec.WSCloseInternalError, "handler failed"
		}
		w.cs.out = appendWSCloseFrame(w.cs.out, code, reason)
	}
	if w.drainClose && !w.drainDone {
		w.drainDone = true
		w.srv.drain.report.WebSocketsClosed++
	}
	w.end(ErrWSClosed)
	w.dropQueue() // nobody reads them any more
	w.queue = nil
	w.cs.closeAfterResponse() // finishRequest writes the output, then the close begins
}

// connClosed runs when gnet reported the connection closed. Loop-confined.
func (w *WSConn) connClosed() {
	s := w.srv
	if w.drainClose && !w.drainDone {
		w.drainDone = true
		s.drain.report.WebSocketsForced++
	}
	w.end(ErrClientGone)
	w.rd.Reset()
	w.msg = httpcodec.WSMessage{}
	w.partial = 0
	if !w.held {
		w.buf = nil // a held message (and the queued ones) arrived before the end: still read
	}
}

// sweep enforces w's timeouts: close handshake, stall, keepalive. Loop-confined.
func (w *WSConn) sweep(now int64) {
	s, cs := w.srv, w.cs
	cfg := &s.cfg.WebSocket
	switch w.state {
	case wsClosing:
		if now-w.closeAt >= int64(cfg.CloseTimeout) {
			w.finish(ErrWSClosed, false)
		}
		return
	case wsDone:
		return
	}
	if cfg.StallTimeout > 0 && w.stalled(now, int64(cfg.StallTimeout)) {
		w.slowConsumer(true)
		return
	}
	w.answerDuePong()
	if now-w.lastIn >= int64(wsIdleRelease) {
		w.releaseIdle()
	}
	if cfg.PingInterval <= 0 {
		return
	}
	if w.pingAt != 0 {
		// The ping may be queued behind a backlog the client is still reading (in gnet's
		// buffer and the kernel's send queue), so its pong comes late: output the client
		// acknowledged since the last sweep shows it is alive, and the pong timeout
		// restarts. A client that reads nothing acknowledges nothing: the pong timeout (or
		// the stall timeout) still ends it.
		if acked := bytesAcked(cs.gc.Fd()); acked != w.pingAck {
			w.pingAt, w.pingAck = now, acked
		}
	}
	switch {
	case w.pingAt != 0 && now-w.pingAt >= int64(cfg.PongTimeout):
		s.ws.pingTimeouts++
		w.route.pingTimeouts++
		w.finish(ErrPingTimeout, false) // presumed dead: a close frame would not be read
		if w.c != nil {
			w.c.Task.cancel(ErrPingTimeout)
		}
	case w.pingAt == 0 && now-w.lastIn >= int64(cfg.PingInterval):
		w.pingAt, w.pingAck = now, bytesAcked(cs.gc.Fd())
		cs.out, _ = httpcodec.AppendWSFrame(cs.out, httpcodec.WSPing, true, nil)
		s.markDirty(cs)
	}
}

// stalled tracks the progress of w's queued output like writeStalled and reports whether
// it made none for limit.
func (w *WSConn) stalled(now, limit int64) bool {
	cs := w.cs
	out := cs.gc.OutboundBuffered()
	switch {
	case out == 0:
		cs.stallSince = 0
	case cs.stallSince == 0 || out < cs.stallOut:
		cs.stallSince, cs.stallOut = now, out
	case now-cs.stallSince >= limit:
		return true
	default:
		cs.stallOut = out
	}
	return false
}

// wsIdleRelease is how long a connection must have received nothing before the sweep
// gives back its empty buffers: an idle player keeps none, a busy one keeps its own
// (re-made at most once per sweep when the server only pushes to it).
const wsIdleRelease = time.Second

// releaseIdle drops the buffers an idle connection does not use now: the gathered output
// (flushed at every turn's end, so empty here unless the socket is backed up) and, in the
// task form, the message buffer while the reader waits for a message. Loop-confined.
func (w *WSConn) releaseIdle() {
	if cs := w.cs; len(cs.out) == 0 {
		cs.out = nil
	}
	if !w.held && !w.taken {
		w.buf = nil
	}
	if w.queueOff == len(w.queue) {
		w.queue, w.queueOff = nil, 0
	}
	if !w.pongDue {
		w.pong = nil
	}
}

// drainClose sends the shutdown's 1001 close frame. Loop-confined.
func (w *WSConn) beginDrain() {
	if w.state != wsOpen {
		return
	}
	w.drainClose = true
	w.cs.out = appendWSCloseFrame(w.cs.out, httpcodec.WSCloseGoingAway, "server shutting down")
	w.startClosing()
}

// stopping runs at the final stop, before the connection's output is flushed for the last
// time: an open connection gets a 1001 close frame. Loop-confined.
func (w *WSConn) stopping() {
	if w.state == wsOpen {
		w.cs.out = appendWSCloseFrame(w.cs.out, httpcodec.WSCloseGoingAway, "server stopping")
	}
	if w.drainClose && !w.drainDone {
		w.drainDone = true
		w.srv.drain.report.WebSocketsForced++
	}
	w.end(ErrWSClosed)
	if w.h != nil {
		w.srv.wsRunLater() // no further turn: OnClose now (the door is closed)
	}
}

// Subprotocol returns the subprotocol chosen at the upgrade, or "". Any goroutine.
func (w *WSConn) Subprotocol() string { return w.proto }

// RemoteAddr returns the client's address. Any goroutine.
func (w *WSConn) RemoteAddr() net.Addr { return w.remote }

// ID returns the connection's id, unique within the server's lifetime. Any goroutine.
func (w *WSConn) ID() uint64 { return w.id }

// Done reports whether the connection is closing or ended: no more messages will be read
// or sent. Loop-confined.
func (w *WSConn) Done() bool { return w.state != wsOpen }

// Err returns why the connection ended (see ReadMessage), ErrWSClosed while the server's
// close handshake is in progress, or nil while it is open. Loop-confined.
func (w *WSConn) Err() error {
	if w.state == wsOpen {
		return nil
	}
	return w.endErr()
}
