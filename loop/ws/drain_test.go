package ws

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDrainHooksSpeakBeforeWebSocketsClose: what an OnDrain hook sends the players (the
// match's final state) reaches each of them before the server's 1001 close frame, which
// follows it. Twelve players over real WebSockets (gorilla/websocket), both modes. Before
// the hooks ran first, the close frames were queued before the hooks' messages and 12 of
// 12 players never saw the final state. (WebSocket needs single-thread mode.)
func TestDrainHooksSpeakBeforeWebSocketsClose(t *testing.T) {
	for _, mt := range []bool{false} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			const players = 12
			var mu sync.Mutex
			var conns []*Conn // the loop's; read by the hook on the loop
			joined := make(chan struct{}, players)
			s := newServer(t, loop.Config{MultiThread: mt}, Config{})
			s.Handle("GET /ws", func(c *loop.Ctx) {
				w, err := Upgrade(c, Config{})
				if err != nil {
					return
				}
				c.OnLoop(func() {
					mu.Lock()
					conns = append(conns, w)
					mu.Unlock()
				})
				joined <- struct{}{}
				for {
					if _, _, err := w.ReadMessage(); err != nil {
						return
					}
				}
			})
			final := NewPrepared(false, []byte(`{"final":"3:1"}`))
			s.Loop(0).OnDrain(func(time.Time) {
				mu.Lock()
				defer mu.Unlock()
				for _, w := range conns {
					_ = w.Send(final) // never parks: a hook runs on the loop, outside a task
				}
			})
			errc := serveInBackground(t, s)
			addr := s.Addr().String()
			clients := make([]*websocket.Conn, players)
			for i := range clients {
				clients[i] = wsDial(t, addr, "/ws", nil)
			}
			for range players {
				<-joined
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- s.Shutdown(ctx) }()
			saw := 0
			for _, cl := range clients {
				require.NoError(t, cl.SetReadDeadline(time.Now().Add(10*time.Second)))
				_, msg, err := cl.ReadMessage()
				if err == nil && string(msg) == `{"final":"3:1"}` {
					saw++
					_, _, err = cl.ReadMessage()
				}
				var ce *websocket.CloseError
				if assert.ErrorAs(t, err, &ce, "then the close") {
					assert.Equal(t, websocket.CloseGoingAway, ce.Code)
				}
				_ = cl.Close()
			}
			assert.Equal(t, players, saw, "players that saw the final state before the close")
			require.NoError(t, <-shut)
			require.ErrorIs(t, <-errc, loop.ErrServerClosed)
		})
	}
}

// TestDrainKeepsConnectionsForHandlers: a route with Config.KeepOnDrain gets no 1001 when
// the drain begins: its handler, told by the server's Draining future, says its last word
// and closes with its own code (4001, as room.Play does when the room was handed to
// another node), and the drain waits for it; a route without the option gets the 1001.
// Real WebSocket clients (gorilla/websocket).
func TestDrainKeepsConnectionsForHandlers(t *testing.T) {
	s := newServer(t, loop.Config{}, Config{})
	joined := make(chan struct{}, 2)
	s.Handle("GET /left", func(c *loop.Ctx) {
		w, err := Upgrade(c, Config{KeepOnDrain: true})
		if err != nil {
			return
		}
		joined <- struct{}{}
		if _, err := c.Loop().Server().Draining().Await(c, 0); err != nil {
			return
		}
		_ = w.WriteText([]byte("moved"))
		_ = w.Close(4001, `{"room":"r"}`)
	})
	s.Handle("GET /closed", func(c *loop.Ctx) {
		w, err := Upgrade(c, Config{})
		if err != nil {
			return
		}
		joined <- struct{}{}
		for {
			if _, _, err := w.ReadMessage(); err != nil {
				return
			}
		}
	})
	errc := serveInBackground(t, s)
	addr := s.Addr().String()
	left, closed := wsDial(t, addr, "/left", nil), wsDial(t, addr, "/closed", nil)
	<-joined
	<-joined
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()

	require.NoError(t, left.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, msg, err := left.ReadMessage()
	require.NoError(t, err, "the handler's last word, not the drain's 1001")
	assert.Equal(t, "moved", string(msg))
	_, _, err = left.ReadMessage()
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 4001, ce.Code)
	assert.Equal(t, `{"room":"r"}`, ce.Text)

	require.NoError(t, closed.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, _, err = closed.ReadMessage()
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, websocket.CloseGoingAway, ce.Code)
	_ = left.Close()
	_ = closed.Close()
	require.NoError(t, <-shut)
	<-errc
}
