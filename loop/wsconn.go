package loop

import (
	"net"
)

// WSConn is one WebSocket connection, made by Ctx.Upgrade. It is loop-confined: call its
// methods from tasks on the loop (the handler's, or another such as a room's tick) or from
// functions run on the loop, never from other goroutines. It stays valid after the
// connection closed (its methods then return the reason), so a room may hold it.
type WSConn struct {
	srv *Server
	cs  *conn
	id  uint64
	// TODO(ws): implementation.
}

// ReadMessage parks the calling task until a whole message has arrived and returns it:
// binary false for a text message (valid UTF-8). data is valid until the next
// ReadMessage. Only one task may read at a time. Once the connection ends it returns why:
// *CloseError when the client closed it, *httpcodec.WSError when the client broke the
// protocol (the server closed with its code), ErrClientGone when the connection was lost,
// ErrSlowConsumer, ErrPingTimeout, ErrWSClosed, or the task's cancellation error.
func (w *WSConn) ReadMessage() (binary bool, data []byte, err error) {
	panic("TODO")
}

// WriteText queues p as one text message (p must be UTF-8; it is not checked) and, while
// the connection's queued output is over Config.WebSocket.MaxQueuedBytes, parks the
// calling task until the client has read some. Called outside a task it never parks.
// It returns the connection's end reason once it has ended.
func (w *WSConn) WriteText(p []byte) error { panic("TODO") }

// WriteBinary is WriteText for a binary message.
func (w *WSConn) WriteBinary(p []byte) error { panic("TODO") }

// Send queues the prepared message m and never parks: if the connection's queued output
// would go past Config.WebSocket.MaxQueuedBytes, the client is a slow consumer: the
// connection is closed (1008) and counted, and Send returns ErrSlowConsumer. It returns
// the end reason of a connection that has ended.
func (w *WSConn) Send(m *PreparedMessage) error { panic("TODO") }

// Close starts the close handshake with code (0: none; else a code the RFC lets an
// endpoint send, e.g. 1000, 1001, 1008, 3000-4999) and reason (at most 123 bytes of
// UTF-8), then, called from a task, parks until the client's close frame arrives or
// Config.WebSocket.CloseTimeout passes; then the connection is closed. Closing a closed
// connection returns nil. It returns an error for an invalid code or reason.
func (w *WSConn) Close(code uint16, reason string) error { panic("TODO") }

// Subprotocol returns the subprotocol chosen at the upgrade, or "".
func (w *WSConn) Subprotocol() string { panic("TODO") }

// RemoteAddr returns the client's address.
func (w *WSConn) RemoteAddr() net.Addr { panic("TODO") }

// ID returns the connection's id, unique within the server's lifetime. Any goroutine.
func (w *WSConn) ID() uint64 { return w.id }

// Done reports whether the connection has ended (closed, or closing: no more messages
// will be read or sent).
func (w *WSConn) Done() bool { panic("TODO") }

// Err returns why the connection ended (see ReadMessage), or nil while it is open.
func (w *WSConn) Err() error { panic("TODO") }

// Upgrade turns the request into a WebSocket connection: it checks the request
// (method, headers, version, key; then opts.CheckOrigin), picks a subprotocol from
// opts.Subprotocols and answers 101. The handler's task then continues as the
// connection's task: read messages in a loop; when the handler returns, the connection is
// closed (with 1000 unless it was closed otherwise). On failure Upgrade answers the
// request itself (400 a malformed upgrade, 403 a refused origin, 405 not GET, 426 a
// wrong version, 501 in multi-thread mode) and returns an error saying why. Call it from
// the handler, before writing anything.
func (c *Ctx) Upgrade(opts UpgradeOptions) (*WSConn, error) { panic("TODO") }
