package ws

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
)

// state is where a connection is in its life; it only moves forward.
type state uint8

const (
	// stateOpen: messages flow both ways.
	stateOpen state = iota
	// stateClosing: the server sent its close frame and waits (CloseTimeout) for the
	// client's. Data the client still sends is dropped; nothing more is sent.
	stateClosing
	// stateDone: ended; err says why. The TCP connection is closing or closed.
	stateDone
)

var stateNames = [...]string{"open", "closing", "done"}

// inputSlack is how much input beyond one whole message a connection may buffer while its
// reader has not taken the previous message (or the callback form's handler has not
// returned): a burst of small messages fits, a client that floods a busy reader is closed
// (1008) instead of growing the server's buffers.
const inputSlack = 64 << 10

// queueHead is the size of a queued message's header in Conn.queue: a kind byte (1
// binary) and the payload length (4 bytes).
const queueHead = 5

// maxKeptBuf is the largest message buffer a connection keeps between messages; a larger
// one (after a big message) is dropped so that idle connections stay small.
const maxKeptBuf = 16 << 10

// writePoll is how long a writer parked on backpressure waits before it looks at the
// backlog again where the socket's drain cannot be watched; writeWatchBound bounds the
// park where it can (the watch wakes it).
const (
	writePoll       = time.Millisecond
	writeWatchBound = time.Second
)

// Conn is one WebSocket connection, made by Upgrade or UpgradeTo. It is loop-confined: call
// its methods from tasks on its loop (the handler's, or another such as a room's tick) or
// from functions run on the loop, never from other goroutines. It stays valid after the
// connection closed (its methods then return the reason), so a room may hold it.
type Conn struct {
	st     *loopState
	rc     *loop.RawConn
	task   *loop.Task // the handler's task while the handler runs; nil after
	h      *Handler   // the callback form's handler (UpgradeTo); nil in the task form
	lim    *limits
	id     uint64
	idx    int // position in loopState.conns, -1 once ended
	route  *route
	proto  string
	remote net.Addr
	since  time.Time // the loop clock at the upgrade

	rd     httpcodec.WSReader
	msg    httpcodec.WSMessage
	need   int    // input needed before the frame being read can complete; 0 when unknown
	buf    []byte // the message for the reader (a copy: the input buffer moves)
	held   bool   // buf holds a message the reader has not released
	taken  bool   // the reader has it (released at its next ReadMessage)
	binary bool

	// Messages parsed while they could not be delivered (the task form's reader has not
	// released the previous one; the callback form's handler has not returned), so that
	// the control frames behind them are answered whatever the handler does. Each is a
	// queueHead header and the payload; queueOff is where the next one starts. partial
	// counts the frames consumed of a message not yet whole. Bounded with the input: past
	// MaxMessageBytes + inputSlack the client is closed (1008).
	queue    []byte
	queueOff int
	partial  int

	state   state
	err     error // why it ended (stateDone)
	gone    bool  // the TCP connection closed (or the server stops): write nothing more
	running bool  // the handler that upgraded has not returned
	closeAt int64 // loop clock (ns) when the server's close frame was queued
	watched bool  // a drain watch is armed for parked writers (Flush)

	heard   bool   // input arrived since the last sweep
	lastIn  int64  // loop clock (ns) of the last sweep that saw input
	pingAt  int64  // loop clock (ns) of the unanswered ping, 0 when none; moved up by output progress
	pingAck uint64 // bytes the client acknowledged, at the last sweep while a ping is unanswered

	stallOut   int   // queued output at the last progress check
	stallSince int64 // loop clock (ns) since when the queued output has not shrunk; 0 when none

	// The reader task's time when it took the last message (markAt zero when none): the
	// wall clock and the task's waits so far, so that its on-loop time since is the wall
	// time minus the waits.
	markAt   time.Time
	markWait time.Duration

	// pong holds the payload of the latest ping left unanswered because the output was
	// over MaxQueuedBytes (pongDue); it is answered once the client has read its output
	// down.
	pongDue bool
	pong    []byte

	laterQueued bool // in loopState.later (callback form)

	dfl         *deflateConn // permessage-deflate, nil when not negotiated (deflate.go)
	closeCalled bool         // OnClose ran (callback form)

	fig figures
}

// figures are one connection's counters.
type figures struct {
	msgsIn, bytesIn, msgsOut, bytesOut uint64
	onLoop, onLoopMax                  time.Duration
}

// Upgrade turns the request into a WebSocket connection: it checks the request (method,
// headers, version, key; then cfg.CheckOrigin), picks a subprotocol from
// cfg.Subprotocols and answers 101. The handler's task then continues as the
// connection's task: read messages in a loop; when the handler returns, the connection is
// closed (with 1000 unless it was closed otherwise; 1011 if the handler panicked). On
// failure Upgrade answers the request itself (400 a malformed upgrade, 403 a refused
// origin, 405 not GET, 426 a wrong version, 500 an invalid cfg, 501 a handler off the
// loop (multi-thread mode), 503 while the server drains or the loop is saturated) and
// returns an error saying why. Call it from the handler, before writing anything.
// UpgradeTo is the callback form, whose idle connections hold no task.
func Upgrade(c *loop.Ctx, cfg Config) (*Conn, error) { return upgrade(c, &cfg, nil) }

