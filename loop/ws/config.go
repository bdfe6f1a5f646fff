package ws

import (
	"fmt"
	"math"
	"time"

	"github.com/batonrt/baton/loop"
)

// Config configures the connections made by one Upgrade or UpgradeTo call: pass the same
// Config on every call of a route (keep it in a variable). Its zero value is ready to use;
// a zero field takes the default its comment gives (the reasons are in docs/websocket.md).
type Config struct {
	// Subprotocols the server speaks, in no particular order: the first of the client's
	// offers (Sec-WebSocket-Protocol, in its order) that is listed is chosen. None
	// chosen is not an error: Conn.Subprotocol then returns "".
	Subprotocols []string
	// CheckOrigin decides whether a request from origin (the Origin header, "" when
	// absent) may connect; false answers 403. It runs in the handler's task. Nil means
	// the same-origin policy: no Origin header, or an Origin whose host equals the
	// request's Host header (ignoring ASCII case).
	CheckOrigin func(c *loop.Ctx, origin string) bool

	// MaxMessageBytes bounds one message read from a client, all its fragments together
	// (and so one frame). A longer one closes the connection with 1009. Default 1 MiB:
	// game and chat messages are bytes to kilobytes; 1 MiB leaves room for a snapshot
	// upload while bounding what one connection can make the server buffer.
	MaxMessageBytes int64

	// MaxQueuedBytes bounds the output queued in the server for one connection. WriteText
	// and WriteBinary park their task while the queue is over it; Send, which never
	// parks, closes the connection with 1008 as a slow consumer instead. Default 256 KiB:
	// seconds of a 20 Hz game state even at several kilobytes a message, and 10,000 stuck
	// players cost at most 2.5 GiB in the worst case.
	MaxQueuedBytes int

	// PingInterval is how long a connection may receive nothing before the server sends a
	// ping. Negative means no pings (and no dead-peer detection). Default 30 s: keeps NAT
	// and proxy mappings (often dropped after 60 s idle) alive.
	PingInterval time.Duration

	// PongTimeout is how long after a ping the server waits for any traffic before it
	// drops the connection (without a close handshake: the peer is presumed dead).
	// Default 15 s: many round trips even on a bad mobile link.
	PongTimeout time.Duration

	// StallTimeout is how long queued output may make no progress before the connection
	// is closed as a slow consumer and its queue freed. Negative means never. Default
	// 10 s: a player whose client has not read for 10 s is no longer in the game.
	StallTimeout time.Duration

	// CloseTimeout bounds the wait for the client's close frame once the server sent its
	// own (Close, end of the handler, shutdown); then the connection is dropped. Default
	// 2 s: a live client answers within one round trip.
	CloseTimeout time.Duration

	// SaturatedLag: an upgrade is refused with 503 and Retry-After while the loop's lag
	// has been over it in this second and the previous one (accounting.Vitals.LagHeld). Negative
	// turns the check off. Default 100 ms, the lag loop/health's /readyz fails on by default:
	// the players already connected keep playing rather than every player lagging.
	SaturatedLag time.Duration

	// Compression turns on permessage-deflate (RFC 7692) for the route: a client that
	// offers it gets it, and its messages of at least CompressionThreshold bytes are sent
	// compressed; the client may compress what it sends. Off by default: compression
	// costs CPU on the loop for every message sent (the sending task's) and received,
	// worth it where bandwidth costs more than CPU (mobile players, JSON state). The
	// figures are in docs/websocket.md.
	Compression bool

	// CompressionThreshold: a message shorter than this many bytes is sent uncompressed
	// (deflate saves little on it and costs a call). Negative compresses every message.
	// Default 128 bytes.
	CompressionThreshold int

	// CompressionContextTakeover lets each side compress a message with reference to the
	// messages it sent before (RFC 7692's context takeover), unless the client's offer
	// refuses it: small messages that repeat the last ones (a game state at 20 Hz)
	// compress far better, at a memory cost per connection (the server keeps the last
	// 8 KiB it sent compressed and the last 32 KiB it received compressed). Off by default:
	// every message is compressed on its own (server_no_context_takeover and
	// client_no_context_takeover are negotiated) and an idle connection keeps nothing.
	// PreparedMessage frames are compressed once, without context, either way.
	CompressionContextTakeover bool

	// SaturatedUtilisation: an upgrade is refused with 503 and Retry-After while the loop's
	// utilisation over the last ten seconds is over it. Negative turns the check off; at
	// most 1. Default 0.95 (as /readyz by default).
	SaturatedUtilisation float64

	// KeepOnDrain: when the server begins to drain, the route's connections are not
	// closed with 1001; the handler decides when each ends, and the drain waits for them
	// (its deadline closes the rest, 1001). For connections that follow something outliving
	// this server elsewhere: a room member served by room.Play is closed with
	// room.CloseMoved (4001) naming the node its room was handed to, or with 1000 when the
	// room ends, so its player goes straight to the new owner (docs/client-protocol.md,
	// docs/handoff.md). Off by default: every WebSocket gets 1001 at once.
	KeepOnDrain bool
}

