package loop

import (
	"errors"
	"strconv"

	"github.com/batonrt/baton/internal/httpcodec"
)

// Errors of WebSocket connections.
var (
	// ErrSlowConsumer is returned by Send (and by the reads and writes of a connection
	// closed that way) when the client did not read its output: its queue went past
	// Config.WebSocket.MaxQueuedBytes, or made no progress for StallTimeout. The
	// connection was closed with 1008 and its queue freed.
	ErrSlowConsumer = errors.New("loop: websocket client too slow: closed (1008)")
	// ErrWSClosed is returned by the reads and writes of a connection the server closed
	// (Close, the handler returned, shutdown).
	ErrWSClosed = errors.New("loop: websocket closed")
	// ErrPingTimeout is returned by the reads and writes of a connection dropped because
	// the client answered no ping within Config.WebSocket.PongTimeout.
	ErrPingTimeout = errors.New("loop: websocket client answered no ping: dropped")
	// ErrWSMultiThread is returned by Upgrade in multi-thread mode (Config.MultiThread),
	// which does not support WebSockets; the client gets 501.
	ErrWSMultiThread = errors.New("loop: WebSocket needs single-thread mode (Config.MultiThread is set)")
)

// CloseError is returned by ReadMessage once the client closed the connection with a
// close frame: Code is its status code (1005 when it sent none) and Reason its text.
// The server has answered with its own close frame.
type CloseError struct {
	Code   uint16
	Reason string
}

// Error returns e.g. "loop: websocket closed by the client: 1000 bye".
func (e *CloseError) Error() string {
	return "loop: websocket closed by the client: " + strconv.Itoa(int(e.Code)) + " " + e.Reason
}

// UpgradeOptions says which WebSocket upgrades Ctx.Upgrade accepts.
type UpgradeOptions struct {
	// Subprotocols the server speaks, in no particular order: the first of the client's
	// offers (Sec-WebSocket-Protocol, in its order) that is listed is chosen. None
	// chosen is not an error: Subprotocol then returns "".
	Subprotocols []string
	// CheckOrigin decides whether a request from origin (the Origin header, "" when
	// absent) may connect; false answers 403. It runs in the handler's task. Nil means
	// the same-origin policy: no Origin header, or an Origin whose host equals the
	// request's Host header (ignoring ASCII case).
	CheckOrigin func(c *Ctx, origin string) bool
}

// PreparedMessage is a WebSocket message encoded once as a server frame, to be sent to
// many connections (Send, Broadcast) for the cost of a copy each. It is immutable: share
// it freely; safe for concurrent use.
type PreparedMessage struct {
	frame  []byte
	binary bool
	n      int // payload length
}

// NewPrepared encodes p as one text (binary false: p must be UTF-8, unchecked) or binary
// message. p is copied. Safe for concurrent use.
func NewPrepared(binary bool, p []byte) *PreparedMessage {
	op := httpcodec.WSText
	if binary {
		op = httpcodec.WSBinary
	}
	frame, _ := httpcodec.AppendWSFrame(make([]byte, 0, httpcodec.WSFrameHeaderLen(len(p))+len(p)), op, true, p)
	return &PreparedMessage{frame: frame, binary: binary, n: len(p)}
}

// Len returns the payload length of the message. Safe for concurrent use.
func (m *PreparedMessage) Len() int { return m.n }

// Binary reports whether the message is binary (else text). Safe for concurrent use.
func (m *PreparedMessage) Binary() bool { return m.binary }

// Broadcast sends m to every connection in conns with Send and returns how many took it;
// the others are closed or were closed already (a slow consumer is closed and counted);
// nil entries are skipped.
// It never parks. Loop-confined: call it from a task or a function on the loop.
func Broadcast(m *PreparedMessage, conns []*WSConn) (sent int) {
	for _, w := range conns {
		if w != nil && w.Send(m) == nil {
			sent++
		}
	}
	return sent
}