// upgrade is Upgrade (h nil) and UpgradeTo.
func upgrade(c *loop.Ctx, cfg *Config, h *Handler) (*Conn, error) {
	l := c.Loop()
	// The handler must run as a task of the loop (single-thread mode): the connection's
	// methods park it. Task.OnLoop runs the check on the loop in either mode.
	inTask := false
	c.Task.OnLoop(func() { inTask = l.Current() == &c.Task })
	if !inTask {
		c.String(501, "501 Not Implemented: "+ErrMultiThread.Error()+"\n")
		return nil, ErrMultiThread
	}
	if c.Status() != 0 { // a head was written
		return nil, errors.New("ws: Upgrade after the response was written")
	}
	if err := cfg.Validate(); err != nil {
		c.String(500, "500 Internal Server Error\n")
		return nil, err
	}
	if l.Phase() != "serving" {
		c.String(503, "503 Service Unavailable: the server is shutting down\n")
		return nil, errors.New("ws: upgrade refused: the server is shutting down")
	}
	st := stateOf(l)
	lim := st.limitsOf(cfg)
	if busy := saturated(l, lim); busy != "" {
		// Each connection adds inputs and output to a loop that keeps up with what it has
		// no longer: refuse the newcomer, and let the players it has play on.
		st.saturatedRefusals++
		if st.slowLog.allow(l) {
			st.logger.Warn("ws: upgrade refused: the loop is saturated (503)", "route", c.Route(),
				"check", busy, "saturated_refusals_total", st.saturatedRefusals)
		}
		c.SetHeader("Retry-After", strconv.Itoa(saturatedRetryAfter))
		c.String(503, "503 Service Unavailable: the server is saturated ("+busy+"); retry later\n")
		return nil, fmt.Errorf("ws: upgrade refused (503): the loop is saturated (%s)", busy)
	}
	req := requestOf(c)
	key, err := httpcodec.CheckWSUpgrade(&req)
	if err != nil {
		status, reason := 400, err.Error()
		var perr *httpcodec.Error
		if errors.As(err, &perr) {
			status, reason = perr.Status, perr.Reason
		}
		switch status {
		case 426:
			c.SetHeader("Sec-WebSocket-Version", "13")
		case 405:
			c.SetHeader("Allow", "GET")
		}
		c.String(status, httpcodec.StatusText(status)+": "+reason+"\n")
		return nil, fmt.Errorf("ws: upgrade refused (%d): %w", status, err)
	}
	origin := c.Header("Origin")
	ok := false
	if cfg.CheckOrigin != nil {
		ok = cfg.CheckOrigin(c, origin)
	} else {
		ok = sameOrigin(origin, c.Header("Host"))
	}
	if !ok {
		c.String(403, "403 Forbidden: origin not allowed\n")
		return nil, fmt.Errorf("ws: upgrade refused (403): origin %q not allowed", origin)
	}
	proto, err := httpcodec.WSSelectProtocol(&req, cfg.Subprotocols)
	if err != nil {
		c.String(400, "400 Bad Request: "+err.Error()+"\n")
		return nil, fmt.Errorf("ws: upgrade refused (400): %w", err)
	}
	var dfl *deflateConn
	ext := ""
	if lim.compress {
		var offers []string
		for name, value := range c.Headers() {
			if strings.EqualFold(name, "Sec-WebSocket-Extensions") {
				offers = append(offers, value)
			}
		}
		o, found, err := negotiateDeflate(offers)
		if err != nil {
			c.String(400, "400 Bad Request: "+err.Error()+"\n")
			return nil, fmt.Errorf("ws: upgrade refused (400): %w", err)
		}
		if found {
			ext, dfl = agreedDeflate(o, lim)
		}
	}
	resp, err := httpcodec.AppendWSUpgradeResponse(st.scratch[:0], key, proto)
	if err != nil {
		panic("ws: " + err.Error()) // the subprotocol was checked to be a token
	}
	if ext != "" {
		// The head ends with its empty line: the extension header goes before it.
		resp = append(append(append(resp[:len(resp)-2], "Sec-WebSocket-Extensions: "...), ext...), "\r\n\r\n"...)
	}
	w := &Conn{st: st, task: &c.Task, h: h, lim: lim, idx: -1, proto: string(proto), remote: c.RemoteAddr(),
		since: l.Now(), running: true, dfl: dfl}
	w.lastIn = w.since.UnixNano()
	rc, err := c.Takeover((*taken)(w), resp)
	if err != nil {
		if l.Phase() != "serving" {
			c.String(503, "503 Service Unavailable: the server is shutting down\n")
		} else {
			c.String(400, "400 Bad Request: "+err.Error()+"\n")
		}
		return nil, fmt.Errorf("ws: upgrade refused: %w", err)
	}
	st.scratch = resp[:0]
	w.rc = rc
	w.rd.Init(httpcodec.Config{MaxWSMessageBytes: lim.maxMessage})
	st.opened(w, c.Route())
	if w.state == stateDone { // the write of the head found the connection closed
		st.closed(w)
	}
	return w, nil
}

