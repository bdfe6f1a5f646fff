package ws

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
)

// TestWSKeepOnDrain: a route with Config.KeepOnDrain keeps its connections open when the
// drain begins (a connection of an ordinary route gets its 1001 then): its handler still
// writes, then closes with a code of its own (a room member whose room moved: 4001), and
// the drain waits for it and reports it closed, none forced.
func TestWSKeepOnDrain(t *testing.T) {
	s := newServer(t, loop.Config{}, Config{})
	moved := loop.NewFuture[struct{}](s.Loop(0))
	s.Handle("GET /plain", func(c *loop.Ctx) {
		conn, err := Upgrade(c, Config{})
		if err != nil {
			return
		}
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	})
	s.Handle("GET /keep", func(c *loop.Ctx) {
		conn, err := Upgrade(c, Config{KeepOnDrain: true})
		if err != nil {
			return
		}
		if _, err := moved.Await(c, 0); err != nil {
			return
		}
		_ = conn.WriteText([]byte("the room moved"))
		_ = conn.Close(4001, `{"room":"r"}`)
	})
	errc := serveInBackground(t, s)
	addr := s.Addr().String()
	plain := wsDial(t, addr, "/plain", nil)
	keep := wsDial(t, addr, "/keep", nil)
	require.Eventually(t, func() bool { return wsStats(t, s).Open == 2 }, 10*time.Second, time.Millisecond)

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	_ = plain.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err := plain.ReadMessage()
	var ce *websocket.CloseError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, 1001, ce.Code, "the ordinary route: 1001 when the drain begins")

	// The drain has begun (the 1001 was its): the kept connection is still open.
	moved.Resolve(struct{}{}, nil)
	_ = keep.SetReadDeadline(time.Now().Add(10 * time.Second))
	kind, msg, err := keep.ReadMessage()
	require.NoError(t, err, "the kept connection was closed by the drain")
	require.Equal(t, websocket.TextMessage, kind)
	require.Equal(t, "the room moved", string(msg))
	_, _, err = keep.ReadMessage()
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, 4001, ce.Code)
	require.Equal(t, `{"room":"r"}`, ce.Text)

	require.NoError(t, <-shut)
	require.ErrorIs(t, <-errc, loop.ErrServerClosed)
	rep := s.DrainReport()
	require.Equal(t, 2, rep.TakeoversClosed)
	require.Zero(t, rep.TakeoversForced)
	require.False(t, rep.DeadlineReached)
}
