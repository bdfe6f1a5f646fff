package ws

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
)

// wsCallbackEcho is a handler that upgrades in the callback form, echoes every message
// and reports OnClose's error on closed (buffered).
func wsCallbackEcho(closed chan<- error) loop.HandlerFunc {
	return func(c *loop.Ctx) {
		_, _ = UpgradeTo(c, opts(c, Config{}), Handler{
			OnMessage: func(w *Conn, bin bool, p []byte) {
				if bin {
					_ = w.WriteBinary(p)
				} else {
					_ = w.WriteText(p)
				}
			},
			OnClose: func(w *Conn, err error) {
				if closed != nil {
					closed <- err
				}
			},
		})
	}
}

// TestWSCallbackEcho: messages of every size echo through OnMessage; the handler has
// returned (nothing in flight), ReadMessage refuses, the stats page counts the messages.
func TestWSCallbackEcho(t *testing.T) {
	closed := make(chan error, 1)
	readErr := make(chan error, 1)
	s, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			w, err := UpgradeTo(c, opts(c, Config{}), Handler{
				OnMessage: func(w *Conn, bin bool, p []byte) {
					if bin {
						_ = w.WriteBinary(p)
					} else {
						_ = w.WriteText(p)
					}
				},
				OnClose: func(w *Conn, err error) { closed <- err },
			})
			require.NoError(t, err)
			_, _, err = w.ReadMessage()
			readErr <- err
		})
	})
	conn := wsDial(t, addr, "/ws", nil)
	require.ErrorIs(t, recvErr(t, readErr), ErrCallbackForm)
	var sent uint64
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 300 << 10} {
		p := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
		kind := websocket.TextMessage
		if n%2 == 1 {
			kind = websocket.BinaryMessage
		}
		require.NoError(t, conn.WriteMessage(kind, p))
		k, got, err := conn.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, kind, k)
		require.Equal(t, p, got, "size %d", n)
		sent += uint64(n)
	}
	st := wsStats(t, s)
	require.Equal(t, 1, st.Open)
	require.Len(t, st.Routes, 1)
	assert.EqualValues(t, 7, st.Routes[0].MessagesIn)
	assert.Equal(t, sent, st.Routes[0].BytesIn)
	assert.EqualValues(t, 7, st.Routes[0].MessagesOut)
	assert.EqualValues(t, 7, st.Routes[0].OnLoop.Count)
	require.Len(t, st.Connections, 1)
	assert.Equal(t, "callback", st.Connections[0].Form)
	assert.EqualValues(t, 7, st.Connections[0].MessagesIn)
	snap, err := stats.Take(context.Background(), s, stats.ViewAdmission)
	require.NoError(t, err)
	assert.Zero(t, snap.Admission.InFlight, "the handler returned: no request in flight")

	require.NoError(t, conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye")))
	wsExpectClose(t, conn, 1000)
	var ce *CloseError
	require.ErrorAs(t, recvErr(t, closed), &ce)
	assert.Equal(t, uint16(1000), ce.Code)
	assert.Equal(t, "bye", ce.Reason)
	require.Eventually(t, func() bool { return wsStats(t, s).Open == 0 }, 10*time.Second, time.Millisecond)
	assert.EqualValues(t, 1, wsStats(t, s).Routes[0].PeerCloses)
}

