package loop

import (
	"time"

	"github.com/batonrt/baton/internal/httpcodec"
)

// DrainReport says what a graceful shutdown drained. It is filled on the loop and can be
// read with Server.DrainReport once ListenAndServe has returned.
type DrainReport struct {
	InFlight        int    // request handlers running or parked when Shutdown began
	Queued          int    // requests waiting for admission when Shutdown began
	ClosedIdle      int    // idle connections closed when Shutdown began
	RejectedDuring  int    // requests answered 503 while draining or at the final stop
	ForcedTasks     int    // requests still unfinished (running or queued) when the deadline forced the stop
	Refused         uint64 // requests refused with 429 (admission queue full) over the server's life
	DeadlineReached bool   // the Shutdown context ended before the drain finished
	// Connections taken over (Ctx.Takeover, e.g. WebSockets) and open when Shutdown
	// began: closed gracefully (their handler's first RawConn.Close lingered: a
	// WebSocket's close handshake), or forced (closed at once, lost before their handler
	// closed them, or still open when the server stopped).
	TakeoversClosed, TakeoversForced int
}

// drainIdleGrace is how long a connection idle when Shutdown began stays open: a request
// the client sent in that instant is answered (503, Connection: close) instead of meeting
// a closed socket.
const drainIdleGrace = 100 * time.Millisecond

// drainer is the loop's side of a graceful shutdown. Loop-confined.
type drainer struct {
	begun  bool
	report DrainReport
	holds  int // HoldDrain calls not yet released (drainhold.go)
}

// beginDrain starts a graceful shutdown on the loop: it records what is in flight, sets
// the drain signal, runs the OnDrain hooks, then gives idle connections a short grace,
// sends WebSockets their close frame and marks every open connection as one the drain
// waits for. Connections opened from now on are
// answered 503 and closed, and the drain does not wait for them, so clients (or a load
// balancer) reconnecting after their 503 cannot hold the drain open.
func (s *Server) beginDrain() {
	d := &s.drain
	if d.begun {
		return
	}
	d.begun = true
	s.guard.beginDrain() // new connections go elsewhere; what the listener took is answered 503
	d.report.InFlight = s.inflight
	d.report.Queued = len(s.adm.queue)
	// The hooks first (rooms' OnDrain among them): what they send players (a final state,
	// "server restarting") is queued before the WebSockets' close frames below.
	s.drainSig.Resolve(struct{}{}, nil)
	s.hooksMu.Lock()
	hooks := append([]func(time.Time){}, s.onDrain...)
	s.hooksMu.Unlock()
	var deadline time.Time // the Shutdown's deadline; zero when its context has none
	if ctx := s.shutdownContext(); ctx != nil {
		deadline, _ = ctx.Deadline()
	}
	for _, fn := range hooks {
		s.safely(func() { fn(deadline) })
	}
	for _, cs := range s.conns.all {
		cs.beforeDrain = true
		s.conns.beforeDrain++
		// Idle connections: a request already on its way gets 503 within the grace; then
		// the connection closes gracefully (half-close and linger, never a reset). Busy
		// ones: a response written from now on says "Connection: close"; one written
		// before (it said keep-alive) leaves the connection idle with the same grace.
		if !cs.busy() && cs.accepting() && cs.raw == nil && cs.gc.InboundBuffered() == 0 {
			d.report.ClosedIdle++
			s.setIdle(cs)
		}
		if cs.raw != nil {
			s.rawDrain(cs.raw)
		}
	}
	s.checkDrained()
}

// answerUnheard answers cs, a connection that has sent nothing yet, with 503 (Retry-After,
// Connection: close) ahead of its request, and closes it gracefully once written: during a
// drain, a connection the listener took late, or one still silent when its grace ends or
// the server stops, then learns that its request will not run instead of meeting a close
// (or a reset) without a byte. Loop-confined.
func (s *Server) answerUnheard(cs *conn) {
	cs.closeAfterResponse()
	cs.out = appendDrain503(cs.out, s.date.Bytes())
	s.drain.report.RejectedDuring++
}

// answerUnserved answers cs 503 (answerUnheard) when no request of it can run any more
// and it has one the server will never read: it is open, with no request in flight and
// not taken over, and holds unparsed input or has sent nothing yet. It discards that
// input and reports whether it answered; the caller flushes. For a stopping loop (it
// parses no request any more: OnTraffic, finalStop) and for the idle deadline of a
// draining one (sweep), which would otherwise close a connection whose request it never
// read without a byte. Loop-confined.
func (s *Server) answerUnserved(cs *conn) bool {
	if cs.state != connOpen || cs.busy() || cs.raw != nil || (cs.heard && cs.gc.InboundBuffered() == 0) {
		return false
	}
	_, _ = cs.gc.Discard(-1)
	s.answerUnheard(cs)
	return true
}

// drainRetryAfterHeader is the header of the server's own 503s during a drain.
var drainRetryAfterHeader = []httpcodec.Header{
	plainTextHeader[0],
	{Name: []byte("Retry-After"), Value: []byte(drainRetryAfter)},
}

// appendDrain503 appends the 503 a draining server answers a request it will not run with:
// Retry-After (nothing ran, so any client may resend) and Connection: close.
func appendDrain503(dst, date []byte) []byte {
	const body = "503 Service Unavailable\n"
	h := httpcodec.ResponseHead{
		Status:        503,
		Headers:       drainRetryAfterHeader,
		ContentLength: int64(len(body)),
		Close:         true,
		Date:          date,
	}
	dst, _ = httpcodec.AppendResponseHead(dst, &h)
	return append(dst, body...)
}

// checkDrained stops the server once a drain has nothing left: no handler in flight or
// queued and none of the connections open when the drain began (they close gracefully
// after their last responses). Loop-confined.
func (s *Server) checkDrained() {
	if s.drain.begun && s.life.load() == stateDraining && s.inflight == 0 && len(s.adm.queue) == 0 && s.conns.beforeDrain == 0 && s.drain.holds == 0 {
		s.requestStop()
	}
}

// Draining returns a Future resolved when Shutdown begins: a handler or background task may
// Await it with a bound (a long-poll answers early, a tick loop saves its state and returns).
// Safe for concurrent use.
func (s *Server) Draining() *Future[struct{}] { return s.drainSig }

// OnDrain registers fn to run on this loop when Shutdown begins, before the server waits for
// work in flight and before WebSockets get their close frame: tell players (what fn sends
// them is queued ahead of the close), stop accepting matchmaking, stop tick tasks. fn gets
// the deadline of the Shutdown that began the drain (zero when its context has none): what
// it hands to the code it tells to save its state. Hooks run in registration order. fn
// must not block. Safe for concurrent use; functions registered after the drain began do
// not run.
func (l *Loop) OnDrain(fn func(deadline time.Time)) {
	s := l.srv
	s.hooksMu.Lock()
	s.onDrain = append(s.onDrain, fn)
	s.hooksMu.Unlock()
}