// requestOf rebuilds the parts of c's request head the handshake checks.
func requestOf(c *loop.Ctx) httpcodec.Request {
	req := httpcodec.Request{Method: []byte(c.Method()), ProtoMinor: 1, ContentLength: -1}
	var upgrade []byte
	connUpgrade := false
	for name, value := range c.Headers() {
		req.Headers = append(req.Headers, httpcodec.Header{Name: []byte(name), Value: []byte(value)})
		switch {
		case strings.EqualFold(name, "Upgrade") && upgrade == nil:
			upgrade = []byte(value)
		case strings.EqualFold(name, "Connection"):
			for _, tok := range strings.Split(value, ",") {
				connUpgrade = connUpgrade || strings.EqualFold(strings.TrimSpace(tok), "upgrade")
			}
		case strings.EqualFold(name, "Transfer-Encoding"):
			req.Chunked = true
		case strings.EqualFold(name, "Content-Length"):
			if n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64); err == nil {
				req.ContentLength = n
			}
		}
	}
	if connUpgrade { // as the parser records it: only with a Connection: upgrade token
		req.Upgrade = upgrade
	}
	return req
}

// saturatedRetryAfter is the Retry-After, in seconds, of an upgrade refused because the
// loop is saturated: the lag covers the last one to two seconds, so a loop that caught up
// passes the check again within two.
const saturatedRetryAfter = 2

// saturated names the check of the loop itself that fails now and has failed for a while
// ("loop_lag", "utilisation"; Config.SaturatedLag and SaturatedUtilisation set their
// limits, a negative one turns it off), or returns "" while the loop keeps up. The lag
// must have passed the limit in the previous second and in this one (accounting.Vitals.LagHeld):
// one late sample refuses no player. Loop-confined.
func saturated(l *loop.Loop, lim *limits) string {
	if lim.satLag < 0 && lim.satUtil < 0 {
		return ""
	}
	v := l.Vitals()
	if lim.satLag >= 0 && v.LagHeld > lim.satLag {
		return "loop_lag"
	}
	if lim.satUtil >= 0 && v.Utilisation > lim.satUtil {
		return "utilisation"
	}
	return ""
}

// sameOrigin is the default origin policy (gorilla's): no Origin header, or one whose host
// equals the Host header, ignoring ASCII case.
func sameOrigin(origin, host string) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// taken is a Conn as the loop.RawHandler its connection was handed to: its methods are
// the loop's calls, not the API.
type taken Conn

// conn returns the Conn, given its RawConn: a callback may come before Takeover returned
// (a write of the head that found the connection closed).
func (t *taken) conn(rc *loop.RawConn) *Conn {
	w := (*Conn)(t)
	if w.rc == nil {
		w.rc = rc
	}
	return w
}

// OnData parses the input until it runs out or the connection ends: control frames are
// answered at once, messages delivered or queued. The loop calls it, outside any task.
func (t *taken) OnData(rc *loop.RawConn, in []byte) int {
	w := t.conn(rc)
	if w.state == stateDone {
		return len(in)
	}
	w.heard, w.pingAt = true, 0 // any traffic shows the client is alive
	return w.pump(in)
}

// pump parses in and returns how much of it it consumed. Loop-confined.
func (w *Conn) pump(in []byte) int {
	w.answerDuePong()
	if w.h != nil && !w.running {
		w.deliverQueued() // callback form: what waited for the handler's return, first
	}
	used := 0
	for w.state != stateDone && !w.gone {
		rest := in[used:]
		if w.inputOverflow(len(rest)) {
			return len(in)
		}
		if len(rest) == 0 || len(rest) < w.need {
			return used // the frame is still incomplete: no need to look at it again
		}
		if w.dfl != nil {
			w.dfl.frameHead(rest)
		}
		n, ok, err := w.rd.Next(rest, &w.msg)
		if n > 0 && w.dfl != nil {
			w.dfl.rewrote = false
		}
		if err != nil {
			if errors.Is(err, httpcodec.ErrNeedMore) {
				w.need = frameNeed(rest)
				return used
			}
			var we *httpcodec.WSError
			if !errors.As(err, &we) {
				we = &httpcodec.WSError{Code: httpcodec.WSCloseProtocolError, Reason: err.Error()}
			}
			w.dropQueue() // as the input behind the violation: a broken client's messages go
			w.st.protocolErrors++
			w.fail(we.Code, we.Reason, we, true)
			return len(in)
		}
		w.need = 0
		if ok {
			w.handle(&w.msg)
			w.msg.Payload, w.msg.CloseReason = nil, nil // views into the input: keep none
		} else {
			w.partial += n
		}
		used += n
	}
	if w.state == stateDone || w.gone {
		return len(in)
	}
	return used
}

