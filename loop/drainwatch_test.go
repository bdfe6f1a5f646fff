package loop

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// withoutDrainWatch makes s's drain watch unavailable, as it is off Linux (a watch already
// started that has no poller). Call it before the server starts.
func withoutDrainWatch(s *Server) { s.drains.started = true }

// Without a drain watch, a stream parked on backpressure is woken by its own park timeout
// (streamPoll) and finishes once the client reads, in both modes.
func TestDrainWatchUnavailableStream(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := streamBackpressure(t, m, withoutDrainWatch)
			var poller *drainPoller
			watched := -1
			onLoop(t, s, func() { poller, watched = s.drainPoll.Load(), len(s.drains.entries) })
			require.Nil(t, poller, "a drain poller was created")
			require.Zero(t, watched)
		})
	}
}

// Without a drain watch, a WebSocket writer parked on backpressure polls without piling up
// registrations (WSConn.writers stays bounded however long it waits) and resumes once the
// client reads.
func TestDrainWatchUnavailableWSWriter(t *testing.T) {
	const msgBytes = 4 << 10
	var (
		ctx  *Ctx    // loop-confined
		ws   *WSConn // loop-confined
		done = make(chan error, 1)
	)
	s, addr := startServer(t, Config{WebSocket: WSConfig{MaxQueuedBytes: 64 << 10}}, func(s *Server) {
		withoutDrainWatch(s)
		s.Handle("GET /ws", func(c *Ctx) {
			w, err := c.Upgrade(UpgradeOptions{})
			if err == nil {
				err = c.conn.gc.SetWriteBuffer(64 << 10)
			}
			if err == nil {
				ctx, ws = c, w
				p := make([]byte, msgBytes)
				for err == nil { // until the client goes
					err = w.WriteBinary(p)
				}
			}
			done <- err
		})
	})
	d := &websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		NetDialContext: func(_ context.Context, network, a string) (net.Conn, error) {
			nc, err := net.Dial(network, a)
			if err == nil {
				err = nc.(*net.TCPConn).SetReadBuffer(64 << 10)
			}
			return nc, err
		},
	}
	conn := wsDial(t, addr, "/ws", d)
	// The client reads nothing until the writer has spent a while parked: with a 1 ms poll,
	// dozens of parks.
	most := 0
	require.Eventually(t, func() bool {
		var parked time.Duration
		onLoop(t, s, func() {
			if ws != nil {
				most = max(most, len(ws.writers))
				parked = ctx.Stats().Parked.Write
			}
		})
		return parked >= 100*time.Millisecond
	}, 20*time.Second, 5*time.Millisecond)
	require.LessOrEqual(t, most, 1, "parked writers piled up")
	for n := 0; n < 512; n++ { // 2 MiB: far more than the queue and the socket buffers
		typ, p, err := conn.ReadMessage()
		require.NoError(t, err, "after %d messages", n)
		require.Equal(t, websocket.BinaryMessage, typ)
		require.Len(t, p, msgBytes)
	}
	var poller *drainPoller
	onLoop(t, s, func() { poller = s.drainPoll.Load() })
	require.Nil(t, poller, "a drain poller was created")
	require.NoError(t, conn.Close())
	require.ErrorIs(t, recvErr(t, done), ErrClientGone)
}
