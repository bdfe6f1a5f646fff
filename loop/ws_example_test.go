package loop_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/batonrt/baton/loop"
)

// A chat room: each player's handler reads its messages in a loop; a message is broadcast
// to the room, encoded once. The room is a slice on the loop: no lock.
func ExampleCtx_Upgrade() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var room []*loop.WSConn
	s.Handle("GET /chat", func(c *loop.Ctx) {
		ws, err := c.Upgrade(loop.UpgradeOptions{Subprotocols: []string{"chat.v1"}})
		if err != nil {
			return // Upgrade answered the client itself
		}
		room = append(room, ws)
		defer func() { // however the connection ends
			for i, m := range room {
				if m == ws {
					room = append(room[:i], room[i+1:]...)
					break
				}
			}
		}()
		for {
			_, msg, err := ws.ReadMessage() // parks this task, not the loop
			if err != nil {
				return
			}
			loop.Broadcast(loop.NewPrepared(false, msg), room)
		}
	})
	url := strings.Replace(serve(s), "http", "ws", 1) + "/chat"

	d := websocket.Dialer{Subprotocols: []string{"chat.v1"}}
	alice, _, err := d.Dial(url, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer alice.Close()
	_ = alice.WriteMessage(websocket.TextMessage, []byte("hello, room"))
	_ = alice.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, got, err := alice.ReadMessage()
	fmt.Println(string(got), err, alice.Subprotocol())

	_ = alice.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"))
	_, _, err = alice.ReadMessage()
	fmt.Println(err)
	_ = s.Shutdown(context.Background())
	// Output:
	// hello, room <nil> chat.v1
	// websocket: close 1000 (normal)
}

// A lobby in the callback form: no task per connection while idle. OnMessage runs on the
// loop for each message and broadcasts it; OnClose takes the player out of the lobby.
func ExampleCtx_UpgradeTo() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var lobby []*loop.WSConn
	s.Handle("GET /lobby", func(c *loop.Ctx) {
		ws, err := c.UpgradeTo(loop.UpgradeOptions{}, loop.WSHandler{
			OnMessage: func(w *loop.WSConn, binary bool, msg []byte) {
				loop.Broadcast(loop.NewPrepared(binary, msg), lobby) // never parks
			},
			OnClose: func(w *loop.WSConn, err error) {
				for i, m := range lobby {
					if m == w {
						lobby = append(lobby[:i], lobby[i+1:]...)
						break
					}
				}
			},
		})
		if err != nil {
			return // UpgradeTo answered the client itself
		}
		lobby = append(lobby, ws)
	}) // the handler returns; the connection lives on
	url := strings.Replace(serve(s), "http", "ws", 1) + "/lobby"

	bob, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = bob.WriteMessage(websocket.TextMessage, []byte("anyone here?"))
	_ = bob.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, got, err := bob.ReadMessage()
	fmt.Println(string(got), err)

	_ = bob.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"))
	_, _, err = bob.ReadMessage()
	fmt.Println(err)
	_ = bob.Close() // the server closed first and lingers until the client closes too
	_ = s.Shutdown(context.Background())
	// Output:
	// anyone here? <nil>
	// websocket: close 1000 (normal)
}