// inputOverflow closes the client with 1008 and reports true when, while its messages
// cannot be delivered, the input it sent and the server holds (the messages queued, the
// one in progress, the unparsed input) passes MaxMessageBytes + inputSlack. Loop-confined.
func (w *Conn) inputOverflow(unparsed int) bool {
	if !w.held && w.queueOff == len(w.queue) && (w.h == nil || !w.running) {
		return false // delivered as it comes: the reader's limits bound the input
	}
	if int64(len(w.queue)-w.queueOff+w.partial+unparsed) <= w.lim.maxMessage+inputSlack {
		return false
	}
	w.st.inputOverflows++
	w.dropQueue()
	w.fail(httpcodec.WSClosePolicyViolation, "input not read", ErrSlowConsumer, true)
	return true
}

// enqueue keeps a whole message that cannot be delivered now. Loop-confined.
func (w *Conn) enqueue(bin bool, p []byte) {
	kind := byte(0)
	if bin {
		kind = 1
	}
	w.queue = append(w.queue, kind, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(w.queue[len(w.queue)-4:], uint32(len(p)))
	w.queue = append(w.queue, p...)
}

// dequeue returns the oldest queued message (p is a view into the queue, valid until the
// next enqueue or dropQueue) and reports whether there was one. Loop-confined.
func (w *Conn) dequeue() (bin bool, p []byte, ok bool) {
	if w.queueOff == len(w.queue) {
		return false, nil, false
	}
	q := w.queue[w.queueOff:]
	n := int(binary.BigEndian.Uint32(q[1:queueHead]))
	w.queueOff += queueHead + n
	return q[0] == 1, q[queueHead : queueHead+n], true
}

// dropQueue forgets the queued messages and gives the queue's memory back once it was
// large. Loop-confined.
func (w *Conn) dropQueue() {
	w.queueOff = 0
	if cap(w.queue) > maxKeptBuf {
		w.queue = nil
	} else {
		w.queue = w.queue[:0]
	}
}

// deliverQueued runs OnMessage for the messages that waited for the callback form's
// handler to return, in order: all of them when the connection had already ended (they
// arrived before its end), until one ends it otherwise (a panic, a close). Loop-confined.
func (w *Conn) deliverQueued() {
	ended := w.state == stateDone
	for {
		if !ended && w.state == stateDone {
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

// frameNeed returns how many bytes the frame at b's start needs in all, as far as its
// header has arrived: at least len(b)+1.
func frameNeed(b []byte) int {
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
func (w *Conn) handle(m *httpcodec.WSMessage) {
	switch m.Opcode {
	case httpcodec.WSText, httpcodec.WSBinary:
		if w.state != stateOpen {
			return // after the server's close frame: dropped
		}
		w.partial = 0
		if w.dfl != nil && w.dfl.compressed && !w.decompress(m) {
			return
		}
		w.fig.msgsIn++
		w.fig.bytesIn += uint64(len(m.Payload))
		w.route.msgsIn++
		w.route.bytesIn += uint64(len(m.Payload))
		bin := m.Opcode == httpcodec.WSBinary
		switch {
		case w.held || w.queueOff < len(w.queue) || (w.h != nil && w.running):
			// The reader has not released the previous message, or the callback form's
			// handler still runs: keep it, and read on for the control frames behind it.
			w.enqueue(bin, m.Payload)
		case w.h != nil:
			w.deliver(bin, m.Payload)
		default:
			w.hold(bin, m.Payload)
		}
	case httpcodec.WSPing:
		if w.state == stateOpen {
			w.answerPing(m.Payload)
		}
	case httpcodec.WSClose:
		if w.state == stateOpen {
			code := m.CloseCode
			if code == httpcodec.WSCloseNoStatus {
				code = 0 // echo "no code" as an empty close frame
			}
			w.writeClose(code, "")
			w.route.peerCloses++
			w.finish(&CloseError{Code: m.CloseCode, Reason: string(m.CloseReason)}, true)
			return
		}
		w.finish(ErrClosed, true) // the answer to the server's close
	}
}

// hold gives the task form's reader the message p (copied: the input buffer moves).
// Loop-confined.
func (w *Conn) hold(bin bool, p []byte) {
	w.buf = append(w.buf[:0], p...)
	w.binary = bin
	w.held = true
	w.rc.Wake()
}

// writeFrame queues one frame of p. Loop-confined.
func (w *Conn) writeFrame(op httpcodec.WSOpcode, p []byte) {
	hdr, _ := httpcodec.AppendWSFrameHeader(w.st.scratch[:0], op, true, len(p))
	_, _ = w.rc.Write(hdr)
	w.st.scratch = hdr[:0]
	if len(p) > 0 {
		_, _ = w.rc.Write(p)
	}
}

// writeData queues the data frame of message p: compressed where permessage-deflate was
// negotiated and p is worth it, so the sending task spends the CPU. Loop-confined.
func (w *Conn) writeData(op httpcodec.WSOpcode, p []byte) {
	if d := w.dfl; d != nil && d.compressible(len(p)) {
		frame, ok := w.st.deflateFrame(w.st.deflated, op, p, d.dict(len(p)), d.window)
		if ok {
			_, _ = w.rc.Write(frame)
			d.sentCompressed(p)
			w.route.zOut++
			w.route.zBytesOut += uint64(wireLen(frame))
		}
		if cap(frame) <= maxKeptBuf {
			w.st.deflated = frame[:0]
		} else {
			w.st.deflated = nil
		}
		if ok {
			return
		}
	}
	w.writeFrame(op, p)
}

// decompress replaces the compressed message m's payload by its plaintext (a view into
// the loop's buffer, valid until the next message) and reports true; or fails the
// connection (1009 past MaxMessageBytes, 1007 for invalid data or text that is not UTF-8)
// and reports false. The time counts as the connection's on-loop time. Loop-confined.
func (w *Conn) decompress(m *httpcodec.WSMessage) bool {
	var start time.Time
	if w.st.acct {
		start = time.Now()
	}
	p, we := w.st.inflate(w.dfl, m.Payload, w.lim.maxMessage)
	if we == nil && w.dfl.text {
		m.Opcode = httpcodec.WSText
		if !utf8.Valid(p) {
			we = errDeflateUTF8
		}
	}
	if w.st.acct {
		w.fig.onLoop += time.Since(start)
	}
	if we != nil {
		w.dropQueue()
		w.st.protocolErrors++
		w.fail(we.Code, we.Reason, we, true)
		return false
	}
	w.route.zIn++
	w.route.zBytesIn += uint64(len(m.Payload))
	m.Payload = p
	return true
}

// writeClose queues a close frame, dropping a reason that cannot be sent (too long or not
// UTF-8) rather than the frame. Loop-confined.
func (w *Conn) writeClose(code uint16, reason string) {
	if len(reason) > httpcodec.WSMaxControlPayload-2 {
		reason = reason[:httpcodec.WSMaxControlPayload-2]
	}
	out, err := httpcodec.AppendWSClose(w.st.scratch[:0], code, unsafeBytes(reason))
	if err != nil {
		out, _ = httpcodec.AppendWSClose(w.st.scratch[:0], code, nil)
	}
	_, _ = w.rc.Write(out)
	w.st.scratch = out[:0]
}

// answerPing queues the pong for a ping with payload p. Pongs count against
// MaxQueuedBytes like any output: while a pong would take the output past the bound, only
// the latest ping is kept (RFC 6455, 5.5.3, lets an endpoint answer only the most recent
// of the pings it has not answered), answered once the client has read its output down
// (answerDuePong). So a client that floods pings and never reads makes the server hold at
// most MaxQueuedBytes plus one pong, however long it goes on; while the output flows,
// every ping gets its pong. Loop-confined.
func (w *Conn) answerPing(p []byte) {
	if q := w.rc.Queued(); q > 0 && q+httpcodec.WSFrameHeaderLen(len(p))+len(p) > w.lim.maxQueued {
		w.pong = append(w.pong[:0], p...)
		w.pongDue = true
		return
	}
	w.pongDue = false
	w.writeFrame(httpcodec.WSPong, p)
}

// answerDuePong queues the pong of the latest ping left unanswered over the output bound,
// once the output is back under it. Loop-confined.
func (w *Conn) answerDuePong() {
	if !w.pongDue || w.state != stateOpen || w.gone {
		return
	}
	if w.rc.Queued()+httpcodec.WSFrameHeaderLen(len(w.pong))+len(w.pong) > w.lim.maxQueued {
		return
	}
	w.pongDue = false
	w.writeFrame(httpcodec.WSPong, w.pong)
}

// fail queues a close frame with code and reason (when the server has not sent one yet),
// ends the connection with err and closes it gracefully; cancel also cancels the handler's
// task with err (a protocol error: its parks return err). Loop-confined.
func (w *Conn) fail(code uint16, reason string, err error, cancel bool) {
	if w.state == stateOpen {
		w.writeClose(code, reason)
	}
	if cancel && w.task != nil {
		w.task.Cancel(err)
	}
	w.finish(err, true)
}

// finish ends the connection with err (if it has not ended) and closes TCP: graceful
// writes what is queued (the close frame last) and half-closes, as the server closes
// first after a close handshake; otherwise it drops the connection at once.
// Loop-confined.
func (w *Conn) finish(err error, graceful bool) {
	w.end(err)
	if w.gone {
		return
	}
	if !graceful {
		w.rc.Close(0) // one last try to write, then closed
		return
	}
	w.rc.Close(w.lim.closeAfter)
}

// end records that the connection ended with err and wakes every task waiting on it.
func (w *Conn) end(err error) {
	if w.state == stateDone {
		return
	}
	w.state, w.err = stateDone, err
	w.st.closed(w)
	if w.dfl != nil {
		w.dfl.inDict, w.dfl.outDict = nil, nil // a room may hold the Conn: keep no window
	}
	if w.h != nil {
		w.later() // OnClose, once what ended it has been handled
		return
	}
	w.watched = false
	w.rc.Wake()
}

// endErr is what a method returns on a connection that is closing or ended.
func (w *Conn) endErr() error {
	if w.err != nil {
		return w.err
	}
	return ErrClosed
}

// ReadMessage parks the calling task until a whole message has arrived and returns it:
// binary false for a text message (valid UTF-8). data is valid until the next
// ReadMessage. One task reads at a time. Once the connection ends it returns why:
// *CloseError when the client closed it, *httpcodec.WSError when the client broke the
// protocol (the server closed with its code), loop.ErrClientGone when the connection was
// lost, ErrSlowConsumer, ErrPingTimeout, ErrClosed (the server closed it), or the task's
// cancellation error; on a callback-form connection (UpgradeTo) it returns
// ErrCallbackForm. Loop-confined; outside a task it returns a message only if one is
// already waiting.
func (w *Conn) ReadMessage() (binary bool, data []byte, err error) {
	if w.h != nil {
		return false, nil, ErrCallbackForm
	}
	t := w.st.l.Current()
	if w.taken {
		w.taken, w.held = false, false
		if !w.markAt.IsZero() && t != nil {
			// The reader's on-loop time since it took the message: what handling it cost
			// (the time since, less what the task waited meanwhile).
			_, q, p := t.Totals()
			d := time.Since(w.markAt) - (q + p - w.markWait)
			w.record(max(d, 0))
		}
		w.markAt = time.Time{}
		if cap(w.buf) > maxKeptBuf {
			w.buf = nil
		}
		if bin, p, ok := w.dequeue(); ok {
			w.hold(bin, p) // the next message that arrived meanwhile (even after the end)
			if w.queueOff == len(w.queue) {
				w.dropQueue()
			}
		}
		w.answerDuePong()
	}
	for !w.held {
		if w.state == stateDone {
			return false, nil, w.err
		}
		if t == nil {
			return false, nil, errors.New("ws: Conn.ReadMessage outside a task: nothing to park")
		}
		perr := w.rc.Wait(0)
		if perr != nil && !w.held {
			if w.state == stateDone {
				return false, nil, w.err
			}
			if errors.Is(perr, context.Canceled) {
				return false, nil, loop.ErrClientGone
			}
			return false, nil, perr
		}
	}
	w.taken = true
	if t != nil && w.st.acct {
		_, q, p := t.Totals()
		w.markAt, w.markWait = time.Now(), q+p
	}
	return w.binary, w.buf, nil
}

// record adds d, the on-loop time one message cost, to the figures. Loop-confined.
func (w *Conn) record(d time.Duration) {
	w.fig.onLoop += d
	w.fig.onLoopMax = max(w.fig.onLoopMax, d)
	w.route.recordOnLoop(d)
}

// WriteText queues p as one text message (p must be UTF-8; it is not checked) and, while
// the connection's queued output is over Config.MaxQueuedBytes, parks the calling task
// until the client has read some. Called outside a task (a function run on the loop) or on
// a callback-form connection (UpgradeTo) it never parks: past the bound it closes the
// client as Send does. It returns the connection's end reason once it is closing or ended
// (the message may then not be delivered). Loop-confined.
func (w *Conn) WriteText(p []byte) error { return w.write(httpcodec.WSText, p) }

// WriteBinary is WriteText for a binary message.
func (w *Conn) WriteBinary(p []byte) error { return w.write(httpcodec.WSBinary, p) }

func (w *Conn) write(op httpcodec.WSOpcode, p []byte) error {
	if w.state != stateOpen {
		return w.endErr()
	}
	limit := w.lim.maxQueued
	var t *loop.Task
	if w.h == nil {
		t = w.st.l.Current()
	}
	if t == nil {
		// Nothing to park, or the callback form: the bound holds as for Send.
		if q := w.rc.Queued(); q > 0 && q+httpcodec.WSFrameHeaderLen(len(p))+len(p) > limit {
			w.slowConsumer(false)
			return ErrSlowConsumer
		}
	}
	w.writeData(op, p)
	w.sent(len(p))
	if t == nil || w.rc.Queued() <= limit {
		return nil
	}
	for w.state == stateOpen && w.rc.Queued() > limit {
		// Hand it to the socket now so that the backlog is the true one, and have the
		// writers woken when it is down to half the bound.
		if w.watched {
			w.rc.Flush(-1)
		} else if w.rc.Flush(limit / 2) {
			w.watched = true
		}
		if w.state != stateOpen || w.gone || w.rc.Queued() <= limit {
			break
		}
		d := writePoll // no watch: look again soon
		if w.watched {
			d = writeWatchBound
		}
		if err := w.rc.Wait(d); err != nil && !errors.Is(err, loop.ErrTimeout) {
			if w.state != stateOpen {
				return w.endErr()
			}
			if errors.Is(err, context.Canceled) {
				return loop.ErrClientGone
			}
			return err
		}
	}
	if w.state != stateOpen {
		return w.endErr()
	}
	return nil
}

func (w *Conn) sent(n int) {
	w.fig.msgsOut++
	w.fig.bytesOut += uint64(n)
	w.route.msgsOut++
	w.route.bytesOut += uint64(n)
}

// Send queues the prepared message m and never parks: if the connection's queued output
// would go past Config.MaxQueuedBytes, the client is a slow consumer: the connection is
// closed (1008) and counted, and Send returns ErrSlowConsumer. It returns the end reason
// of a connection that is closing or ended. Loop-confined.
func (w *Conn) Send(m *PreparedMessage) error {
	if w.state != stateOpen {
		return w.endErr()
	}
	if q := w.rc.Queued(); q > 0 && q+len(m.frame) > w.lim.maxQueued {
		w.slowConsumer(false)
		return ErrSlowConsumer
	}
	if d := w.dfl; d != nil && d.sharable(m.n) {
		if z := m.deflated(w.st); z != nil {
			_, _ = w.rc.Write(z)
			d.sentCompressed(m.frame[len(m.frame)-m.n:])
			w.route.zOut++
			w.route.zBytesOut += uint64(wireLen(z))
			w.sent(m.n)
			return nil
		}
	}
	_, _ = w.rc.Write(m.frame)
	w.sent(m.n)
	return nil
}

// slowConsumer closes a client that does not read: a 1008 close frame is queued behind its
// output; the connection then has CloseTimeout to take it (a client that resumes reading
// sees why it was closed) before it is dropped. stalled says the stall timeout found it:
// it read nothing for StallTimeout, and is dropped at once to free its memory.
func (w *Conn) slowConsumer(stalled bool) {
	st := w.st
	st.slowConsumers++
	w.route.slowConsumers++
	if stalled {
		st.stalls++
	}
	if st.slowLog.allow(st.l) {
		st.logger.Warn("ws: client does not read; closing it (1008)", "route", w.route.pattern,
			"remote", w.remote, "queued", w.rc.Queued(), "stalled", stalled, "slow_consumers_total", st.slowConsumers)
	}
	w.fail(httpcodec.WSClosePolicyViolation, "slow consumer", ErrSlowConsumer, false)
	if stalled && !w.gone {
		w.rc.Close(0)
	}
}

// Close starts the close handshake with code (0: none; else a code the RFC lets an
// endpoint send, e.g. 1000, 1001, 1008, 3000-4999) and reason (at most 123 bytes of
// UTF-8), then, called from a task, parks until the client's close frame arrives or
// Config.CloseTimeout passes; then the connection is closed. Closing a closing or closed
// connection returns nil. It returns an error for an invalid code or reason.
// Loop-confined.
func (w *Conn) Close(code uint16, reason string) error {
	if w.state != stateOpen {
		return nil
	}
	out, err := httpcodec.AppendWSClose(w.st.scratch[:0], code, unsafeBytes(reason))
	if err != nil {
		return fmt.Errorf("ws: Conn.Close(%d, %q): %w", code, reason, err)
	}
	_, _ = w.rc.Write(out)
	w.st.scratch = out[:0]
	w.startClosing()
	var t *loop.Task
	if w.h == nil {
		t = w.st.l.Current()
	}
	if t == nil {
		return nil // the sweep enforces CloseTimeout
	}
	deadline := w.closeAt + int64(w.lim.closeAfter)
	for w.state == stateClosing {
		d := time.Duration(deadline - w.st.l.Now().UnixNano())
		if d <= 0 {
			break
		}
		if perr := w.rc.Wait(d); perr != nil && !errors.Is(perr, loop.ErrTimeout) {
			break
		}
	}
	if w.state == stateClosing {
		w.finish(ErrClosed, false) // no answer in time
	}
	return nil
}

// startClosing records that the server's close frame is queued. Loop-confined.
func (w *Conn) startClosing() {
	w.state = stateClosing
	w.closeAt = w.st.l.Now().UnixNano()
	w.watched = false
	w.rc.Wake() // a reader gets ErrClosed once the answer arrives; writers return
}

// OnHandlerReturn runs when the handler that upgraded returns (in its task's last slice):
// a task-form connection still open gets a close frame (1000, or 1011 after a panic) and
// is closed once its output is written; a callback-form one lives on.
func (t *taken) OnHandlerReturn(rc *loop.RawConn, panicked bool) {
	w := t.conn(rc)
	w.running, w.task = false, nil
	if w.h != nil && !panicked {
		// The callback form lives on without the task. Input that arrived while the
		// handler ran, or an end that happened meanwhile, is handled after this slice.
		if w.state == stateDone || w.queueOff < len(w.queue) {
			w.later()
		}
		return
	}
	if w.state == stateOpen {
		code, reason := httpcodec.WSCloseNormal, ""
		if panicked {
			code, reason = httpcodec.WSCloseInternalError, "handler failed"
		}
		w.writeClose(code, reason)
	}
	w.end(ErrClosed)
	w.dropQueue() // nobody reads them any more
	w.queue = nil
	if !w.gone {
		w.rc.Close(w.lim.closeAfter)
	}
}

// OnClose runs when the TCP connection closed (err loop.ErrClientGone) or the server stops
// with it open (loop.ErrServerClosed: a 1001 close frame is still sent).
func (t *taken) OnClose(rc *loop.RawConn, err error) {
	w := t.conn(rc)
	if errors.Is(err, loop.ErrServerClosed) {
		if w.state == stateOpen {
			w.writeClose(httpcodec.WSCloseGoingAway, "server stopping")
		}
		w.gone = true
		w.end(ErrClosed)
		if w.h != nil {
			w.st.runLater() // no further turn: OnClose now
		}
		return
	}
	w.gone = true
	w.end(loop.ErrClientGone)
	w.rd.Reset()
	w.msg = httpcodec.WSMessage{}
	w.partial = 0
	if !w.held {
		w.buf = nil // a held message (and the queued ones) arrived before the end: still read
	}
}

// OnDrain sends the shutdown's 1001 close frame, unless the route keeps its connections
// through the drain (Config.KeepOnDrain).
func (t *taken) OnDrain(rc *loop.RawConn) {
	w := t.conn(rc)
	if w.state != stateOpen || w.lim.keepOnDrain {
		return
	}
	w.writeClose(httpcodec.WSCloseGoingAway, "server shutting down")
	w.startClosing()
}

// OnWritable wakes the writers parked on backpressure.
func (t *taken) OnWritable(rc *loop.RawConn) {
	w := t.conn(rc)
	w.watched = false
	w.rc.Wake()
}

// OnSweep enforces the connection's timeouts (Config.PingInterval, PongTimeout,
// StallTimeout, CloseTimeout).
func (t *taken) OnSweep(rc *loop.RawConn, now time.Time) { t.conn(rc).sweep(now.UnixNano()) }

// sweep enforces w's timeouts: close handshake, stall, keepalive. Loop-confined.
func (w *Conn) sweep(now int64) {
	if w.gone {
		return
	}
	lim := w.lim
	switch w.state {
	case stateClosing:
		if now-w.closeAt >= int64(lim.closeAfter) {
			w.finish(ErrClosed, false)
		}
		return
	case stateDone:
		return
	}
	if w.heard {
		w.heard, w.lastIn = false, now
	}
	if lim.stall > 0 && w.stalled(now, int64(lim.stall)) {
		w.slowConsumer(true)
		return
	}
	w.answerDuePong()
	if now-w.lastIn >= int64(idleRelease) {
		w.releaseIdle()
	}
	if lim.pingInterval <= 0 {
		return
	}
	if w.pingAt != 0 {
		// The ping may be queued behind a backlog the client is still reading (in the
		// server's buffer and the kernel's send queue), so its pong comes late: output
		// the client acknowledged since the last sweep shows it is alive, and the pong
		// timeout restarts. A client that reads nothing acknowledges nothing: the pong
		// timeout (or the stall timeout) still ends it.
		if acked := bytesAcked(w.rc.Fd()); acked != w.pingAck {
			w.pingAt, w.pingAck = now, acked
		}
	}
	switch {
	case w.pingAt != 0 && now-w.pingAt >= int64(lim.pongTimeout):
		w.st.pingTimeouts++
		w.route.pingTimeouts++
		w.finish(ErrPingTimeout, false) // presumed dead: a close frame would not be read
		if w.task != nil {
			w.task.Cancel(ErrPingTimeout)
		}
	case w.pingAt == 0 && now-w.lastIn >= int64(lim.pingInterval):
		w.pingAt, w.pingAck = now, bytesAcked(w.rc.Fd())
		w.writeFrame(httpcodec.WSPing, nil)
	}
}

// stalled tracks the progress of w's queued output and reports whether it made none for
// limit.
func (w *Conn) stalled(now, limit int64) bool {
	out := w.rc.Queued()
	switch {
	case out == 0:
		w.stallSince = 0
	case w.stallSince == 0 || out < w.stallOut:
		w.stallSince, w.stallOut = now, out
	case now-w.stallSince >= limit:
		return true
	default:
		w.stallOut = out
	}
	return false
}

// idleRelease is how long a connection must have received nothing before the sweep gives
// back its empty buffers: an idle player keeps none, a busy one keeps its own.
const idleRelease = time.Second

// releaseIdle drops the buffers an idle connection does not use now: in the task form,
// the message buffer while the reader waits for a message. Loop-confined.
func (w *Conn) releaseIdle() {
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

// Subprotocol returns the subprotocol chosen at the upgrade, or "". Any goroutine.
func (w *Conn) Subprotocol() string { return w.proto }

// RemoteAddr returns the client's address. Any goroutine.
func (w *Conn) RemoteAddr() net.Addr { return w.remote }

// ID returns the connection's id, unique within the process's lifetime. Any goroutine.
func (w *Conn) ID() uint64 { return w.id }

// Done reports whether the connection is closing or ended: no more messages will be read
// or sent. Loop-confined.
func (w *Conn) Done() bool { return w.state != stateOpen }

// Err returns why the connection ended (see ReadMessage), ErrClosed while the server's
// close handshake is in progress, or nil while it is open. Loop-confined.
func (w *Conn) Err() error {
	if w.state == stateOpen {
		return nil
	}
	return w.endErr()
}

// unsafeBytes views s as bytes without copying; the bytes must not be modified.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
