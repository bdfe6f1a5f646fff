package integration

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/ws"
)

// TestRoomWebSocketMember: a WebSocket connection's task (its upgrading handler's) is a
// member of a room: its messages go into the room's inputs, and stopping the room ends the
// connection's handler (its deferred functions run). Two feature packages meet here, in a
// user's code: loop/room and loop/ws know nothing of each other.
func TestRoomWebSocketMember(t *testing.T) {
	var current atomic.Pointer[room.Room[string]]
	handlerDone := make(chan error, 1)
	srv := loop.New(looptest.Config(t, loop.Config{}))
	srv.Handle("GET /play", func(c *loop.Ctx) {
		w, err := ws.Upgrade(c, ws.Config{})
		if err != nil {
			return
		}
		r := current.Load()
		if err := r.Attach(&c.Task); err != nil {
			return
		}
		defer func() { handlerDone <- c.Err() }()
		for {
			_, msg, err := w.ReadMessage()
			if err != nil {
				return
			}
			_ = r.Input(string(msg))
		}
	})
	base := looptest.Start(t, srv)
	got := make(chan string, 10)
	var r *room.Room[string]
	var err error
	looptest.OnLoop(t, srv.Loop(0), func() {
		r, err = room.New(srv.Loop(0), room.Config[string]{Name: "ws", Period: 5 * time.Millisecond,
			Tick: func(r *room.Room[string], tk *room.Tick[string]) { tk.DrainInputs(func(m string) { got <- m }) }})
	})
	require.NoError(t, err)
	current.Store(r)
	conn, _, err := websocket.DefaultDialer.Dial(strings.Replace(base, "http", "ws", 1)+"/play", nil)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("jump")))
	select {
	case m := <-got:
		assert.Equal(t, "jump", m)
	case <-time.After(5 * time.Second):
		t.Fatal("the tick did not get the message")
	}
	r.Stop()
	select {
	case err := <-handlerDone:
		assert.ErrorIs(t, err, room.ErrRoomStopped)
	case <-time.After(5 * time.Second):
		t.Fatal("the connection's handler did not end")
	}
	<-r.Done()
}
