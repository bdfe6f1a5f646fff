package ws_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/gorilla/websocket"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/ws"
)

// serve starts s and returns its ws:// base URL.
func serve(s *loop.Server) string {
	go func() { _ = s.ListenAndServe() }()
	<-s.Ready()
	return "ws://" + s.Addr().String()
}

// A chat room: each player's handler reads its messages in a loop; a message is broadcast
// to the room, encoded once. The room is a slice on the loop: no lock.
func Example() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	cfg := ws.Config{Subprotocols: []string{"chat.v1"}, MaxMessageBytes: 4 << 10}
	var room []*ws.Conn
	s.Handle("GET /chat", func(c *loop.Ctx) {
		conn, err := ws.Upgrade(c, cfg)
		if err != nil {
			return // Upgrade answered the client itself
		}
		room = append(room, conn)
		defer func() { // however the connection ends
			for i, m := range room {
				if m == conn {
					room = append(room[:i], room[i+1:]...)
					break
				}
			}
		}()
		for {
			_, msg, err := conn.ReadMessage() // parks this task, not the loop
			if err != nil {
				return
			}
			ws.Broadcast(ws.NewPrepared(false, msg), room)
		}
	})
	url := serve(s) + "/chat"

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
	_ = alice.Close() // the server closed first and lingers until the client closes too
	_ = s.Shutdown(context.Background())
	// Output:
	// hello, room <nil> chat.v1
	// websocket: close 1000 (normal)
}

// A lobby in the callback form: no task per connection while idle. OnMessage runs on the
// loop for each message and broadcasts it; OnClose takes the player out of the lobby.
func ExampleUpgradeTo() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var lobby []*ws.Conn
	s.Handle("GET /lobby", func(c *loop.Ctx) {
		conn, err := ws.UpgradeTo(c, ws.Config{}, ws.Handler{
			OnMessage: func(w *ws.Conn, binary bool, msg []byte) {
				ws.Broadcast(ws.NewPrepared(binary, msg), lobby) // never parks
			},
			OnClose: func(w *ws.Conn, err error) {
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
		lobby = append(lobby, conn)
	}) // the handler returns; the connection lives on
	url := serve(s) + "/lobby"

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