// TestWSCallbackProtocolErrors: each violation closes with the RFC's code and OnClose gets
// the *httpcodec.WSError.
func TestWSCallbackProtocolErrors(t *testing.T) {
	closed := make(chan error, 1)
	_, addr := startWS(t, loop.Config{}, Config{MaxMessageBytes: 1000}, func(s *loop.Server) {
		s.Handle("GET /ws", wsCallbackEcho(closed))
	})
	mask := []byte{1, 2, 3, 4}
	for _, tc := range []struct {
		name  string
		frame []byte
		code  uint16
	}{
		{"unmasked", []byte{0x81, 0x02, 'h', 'i'}, 1002},
		{"bad opcode", append([]byte{0x83, 0x82}, maskBytes(mask, []byte("hi"))...), 1002},
		{"invalid UTF-8", append([]byte{0x81, 0x82}, maskBytes(mask, []byte{0xff, 0xfe})...), 1007},
		{"oversize", append([]byte{0x82, 0xFE, 0x07, 0xD0}, mask...), 1009},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := wsRawDial(t, addr, "/ws")
			rc.write(t, tc.frame)
			op, p, _ := rc.readFrame(t)
			require.Equal(t, httpcodec.WSClose, op)
			require.GreaterOrEqual(t, len(p), 2)
			require.Equal(t, tc.code, binary.BigEndian.Uint16(p), "reason %q", p[2:])
			rc.expectEnd(t)
			var we *httpcodec.WSError
			require.ErrorAs(t, recvErr(t, closed), &we)
			require.Equal(t, tc.code, we.Code)
		})
	}
}

// TestWSCallbackAbruptDisconnect: a client that vanishes runs OnClose with loop.ErrClientGone.
func TestWSCallbackAbruptDisconnect(t *testing.T) {
	closed := make(chan error, 1)
	s, addr := startServer(t, loop.Config{}, func(s *loop.Server) { s.Handle("GET /ws", wsCallbackEcho(closed)) })
	conn := wsDial(t, addr, "/ws", nil)
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("x")))
	_, _, err := conn.ReadMessage()
	require.NoError(t, err)
	require.NoError(t, conn.UnderlyingConn().Close())
	require.ErrorIs(t, recvErr(t, closed), loop.ErrClientGone)
	require.Zero(t, wsStats(t, s).Open)
}

// TestWSCallbackSlowConsumer: neither Send nor WriteBinary parks in a callback: past
// MaxQueuedBytes the client is closed (1008) and counted, and OnClose says why.
func TestWSCallbackSlowConsumer(t *testing.T) {
	for _, how := range []string{"send", "write"} {
		t.Run(how, func(t *testing.T) {
			closed := make(chan error, 1)
			got := make(chan error, 1)
			msg := NewPrepared(true, bytes.Repeat([]byte("s"), 16<<10))
			s, addr := startWS(t, loop.Config{LingerTimeout: 20 * time.Second}, Config{MaxQueuedBytes: 64 << 10, CloseTimeout: 20 * time.Second},
				func(s *loop.Server) {
					s.Handle("GET /ws", func(c *loop.Ctx) {
						_, _ = UpgradeTo(c, opts(c, Config{}), Handler{
							OnMessage: func(w *Conn, _ bool, _ []byte) {
								for i := 0; ; i++ {
									var err error
									if how == "send" {
										err = w.Send(msg)
									} else {
										err = w.WriteBinary(msg.frame[4:])
									}
									if err != nil {
										got <- err
										return
									}
									require.Less(t, i, 1000, "the queue bound never applied")
								}
							},
							OnClose: func(w *Conn, err error) { closed <- err },
						})
					})
				})
			conn := wsDial(t, addr, "/ws", nil)
			require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("go")))
			require.ErrorIs(t, recvErr(t, got), ErrSlowConsumer)
			require.ErrorIs(t, recvErr(t, closed), ErrSlowConsumer)
			st := wsStats(t, s)
			require.Equal(t, uint64(1), st.SlowConsumerCloses)
			require.Equal(t, uint64(1), st.Routes[0].SlowConsumerCloses)
			wsExpectClose(t, conn, 1008)
		})
	}
}