// Validate reports the first invalid field of c, naming it and its value. The zero Config
// is valid. Safe for concurrent use.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxMessageBytes", c.MaxMessageBytes},
		{"MaxQueuedBytes", int64(c.MaxQueuedBytes)},
		{"PongTimeout", int64(c.PongTimeout)},
		{"CloseTimeout", int64(c.CloseTimeout)},
	} {
		if f.v < 0 {
			return fmt.Errorf("ws: Config.%s must not be negative, got %d", f.name, f.v)
		}
	}
	if math.IsNaN(c.SaturatedUtilisation) || c.SaturatedUtilisation > 1 {
		return fmt.Errorf("ws: Config.SaturatedUtilisation must be at most 1, got %v", c.SaturatedUtilisation)
	}
	return nil
}

// limits are a Config's figures with the defaults filled in; connections of the same
// figures share one copy (loopState.limitsOf).
type limits struct {
	maxMessage                                   int64
	maxQueued                                    int
	pingInterval, pongTimeout, stall, closeAfter time.Duration
	satLag                                       time.Duration
	satUtil                                      float64
	compress, takeover                           bool
	compressThreshold                            int
	keepOnDrain                                  bool
}

// limitsOf returns c's figures with every zero field replaced by its default.
func limitsOf(c *Config) limits {
	l := limits{maxMessage: c.MaxMessageBytes, maxQueued: c.MaxQueuedBytes, pingInterval: c.PingInterval,
		pongTimeout: c.PongTimeout, stall: c.StallTimeout, closeAfter: c.CloseTimeout,
		satLag: c.SaturatedLag, satUtil: c.SaturatedUtilisation,
		compress: c.Compression, takeover: c.CompressionContextTakeover, compressThreshold: c.CompressionThreshold,
		keepOnDrain: c.KeepOnDrain}
	if l.maxMessage == 0 {
		l.maxMessage = 1 << 20
	}
	if l.maxQueued == 0 {
		l.maxQueued = 256 << 10
	}
	if l.pingInterval == 0 {
		l.pingInterval = 30 * time.Second
	}
	if l.pongTimeout == 0 {
		l.pongTimeout = 15 * time.Second
	}
	if l.stall == 0 {
		l.stall = 10 * time.Second
	}
	if l.closeAfter == 0 {
		l.closeAfter = 2 * time.Second
	}
	if l.satLag == 0 {
		l.satLag = 100 * time.Millisecond
	}
	switch {
	case l.compressThreshold == 0:
		l.compressThreshold = 128
	case l.compressThreshold < 0:
		l.compressThreshold = 0
	}
	if l.satUtil == 0 {
		l.satUtil = 0.95
	}
	return l
}

// sweepEvery is how often connections of these limits need their timeouts looked at: a
// quarter of the shortest, within [10 ms, 500 ms].
func (l *limits) sweepEvery() time.Duration {
	d := 500 * time.Millisecond
	for _, t := range []time.Duration{l.pingInterval, l.pongTimeout, l.stall, l.closeAfter} {
		if t > 0 && t/4 < d {
			d = t / 4
		}
	}
	return max(d, 10*time.Millisecond)
}
