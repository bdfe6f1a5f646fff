package ws

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"golang.org/x/sys/unix"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// slowConn reads at most chunk bytes per Read and pauses after each: a client that is alive
// and reading, just slowly.
type slowConn struct {
	net.Conn
	chunk int
	pause time.Duration
}

func (c *slowConn) Read(p []byte) (int, error) {
	if len(p) > c.chunk {
		p = p[:c.chunk]
	}
	n, err := c.Conn.Read(p)
	time.Sleep(c.pause)
	return n, err
}

// TestWSPingBehindBacklogSlowReader: the keepalive ping is queued behind a backlog a slow
// client is still reading, so each pong comes back long after PongTimeout; the output the
// client keeps taking shows it is alive, and the connection stays open.
func TestWSPingBehindBacklogSlowReader(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the output a client takes is read from TCP_INFO, on Linux only (wsacked_other.go)")
	}
	const (
		msgBytes = 4 << 10
		pong     = 500 * time.Millisecond
	)
	wrote := make(chan error, 1)
	s, addr := startWS(t, loop.Config{}, Config{
		PingInterval: 20 * time.Millisecond, PongTimeout: pong, MaxQueuedBytes: 6 << 20},
		func(s *loop.Server) {
			s.Handle("GET /ws", func(c *loop.Ctx) {
				w, err := Upgrade(c, opts(c, Config{}))
				if err == nil {
					// A fixed send buffer: the kernel's autotuning would queue megabytes
					// ahead of each ping, and the test would take seconds a ping.
					err = unix.SetsockoptInt(w.rc.Fd(), unix.SOL_SOCKET, unix.SO_SNDBUF, 64<<10)
				}
				if err == nil {
					p := make([]byte, msgBytes)
					for err == nil { // until the client goes
						err = w.WriteBinary(p)
					}
				}
				wrote <- err
			})
		})
	d := &websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		NetDialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, a)
			if err != nil {
				return nil, err
			}
			if err = nc.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
				return nil, err
			}
			return &slowConn{Conn: nc, chunk: 4 << 10, pause: time.Millisecond}, nil
		},
	}
	conn := wsDial(t, addr, "/ws", d)
	var pings []time.Duration
	start := time.Now()
	conn.SetPingHandler(func(data string) error {
		pings = append(pings, time.Since(start))
		return conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(5*time.Second))
	})
	n := 0
	for len(pings) < 2 {
		typ, p, err := conn.ReadMessage()
		require.NoError(t, err, "after %d messages, pings at %v", n, pings)
		require.Equal(t, websocket.BinaryMessage, typ)
		require.Len(t, p, msgBytes)
		n++
	}
	// Each ping waited behind at least half of MaxQueuedBytes, read at most 4 KiB a
	// millisecond: longer than PongTimeout, so each pong came late.
	for i := 1; i < len(pings); i++ {
		require.Greater(t, pings[i]-pings[i-1], pong, "pings at %v", pings)
	}
	st := wsStats(t, s)
	require.Zero(t, st.PingTimeouts)
	require.Equal(t, 1, st.Open)
	require.NoError(t, conn.Close())
	require.ErrorIs(t, recvErr(t, wrote), loop.ErrClientGone)
}