// TestWSCallbackShutdownSends1001: Shutdown closes callback-form connections with 1001,
// waits for the answer, reports it and runs OnClose.
func TestWSCallbackShutdownSends1001(t *testing.T) {
	closed := make(chan error, 2)
	s := newServer(t, loop.Config{}, Config{CloseTimeout: 200 * time.Millisecond})
	s.Handle("GET /ws", wsCallbackEcho(closed))
	errc := serveInBackground(t, s)
	addr := s.Addr().String()
	answering := wsDial(t, addr, "/ws", nil)
	silent := wsRawDial(t, addr, "/ws")
	require.Eventually(t, func() bool { return wsStats(t, s).Open == 2 }, 10*time.Second, time.Millisecond)
	got := make(chan *websocket.CloseError, 1)
	go func() {
		_ = answering.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, _, err := answering.ReadMessage() // gorilla answers the close frame here
		var ce *websocket.CloseError
		errors.As(err, &ce)
		got <- ce
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	require.ErrorIs(t, <-errc, loop.ErrServerClosed)
	ce := <-got
	require.NotNil(t, ce)
	require.Equal(t, 1001, ce.Code)
	op, p, _ := silent.readFrame(t)
	require.Equal(t, httpcodec.WSClose, op)
	require.Equal(t, uint16(1001), binary.BigEndian.Uint16(p))
	rep := s.DrainReport()
	require.Equal(t, 1, rep.TakeoversClosed)
	require.Equal(t, 1, rep.TakeoversForced)
	require.Zero(t, rep.InFlight, "callback-form connections hold no request")
	require.Error(t, recvErr(t, closed))
	require.Error(t, recvErr(t, closed))
}

// TestWSCallbackPanic: a panic in OnMessage closes that connection with 1011, is counted,
// runs OnClose, and the loop serves on.
func TestWSCallbackPanic(t *testing.T) {
	closed := make(chan error, 2)
	s, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			_, _ = UpgradeTo(c, opts(c, Config{}), Handler{
				OnMessage: func(w *Conn, _ bool, p []byte) {
					if string(p) == "boom" {
						panic("boom")
					}
					_ = w.WriteText(p)
				},
				OnClose: func(w *Conn, err error) { closed <- err },
			})
		})
	})
	bad := wsDial(t, addr, "/ws", nil)
	good := wsDial(t, addr, "/ws", nil)
	require.NoError(t, bad.WriteMessage(websocket.TextMessage, []byte("boom")))
	wsExpectClose(t, bad, 1011)
	err := recvErr(t, closed)
	require.Error(t, err)
	require.Contains(t, err.Error(), "OnMessage panicked")
	require.NoError(t, good.WriteMessage(websocket.TextMessage, []byte("still here")))
	_, p, err := good.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, "still here", string(p))
	st := wsStats(t, s)
	require.Equal(t, uint64(1), st.CallbackPanics)
}

// TestWSCallbackMessagesWaitForHandler: a message that arrives while the handler still runs
// after UpgradeTo waits for it to return, then runs OnMessage with no further input.
func TestWSCallbackMessagesWaitForHandler(t *testing.T) {
	var release *loop.Future[struct{}]
	got := make(chan string, 1)
	handlerReturned := false
	s, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		release = loop.NewFuture[struct{}](s.Loop(0))
		s.Handle("GET /ws", func(c *loop.Ctx) {
			defer func() { handlerReturned = true }()
			_, err := UpgradeTo(c, opts(c, Config{}), Handler{
				OnMessage: func(w *Conn, _ bool, p []byte) {
					if !handlerReturned {
						got <- "before the handler returned"
						return
					}
					got <- string(p)
				},
			})
			require.NoError(t, err)
			_, _ = release.Await(c, 0)
		})
	})
	conn := wsDial(t, addr, "/ws", nil)
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("early")))
	// The message is in the server (the connection's queue, or its input buffer) once the
	// loop has read it; it must not be delivered while the handler waits.
	require.Eventually(t, func() bool {
		var n int
		onLoop(t, s, func() {
			for _, w := range stateOf(s.Loop(0)).conns {
				n = len(w.queue) - w.queueOff
			}
		})
		return n > 0
	}, 10*time.Second, time.Millisecond)
	select {
	case m := <-got:
		t.Fatalf("OnMessage ran while the handler waited: %q", m)
	default:
	}
	onLoop(t, s, func() { release.Resolve(struct{}{}, nil) })
	select {
	case m := <-got:
		require.Equal(t, "early", m)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting message was not delivered after the handler returned")
	}
}

