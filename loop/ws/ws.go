// Package ws serves WebSocket connections (RFC 6455) from baton's loop. Upgrade turns a
// request into a connection whose handler task reads and writes it; UpgradeTo hands it to
// callbacks instead (Handler), holding no task while idle. NewPrepared and Broadcast send
// one encoded frame to many connections for the cost of a copy each. Each connection has
// bounded input and output (a client that does not read is closed as a slow consumer),
// keepalive pings, a close handshake with a timeout, and a 1001 close frame when the server
// drains. Config.Compression turns on permessage-deflate (RFC 7692) per route. Its
// figures are the stats section "websockets" (the page /debug/baton/websockets,
// Snapshot.Sections["websockets"] as a Stats, and a dashboard panel).
//
// A connection is loop-confined: its methods are called from tasks of its loop (the
// handler's, or another such as a room's tick) or functions run on the loop. WebSocket
// needs handlers on the loop: in multi-thread mode (loop.Config.MultiThread) Upgrade
// answers 501 (docs/concurrency.md).
//
// The package is a client of package loop's exported API and its takeover seam
// (loop.Ctx.Takeover, loop.RawHandler): it is built as gorilla/websocket is on
// net/http's Hijacker (docs/websocket.md).
package ws

import (
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/batonrt/baton/internal/httpcodec"
)

// Errors of WebSocket connections.
var (
	// ErrSlowConsumer is returned by Send (and by the reads and writes of a connection
	// closed that way) when the client did not read its output: its queue went past
	// Config.MaxQueuedBytes, or made no progress for Config.StallTimeout. The connection
	// was closed with 1008.
	ErrSlowConsumer = errors.New("ws: client too slow: closed (1008)")
	// ErrClosed is returned by the reads and writes of a connection the server closed
	// (Close, the handler returned, shutdown).
	ErrClosed = errors.New("ws: connection closed")
	// ErrPingTimeout is returned by the reads and writes of a connection dropped because
	// the client answered no ping within Config.PongTimeout.
	ErrPingTimeout = errors.New("ws: client answered no ping: dropped")
	// ErrMultiThread is returned by Upgrade when the handler does not run on the loop
	// (loop.Config.MultiThread); the client gets 501.
	ErrMultiThread = errors.New("ws: WebSocket needs handlers on the loop (single-thread mode; loop.Config.MultiThread is set)")
	// ErrCallbackForm is returned by ReadMessage on a connection made with UpgradeTo: its
	// messages go to Handler.OnMessage.
	ErrCallbackForm = errors.New("ws: ReadMessage on a callback-form connection (UpgradeTo): messages go to OnMessage")
)

// CloseError is returned by ReadMessage once the client closed the connection with a
// close frame: Code is its status code (1005 when it sent none) and Reason its text.
// The server has answered with its own close frame.
type CloseError struct {
	Code   uint16
	Reason string
}

// Error returns e.g. "ws: closed by the client: 1000 bye".
func (e *CloseError) Error() string {
	return "ws: closed by the client: " + strconv.Itoa(int(e.Code)) + " " + e.Reason
}

// PreparedMessage is a WebSocket message encoded once as a server frame, to be sent to
// many connections (Send, Broadcast) for the cost of a copy each. It is immutable: share
// it freely; safe for concurrent use.
type PreparedMessage struct {
	frame  []byte
	binary bool
	n      int // payload length

	// z is the compressed frame (permessage-deflate), made by the first Send to a
	// connection that negotiated it: empty when compressing does not pay. Made without
	// context, it is valid on every such connection. Racing loops may both make it; one
	// wins, and no loop waits for another.
	z atomic.Pointer[[]byte]
}

// deflated returns m's compressed frame, or nil when compressing does not make it
// shorter, made with st's compressor. Safe for concurrent use; st is the caller's loop's.
func (m *PreparedMessage) deflated(st *loopState) []byte {
	if z := m.z.Load(); z != nil {
		return *z
	}
	op := httpcodec.WSText
	if m.binary {
		op = httpcodec.WSBinary
	}
	z, ok := st.deflateFrame(nil, op, m.frame[len(m.frame)-m.n:], nil, deflateWindow)
	if !ok {
		z = nil
	}
	m.z.CompareAndSwap(nil, &z)
	return *m.z.Load()
}

// NewPrepared encodes p as one text (binary false: p must be UTF-8, unchecked) or binary
// message. p is copied. Safe for concurrent use.
func NewPrepared(binary bool, p []byte) *PreparedMessage {
	op := httpcodec.WSText
	if binary {
		op = httpcodec.WSBinary
	}
	m, buf := newPrepared(httpcodec.WSFrameHeaderLen(len(p)) + len(p))
	m.frame, _ = httpcodec.AppendWSFrame(buf, op, true, p)
	m.binary, m.n = binary, len(p)
	return m
}

// newPrepared returns an empty PreparedMessage and a buffer of capacity at least size for
// its frame. A small frame shares the message's allocation: a room that prepares its state
// every tick then allocates once per tick, not twice. The sizes fill the allocator's size
// classes (176, 512 and 1,024 bytes with the message's own 48).
func newPrepared(size int) (*PreparedMessage, []byte) {
	switch {
	case size <= 128:
		v := new(struct {
			m   PreparedMessage
			buf [128]byte
		})
		return &v.m, v.buf[:0]
	case size <= 464:
		v := new(struct {
			m   PreparedMessage
			buf [464]byte
		})
		return &v.m, v.buf[:0]
	case size <= 976:
		v := new(struct {
			m   PreparedMessage
			buf [976]byte
		})
		return &v.m, v.buf[:0]
	}
	return new(PreparedMessage), make([]byte, 0, size)
}

// Len returns the payload length of the message. Safe for concurrent use.
func (m *PreparedMessage) Len() int { return m.n }

// Binary reports whether the message is binary (else text). Safe for concurrent use.
func (m *PreparedMessage) Binary() bool { return m.binary }

// Broadcast sends m to every connection in conns with Send and returns how many took it;
// the others are closed or were closed already (a slow consumer is closed and counted);
// nil entries are skipped. It never parks. Loop-confined: call it from a task or a
// function on the loop of the connections.
func Broadcast(m *PreparedMessage, conns []*Conn) (sent int) {
	for _, w := range conns {
		if w != nil && w.Send(m) == nil {
			sent++
		}
	}
	return sent
}
