package loop

import (
	"fmt"
	"math"
	"time"
)

// Defaults of WSConfig, used where a field is zero. The reasons are in docs/websocket.md.
const (
	// DefaultWSMaxMessageBytes bounds one message read from a client (all its fragments):
	// game and chat messages are bytes to kilobytes; 1 MiB leaves room for a snapshot
	// upload while bounding what one connection can make the server buffer.
	DefaultWSMaxMessageBytes = 1 << 20

	// DefaultWSMaxQueuedBytes bounds the output queued for one WebSocket in the server
	// (beyond what the kernel's socket buffer holds): 256 KiB is seconds of a 20 Hz game
	// state even at several kilobytes a message, and 10,000 stuck players cost at most
	// 2.5 GiB in the worst case.
	DefaultWSMaxQueuedBytes = 256 << 10

	// DefaultWSPingInterval is how long a connection may be silent before the server pings
	// it: 30 s keeps NAT and proxy mappings (often dropped after 60 s idle) alive.
	DefaultWSPingInterval = 30 * time.Second

	// DefaultWSPongTimeout is how long the server waits for any traffic after a ping before
	// it drops the connection as dead: 15 s is many round trips even on a bad mobile link.
	DefaultWSPongTimeout = 15 * time.Second

	// DefaultWSStallTimeout is how long queued output may make no progress (the client
	// reads nothing) before the connection is closed as a slow consumer: a player whose
	// client has not read for 10 s is no longer in the game.
	DefaultWSStallTimeout = 10 * time.Second

	// DefaultWSCloseTimeout bounds the wait for the client's close frame after the server
	// sent its own (Close, shutdown): a live client answers within one round trip.
	DefaultWSCloseTimeout = 2 * time.Second

	// DefaultWSSaturatedLag refuses upgrades while the loop runs due work more than 100 ms
	// late (the lag loop/health's /readyz fails on by default): the players already
	// connected keep playing rather than every player lagging.
	DefaultWSSaturatedLag = 100 * time.Millisecond

	// DefaultWSSaturatedUtilisation refuses upgrades while the loop was busy more than 95%
	// of the last ten seconds (as /readyz by default).
	DefaultWSSaturatedUtilisation = 0.95
)

// WSConfig configures the WebSocket connections made with Ctx.Upgrade. Its zero value is
// ready to use; each field documents its default.
type WSConfig struct {
	// MaxMessageBytes bounds one message read from a client, all its fragments together
	// (and so one frame). A longer one closes the connection with 1009. Zero means
	// DefaultWSMaxMessageBytes.
	MaxMessageBytes int64

	// MaxQueuedBytes bounds the output queued in the server for one connection. WriteText
	// and WriteBinary park their task while the queue is over it; Send, which never
	// parks, closes the connection with 1008 as a slow consumer instead. Zero means
	// DefaultWSMaxQueuedBytes.
	MaxQueuedBytes int

	// PingInterval is how long a connection may receive nothing before the server sends a
	// ping. Zero means DefaultWSPingInterval; negative means no pings (and no dead-peer
	// detection).
	PingInterval time.Duration

	// PongTimeout is how long after a ping the server waits for any traffic before it
	// drops the connection (without a close handshake: the peer is presumed dead). Zero
	// means DefaultWSPongTimeout.
	PongTimeout time.Duration

	// StallTimeout is how long queued output may make no progress before the connection
	// is closed as a slow consumer and its queue freed. Zero means DefaultWSStallTimeout;
	// negative means never.
	StallTimeout time.Duration

	// CloseTimeout bounds the wait for the client's close frame once the server sent its
	// own (Close, end of the handler, shutdown); then the connection is dropped. Zero
	// means DefaultWSCloseTimeout.
	CloseTimeout time.Duration

	// SaturatedLag: an upgrade is refused with 503 and Retry-After while the loop's lag
	// (Loop.Vitals) has been over it in this second and the previous one. Zero means
	// DefaultWSSaturatedLag; negative turns the check off.
	SaturatedLag time.Duration

	// SaturatedUtilisation: an upgrade is refused with 503 and Retry-After while the loop's
	// utilisation over the last ten seconds is over it. Zero means
	// DefaultWSSaturatedUtilisation; negative turns the check off; at most 1.
	SaturatedUtilisation float64
}

// withDefaults returns w with every zero field replaced by its default.
func (w WSConfig) withDefaults() WSConfig {
	if w.MaxMessageBytes == 0 {
		w.MaxMessageBytes = DefaultWSMaxMessageBytes
	}
	if w.MaxQueuedBytes == 0 {
		w.MaxQueuedBytes = DefaultWSMaxQueuedBytes
	}
	if w.PingInterval == 0 {
		w.PingInterval = DefaultWSPingInterval
	}
	if w.PongTimeout == 0 {
		w.PongTimeout = DefaultWSPongTimeout
	}
	if w.StallTimeout == 0 {
		w.StallTimeout = DefaultWSStallTimeout
	}
	if w.CloseTimeout == 0 {
		w.CloseTimeout = DefaultWSCloseTimeout
	}
	if w.SaturatedLag == 0 {
		w.SaturatedLag = DefaultWSSaturatedLag
	}
	if w.SaturatedUtilisation == 0 {
		w.SaturatedUtilisation = DefaultWSSaturatedUtilisation
	}
	return w
}

// Validate reports the first invalid field of w, naming it as Config.WebSocket.X. The zero
// WSConfig is valid. Safe for concurrent use.
func (w WSConfig) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxMessageBytes", w.MaxMessageBytes},
		{"MaxQueuedBytes", int64(w.MaxQueuedBytes)},
		{"PongTimeout", int64(w.PongTimeout)},
		{"CloseTimeout", int64(w.CloseTimeout)},
	} {
		if f.v < 0 {
			return fmt.Errorf("loop: Config.WebSocket.%s must not be negative, got %d", f.name, f.v)
		}
	}
	if math.IsNaN(w.SaturatedUtilisation) || w.SaturatedUtilisation > 1 {
		return fmt.Errorf("loop: Config.WebSocket.SaturatedUtilisation must be at most 1, got %v", w.SaturatedUtilisation)
	}
	return nil
}