// TestWSCallbackRoom: callback-form members in one []*Conn: a member's message is
// broadcast from OnMessage; members leave in OnClose (never inside the Broadcast), and a
// slow member closed by the Broadcast leaves the room without disturbing it.
func TestWSCallbackRoom(t *testing.T) {
	const members = 5
	var room []*Conn
	inBroadcast := false
	left := make(chan error, members+1)
	s, addr := startWS(t, loop.Config{LingerTimeout: 20 * time.Second}, Config{MaxQueuedBytes: 64 << 10}, func(s *loop.Server) {
		s.Handle("GET /room", func(c *loop.Ctx) {
			w, err := UpgradeTo(c, opts(c, Config{}), Handler{
				OnMessage: func(w *Conn, _ bool, p []byte) {
					inBroadcast = true
					m := NewPrepared(false, p)
					n := 1
					if string(p) == "flood" {
						m, n = NewPrepared(true, make([]byte, 16<<10)), 64
					}
					for range n {
						Broadcast(m, room)
					}
					inBroadcast = false
				},
				OnClose: func(w *Conn, err error) {
					if inBroadcast {
						left <- errors.New("OnClose ran inside the Broadcast")
						return
					}
					for i, m := range room {
						if m == w {
							room = append(room[:i], room[i+1:]...)
							break
						}
					}
					left <- err
				},
			})
			if err == nil {
				room = append(room, w)
			}
		})
	})
	var conns []*websocket.Conn
	for range members {
		conns = append(conns, wsDial(t, addr, "/room", nil))
	}
	require.Eventually(t, func() bool { return wsStats(t, s).Open == members }, 10*time.Second, time.Millisecond)
	require.NoError(t, conns[0].WriteMessage(websocket.TextMessage, []byte("hi all")))
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, p, err := c.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, "hi all", string(p))
	}
	// Nobody reads during the flood: every member past the bound is closed by the Broadcast.
	require.NoError(t, conns[1].WriteMessage(websocket.TextMessage, []byte("flood")))
	for range members {
		require.ErrorIs(t, recvErr(t, left), ErrSlowConsumer)
	}
	var n int
	onLoop(t, s, func() { n = len(room) })
	require.Zero(t, n)
	require.EqualValues(t, members, wsStats(t, s).SlowConsumerCloses)
}

// TestWSIdleReleasesBuffers: once a connection has been idle for idleRelease, the sweep
// gives back its message buffer (the engine gives back the output buffer of every taken
// connection: TestTakeoverReleasesIdleOutput).
func TestWSIdleReleasesBuffers(t *testing.T) {
	for _, form := range []string{"task"} { // the callback form holds no message buffer
		t.Run(form, func(t *testing.T) {
			h := wsEcho(nil)
			s, addr := startServer(t, loop.Config{}, func(s *loop.Server) { s.Handle("GET /ws", h) })
			conn := wsDial(t, addr, "/ws", nil)
			require.NoError(t, conn.WriteMessage(websocket.BinaryMessage, make([]byte, 4000)))
			_, _, err := conn.ReadMessage()
			require.NoError(t, err)
			held := func() (buf int) {
				onLoop(t, s, func() {
					for _, w := range stateOf(s.Loop(0)).conns {
						buf = cap(w.buf)
					}
				})
				return buf
			}
			require.Positive(t, held(), "the echo left no buffer to give back")
			require.Eventually(t, func() bool { return held() == 0 }, 10*time.Second, 5*time.Millisecond)
			// And the connection still works.
			require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("again")))
			_, p, err := conn.ReadMessage()
			require.NoError(t, err)
			require.Equal(t, "again", string(p))
		})
	}
}
