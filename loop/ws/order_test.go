package ws

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestWSWriteOrderAcrossPartialWrites: broadcast output stays in order across short
// writes and gnet's buffer. The client does not read until the server has queued far more
// than the socket takes (small socket buffers make the writes short), then the server
// sends more, in batches, while the client reads: each batch is written straight to the
// socket (gnet's buffer empty) or queued behind gnet's buffer, and every message arrives
// once, in sequence, intact.
func TestWSWriteOrderAcrossPartialWrites(t *testing.T) {
	const size, first, later = 8 << 10, 64, 64
	var room []*Conn
	joined := make(chan struct{}, 1)
	s, addr := startWS(t, loop.Config{}, Config{MaxQueuedBytes: 64 << 20}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			w, err := Upgrade(c, opts(c, Config{}))
			if err != nil {
				return
			}
			room = append(room, w)
			joined <- struct{}{}
			for {
				if _, _, err := w.ReadMessage(); err != nil {
					return
				}
			}
		})
	})
	d := &websocket.Dialer{HandshakeTimeout: 10 * time.Second, NetDialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, a)
		if err == nil {
			_ = c.(*net.TCPConn).SetReadBuffer(32 << 10)
		}
		return c, err
	}}
	conn := wsDial(t, addr, "/ws", d)
	<-joined
	onLoop(t, s, func() { // a small send buffer too, so that the socket fills soon
		require.NoError(t, unix.SetsockoptInt(room[0].rc.Fd(), unix.SOL_SOCKET, unix.SO_SNDBUF, 16<<10))
	})
	msg := func(seq int) *PreparedMessage {
		p := make([]byte, size)
		for i := range p {
			p[i] = byte(seq + i)
		}
		binary.LittleEndian.PutUint32(p, uint32(seq))
		return NewPrepared(true, p)
	}
	send := func(from, n int) {
		for seq := from; seq < from+n; seq += 16 { // batches: one write per batch
			onLoop(t, s, func() {
				for k := seq; k < min(seq+16, from+n); k++ {
					require.Equal(t, 1, Broadcast(msg(k), room))
				}
			})
		}
	}
	send(0, first) // 512 KiB queued while the client reads nothing
	var backlog int
	onLoop(t, s, func() { backlog = room[0].rc.Queued() })
	require.Positive(t, backlog, "the socket took everything: the test did not reach gnet's buffer")
	done := make(chan error, 1)
	go func() {
		for seq := range first + later {
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			kind, p, err := conn.ReadMessage()
			if err != nil {
				done <- err
				return
			}
			want := msg(seq).frame
			if kind != websocket.BinaryMessage || len(p) != size || string(p) != string(want[len(want)-size:]) {
				done <- io.ErrUnexpectedEOF
				return
			}
		}
		done <- nil
	}()
	send(first, later) // to the socket while gnet is empty, behind gnet's buffer otherwise
	require.NoError(t, <-done, "messages lost, duplicated or out of order")
	var after int
	onLoop(t, s, func() { after = room[0].rc.Queued() })
	assert.Zero(t, after)
}
