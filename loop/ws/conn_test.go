package ws

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
)

// wsEcho is a handler that echoes every message with its kind and reports how its read
// loop ended on done (buffered).
func wsEcho(done chan<- error) loop.HandlerFunc {
	return func(c *loop.Ctx) {
		w, err := Upgrade(c, opts(c, Config{}))
		if err != nil {
			return
		}
		for {
			bin, p, err := w.ReadMessage()
			if err != nil {
				if done != nil {
					done <- err
				}
				return
			}
			if bin {
				err = w.WriteBinary(p)
			} else {
				err = w.WriteText(p)
			}
			if err != nil {
				if done != nil {
					done <- err
				}
				return
			}
		}
	}
}

func wsDial(t testing.TB, addr, path string, d *websocket.Dialer) *websocket.Conn {
	t.Helper()
	if d == nil {
		d = &websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	}
	conn, resp, err := d.Dial("ws://"+addr+path, nil)
	require.NoError(t, err)
	require.Equal(t, 101, resp.StatusCode)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// wsExpectClose reads until the connection ends and asserts it ended with a close frame
// carrying code.
func wsExpectClose(t testing.TB, conn *websocket.Conn, code int) *websocket.CloseError {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, _, err := conn.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce, "the connection ended without a close frame")
		require.Equal(t, code, ce.Code, "close code (reason %q)", ce.Text)
		return ce
	}
}

func recvErr(t testing.TB, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not finish")
		return nil
	}
}

func TestWSEchoSizes(t *testing.T) {
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) { s.Handle("GET /ws", wsEcho(nil)) })
	conn := wsDial(t, addr, "/ws", nil)
	for _, n := range []int{0, 1, 125, 126, 127, 1000, 65535, 65536, 100_000, 1 << 20} {
		for _, kind := range []int{websocket.TextMessage, websocket.BinaryMessage} {
			p := bytes.Repeat([]byte("é"), n/2)
			if len(p) < n {
				p = append(p, 'x')
			}
			if kind == websocket.BinaryMessage {
				p = make([]byte, n)
				_, _ = rand.Read(p)
			}
			require.NoError(t, conn.WriteMessage(kind, p))
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			gotKind, got, err := conn.ReadMessage()
			require.NoError(t, err, "size %d", n)
			require.Equal(t, kind, gotKind, "size %d", n)
			require.True(t, bytes.Equal(p, got), "size %d: echo differs", n)
		}
	}
	require.NoError(t, conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye")))
	wsExpectClose(t, conn, 1000)
}

// TestWSEchoFragmented sends messages in fragments (gorilla's NextWriter writes one frame
// per write buffer), code points split between them, with pings in between.
func TestWSEchoFragmented(t *testing.T) {
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) { s.Handle("GET /ws", wsEcho(nil)) })
	conn := wsDial(t, addr, "/ws", &websocket.Dialer{WriteBufferSize: 100, HandshakeTimeout: 10 * time.Second})
	pongs := make(chan string, 16)
	conn.SetPongHandler(func(s string) error { pongs <- s; return nil })
	for _, n := range []int{150, 1000, 70_000} {
		p := bytes.Repeat([]byte("日本"), n/6+1)
		wr, err := conn.NextWriter(websocket.TextMessage)
		require.NoError(t, err)
		for i := 0; i < len(p); i += 37 {
			_, err = wr.Write(p[i:min(i+37, len(p))])
			require.NoError(t, err)
		}
		require.NoError(t, wr.Close())
		require.NoError(t, conn.WriteControl(websocket.PingMessage, []byte("between"), time.Now().Add(5*time.Second)))
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		kind, got, err := conn.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, websocket.TextMessage, kind)
		require.Equal(t, string(p), string(got))
	}
	// The pongs arrive with the reads above or the next one.
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("last")))
	_, _, err := conn.ReadMessage()
	require.NoError(t, err)
	require.Len(t, pongs, 3)
	require.Equal(t, "between", <-pongs)
}

// TestWSServerPings: a silent connection is pinged every PingInterval and stays open while
// it answers.
func TestWSServerPings(t *testing.T) {
	done := make(chan error, 1)
	_, addr := startWS(t, loop.Config{}, Config{PingInterval: 20 * time.Millisecond, PongTimeout: 5 * time.Second},
		func(s *loop.Server) { s.Handle("GET /ws", wsEcho(done)) })
	conn := wsDial(t, addr, "/ws", nil)
	pings := make(chan struct{}, 100)
	conn.SetPingHandler(func(data string) error {
		pings <- struct{}{}
		return conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(5*time.Second))
	})
	readErr := make(chan error, 1)
	go func() {
		_, _, err := conn.ReadMessage()
		readErr <- err
	}()
	for range 3 {
		select {
		case <-pings:
		case <-time.After(20 * time.Second):
			t.Fatal("no ping from the server")
		}
	}
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("still here")))
	require.NoError(t, <-readErr) // the echo
}

// TestWSPingTimeout: a client that answers no ping is dropped without a close handshake
// and the handler learns why.
func TestWSPingTimeout(t *testing.T) {
	done := make(chan error, 1)
	s, addr := startWS(t, loop.Config{}, Config{PingInterval: 20 * time.Millisecond, PongTimeout: 50 * time.Millisecond},
		func(s *loop.Server) { s.Handle("GET /ws", wsEcho(done)) })
	rc := wsRawDial(t, addr, "/ws")
	require.ErrorIs(t, recvErr(t, done), ErrPingTimeout)
	// The client sees a ping, then the end of the connection.
	op, _, _ := rc.readFrame(t)
	require.Equal(t, httpcodec.WSPing, op)
	rc.expectEnd(t)
	require.Equal(t, uint64(1), wsStats(t, s).PingTimeouts)
}

func TestWSCloseByClient(t *testing.T) {
	done := make(chan error, 2)
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) { s.Handle("GET /ws", wsEcho(done)) })
	for _, code := range []int{1000, 4001} {
		conn := wsDial(t, addr, "/ws", nil)
		require.NoError(t, conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, "bye")))
		wsExpectClose(t, conn, code) // the server echoes the code
		var ce *CloseError
		require.ErrorAs(t, recvErr(t, done), &ce)
		require.Equal(t, &CloseError{Code: uint16(code), Reason: "bye"}, ce)
	}
	// A close frame without a code is answered by one without a code (1005 to gorilla).
	conn := wsDial(t, addr, "/ws", nil)
	require.NoError(t, conn.WriteMessage(websocket.CloseMessage, nil))
	wsExpectClose(t, conn, websocket.CloseNoStatusReceived)
	var ce *CloseError
	require.ErrorAs(t, recvErr(t, done), &ce)
	require.Equal(t, httpcodec.WSCloseNoStatus, ce.Code)
}

func TestWSCloseByServer(t *testing.T) {
	closed := make(chan error, 1)
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /close", func(c *loop.Ctx) {
			w, err := Upgrade(c, opts(c, Config{}))
			if err != nil {
				return
			}
			closed <- w.Close(4000, "done")
			_, _, err = w.ReadMessage()
			closed <- err
		})
		s.Handle("GET /return", func(c *loop.Ctx) {
			if _, err := Upgrade(c, opts(c, Config{})); err != nil {
				return
			}
		})
		s.Handle("GET /panic", func(c *loop.Ctx) {
			if _, err := Upgrade(c, opts(c, Config{})); err != nil {
				return
			}
			panic("handler bug")
		})
		s.Handle("GET /bad", func(c *loop.Ctx) {
			w, err := Upgrade(c, opts(c, Config{}))
			if err != nil {
				return
			}
			closed <- w.Close(1005, "")
		})
	})
	conn := wsDial(t, addr, "/close", nil)
	ce := wsExpectClose(t, conn, 4000) // gorilla answers the close frame as it reads it
	require.Equal(t, "done", ce.Text)
	require.NoError(t, recvErr(t, closed))
	require.ErrorIs(t, recvErr(t, closed), ErrClosed)

	wsExpectClose(t, wsDial(t, addr, "/return", nil), 1000)
	wsExpectClose(t, wsDial(t, addr, "/panic", nil), 1011)

	conn = wsDial(t, addr, "/bad", nil)
	require.ErrorIs(t, recvErr(t, closed), httpcodec.ErrWSInvalidFrame) // 1005 may not be sent
	wsExpectClose(t, conn, 1000)                                        // then the handler returned
}

// TestWSCloseTimeout: a client that never answers the server's close frame is dropped
// after CloseTimeout.
func TestWSCloseTimeout(t *testing.T) {
	closed := make(chan error, 1)
	_, addr := startWS(t, loop.Config{}, Config{CloseTimeout: 50 * time.Millisecond}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			w, err := Upgrade(c, opts(c, Config{}))
			if err != nil {
				return
			}
			require.NoError(t, w.Close(1000, ""))
			closed <- w.Err()
		})
	})
	rc := wsRawDial(t, addr, "/ws") // reads nothing, answers nothing
	require.ErrorIs(t, recvErr(t, closed), ErrClosed)
	op, p, _ := rc.readFrame(t)
	require.Equal(t, httpcodec.WSClose, op)
	require.Equal(t, []byte{0x03, 0xe8}, p)
	rc.expectEnd(t)
}

// TestWSProtocolErrors: each violation closes with the RFC's code and cancels the task.
func TestWSProtocolErrors(t *testing.T) {
	done := make(chan error, 1)
	var deferred atomic.Int32
	_, addr := startWS(t, loop.Config{}, Config{MaxMessageBytes: 1000}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			defer deferred.Add(1)
			wsEcho(done)(c)
		})
	})
	mask := []byte{1, 2, 3, 4}
	for _, tc := range []struct {
		name  string
		frame []byte
		code  uint16
	}{
		{"unmasked", []byte{0x81, 0x02, 'h', 'i'}, 1002},
		{"reserved bit", append([]byte{0xC1, 0x82}, maskBytes(mask, []byte("hi"))...), 1002},
		{"bad opcode", append([]byte{0x83, 0x82}, maskBytes(mask, []byte("hi"))...), 1002},
		{"invalid UTF-8", append([]byte{0x81, 0x82}, maskBytes(mask, []byte{0xff, 0xfe})...), 1007},
		{"oversize", append([]byte{0x82, 0xFE, 0x07, 0xD0}, mask...), 1009}, // 2000 bytes announced
		{"continuation first", append([]byte{0x80, 0x82}, maskBytes(mask, []byte("hi"))...), 1002},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := deferred.Load()
			rc := wsRawDial(t, addr, "/ws")
			rc.write(t, tc.frame)
			op, p, _ := rc.readFrame(t)
			require.Equal(t, httpcodec.WSClose, op)
			require.GreaterOrEqual(t, len(p), 2)
			require.Equal(t, tc.code, binary.BigEndian.Uint16(p), "reason %q", p[2:])
			rc.expectEnd(t)
			var we *httpcodec.WSError
			require.ErrorAs(t, recvErr(t, done), &we)
			require.Equal(t, tc.code, we.Code)
			require.Eventually(t, func() bool { return deferred.Load() == before+1 }, 10*time.Second, time.Millisecond)
		})
	}
	// gorilla's client writes an invalid text message as asked.
	conn := wsDial(t, addr, "/ws", nil)
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte{'a', 0xc3}))
	wsExpectClose(t, conn, 1007)
	recvErr(t, done)
	conn = wsDial(t, addr, "/ws", nil)
	require.NoError(t, conn.WriteMessage(websocket.BinaryMessage, make([]byte, 1001)))
	wsExpectClose(t, conn, 1009)
	recvErr(t, done)
}

// TestWSAbruptDisconnect: a client that vanishes cancels the handler's task; its deferred
// functions run.
func TestWSAbruptDisconnect(t *testing.T) {
	done := make(chan error, 1)
	deferred := make(chan struct{})
	var ctxErr atomic.Value
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			defer close(deferred)
			wsEcho(done)(c)
			ctxErr.Store(c.Context().Err())
		})
	})
	conn := wsDial(t, addr, "/ws", nil)
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("x")))
	_, _, err := conn.ReadMessage()
	require.NoError(t, err)
	require.NoError(t, conn.UnderlyingConn().Close())
	require.ErrorIs(t, recvErr(t, done), loop.ErrClientGone)
	select {
	case <-deferred:
	case <-time.After(10 * time.Second):
		t.Fatal("deferred functions did not run")
	}
	require.ErrorIs(t, ctxErr.Load().(error), context.Canceled)
}

// TestWSSlowConsumerSend: Send to a client that does not read closes it with 1008 once
// its queue passes MaxQueuedBytes, counts it and frees the queue.
func TestWSSlowConsumerSend(t *testing.T) {
	done := make(chan error, 1)
	msg := NewPrepared(true, bytes.Repeat([]byte("s"), 16<<10))
	s, addr := startWS(t, loop.Config{LingerTimeout: 20 * time.Second}, Config{MaxQueuedBytes: 64 << 10, CloseTimeout: 20 * time.Second},
		func(s *loop.Server) {
			s.Handle("GET /ws", func(c *loop.Ctx) {
				w, err := Upgrade(c, opts(c, Config{}))
				if err != nil {
					return
				}
				for {
					if err := w.Send(msg); err != nil {
						done <- err
						return
					}
					_ = c.Sleep(0) // a tick: the output is written between sends
				}
			})
		})
	conn := wsDial(t, addr, "/ws", nil)
	require.ErrorIs(t, recvErr(t, done), ErrSlowConsumer)
	st := wsStats(t, s)
	require.Equal(t, uint64(1), st.SlowConsumerCloses)
	require.Equal(t, uint64(1), st.Routes[0].SlowConsumerCloses)
	require.Equal(t, uint64(0), st.StallCloses)
	// Reading now, the client gets what was queued, then the 1008 close frame.
	wsExpectClose(t, conn, 1008)
}

// TestWSSlowConsumerStall: a writer parked on backpressure whose client reads nothing for
// StallTimeout gets ErrSlowConsumer; the connection is dropped and counted.
func TestWSSlowConsumerStall(t *testing.T) {
	done := make(chan error, 1)
	s, addr := startWS(t, loop.Config{}, Config{MaxQueuedBytes: 64 << 10, StallTimeout: 100 * time.Millisecond},
		func(s *loop.Server) {
			s.Handle("GET /ws", func(c *loop.Ctx) {
				w, err := Upgrade(c, opts(c, Config{}))
				if err != nil {
					return
				}
				p := bytes.Repeat([]byte("s"), 16<<10)
				for {
					if err := w.WriteBinary(p); err != nil {
						done <- err
						return
					}
				}
			})
		})
	rc := wsRawDial(t, addr, "/ws")
	require.ErrorIs(t, recvErr(t, done), ErrSlowConsumer)
	st := wsStats(t, s)
	require.Equal(t, uint64(1), st.SlowConsumerCloses)
	require.Equal(t, uint64(1), st.StallCloses)
	require.Zero(t, st.Open)
	_ = rc
}

// TestWSShutdownSends1001: Shutdown closes open WebSockets with 1001, waits for their
// answers and reports them.
func TestWSShutdownSends1001(t *testing.T) {
	done := make(chan error, 2)
	s := newServer(t, loop.Config{}, Config{CloseTimeout: 200 * time.Millisecond})
	s.Handle("GET /ws", wsEcho(done))
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
	require.Equal(t, 2, rep.InFlight)
	recvErr(t, done)
	recvErr(t, done)
}

func TestWSUpgradeRefused(t *testing.T) {
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		s.Handle("/ws", func(c *loop.Ctx) { _, _ = Upgrade(c, opts(c, Config{})) })
		s.Handle("GET /only-game", func(c *loop.Ctx) {
			_, _ = Upgrade(c, Config{CheckOrigin: func(_ *loop.Ctx, o string) bool { return o == "https://game.example" }})
		})
	})
	const good = "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: %s\r\n%s\r\n"
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"not GET", "POST /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n", 405},
		{"no upgrade", "GET /ws HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"wrong version", fmt.Sprintf(good, "/ws", "x", "8", ""), 426},
		{"cross origin", fmt.Sprintf(good, "/ws", "x", "13", "Origin: http://evil.example\r\n"), 403},
		{"policy refuses", fmt.Sprintf(good, "/only-game", "x", "13", "Origin: http://x\r\n"), 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			c.send(tc.req)
			resp, body := c.read("GET")
			require.Equal(t, tc.status, resp.StatusCode, body)
			if tc.status == 426 {
				require.Equal(t, "13", resp.Header.Get("Sec-WebSocket-Version"))
			}
		})
	}
	for _, tc := range []struct{ path, host, origin string }{
		{"/ws", "x", "http://x"}, {"/ws", "x", ""}, {"/ws", "Game.Example:8080", "https://game.example:8080"},
		{"/only-game", "x", "https://game.example"},
	} {
		c := dial(t, addr)
		origin := ""
		if tc.origin != "" {
			origin = "Origin: " + tc.origin + "\r\n"
		}
		c.send(fmt.Sprintf(good, tc.path, tc.host, "13", origin))
		resp, _ := c.read("GET")
		require.Equal(t, 101, resp.StatusCode, "%+v", tc)
		require.Equal(t, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", resp.Header.Get("Sec-WebSocket-Accept"))
	}
}

func TestWSMultiThreadRefused(t *testing.T) {
	errs := make(chan error, 1)
	_, addr := startServer(t, loop.Config{MultiThread: true}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			_, err := Upgrade(c, opts(c, Config{}))
			errs <- err
		})
	})
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
	require.Error(t, err)
	require.Equal(t, 501, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(body), "Config.MultiThread")
	require.ErrorIs(t, recvErr(t, errs), ErrMultiThread)
}

func TestWSSubprotocol(t *testing.T) {
	got := make(chan string, 1)
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			w, err := Upgrade(c, Config{Subprotocols: []string{"game.v2", "game.v1"}})
			if err != nil {
				return
			}
			got <- w.Subprotocol()
		})
	})
	conn := wsDial(t, addr, "/ws", &websocket.Dialer{Subprotocols: []string{"chat", "game.v1", "game.v2"}})
	require.Equal(t, "game.v1", conn.Subprotocol())
	require.Equal(t, "game.v1", <-got)
	wsExpectClose(t, conn, 1000)
}

// TestWSBroadcast: one prepared message reaches every member of a room; a departed member
// is skipped.
func TestWSBroadcast(t *testing.T) {
	var room []*Conn
	joined := make(chan struct{}, 8)
	s, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			w, err := Upgrade(c, opts(c, Config{}))
			if err != nil {
				return
			}
			room = append(room, w) // on the loop: no lock
			joined <- struct{}{}
			for {
				if _, _, err := w.ReadMessage(); err != nil {
					return
				}
			}
		})
	})
	var conns []*websocket.Conn
	for range 4 {
		conns = append(conns, wsDial(t, addr, "/ws", nil))
		<-joined
	}
	require.NoError(t, conns[3].WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "")))
	wsExpectClose(t, conns[3], 1000)
	m := NewPrepared(false, []byte(`{"tick":1}`))
	var sent int
	require.Eventually(t, func() bool {
		onLoop(t, s, func() { sent = Broadcast(m, room) })
		return sent == 3
	}, 10*time.Second, time.Millisecond)
	for _, conn := range conns[:3] {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		kind, p, err := conn.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, websocket.TextMessage, kind)
		require.Equal(t, `{"tick":1}`, string(p))
	}
	st := wsStats(t, s)
	require.Equal(t, 3, st.Open)
	require.Equal(t, uint64(4), st.UpgradesTotal)
	require.Equal(t, uint64(3*m.Len()), st.Routes[0].BytesOut)
}

// TestWSStatsPage: the page shows the figures as JSON and as text; every JSON field is
// defined in docs/accounting.md.
func TestWSStatsPage(t *testing.T) {
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		stats.Mount(s, "/debug/baton")
		s.Handle("GET /ws", wsEcho(nil))
	})
	conn := wsDial(t, addr, "/ws", nil)
	for range 3 {
		require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("hello")))
		_, _, err := conn.ReadMessage()
		require.NoError(t, err)
	}
	resp, err := http.Get("http://" + addr + "/debug/baton/websockets")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(body, &doc), string(body))
	assert.EqualValues(t, 1, doc["open"])
	routes := doc["routes"].([]any)
	require.Len(t, routes, 1)
	r := routes[0].(map[string]any)
	assert.Equal(t, "GET /ws", r["route"])
	assert.EqualValues(t, 3, r["messages_in"])
	assert.EqualValues(t, 15, r["bytes_in"])
	assert.EqualValues(t, 3, r["messages_out"])
	assert.EqualValues(t, 3, r["on_loop_per_message"].(map[string]any)["count"]) // recorded as the handler reads again
	conns := doc["connections"].([]any)
	require.Len(t, conns, 1)

	docBytes, err := os.ReadFile("../../docs/accounting.md")
	require.NoError(t, err)
	docFile := string(docBytes)
	var missing []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !strings.Contains(docFile, "`"+k+"`") {
					missing = append(missing, k)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	assert.Empty(t, missing, "docs/accounting.md does not define these websocket page fields")

	resp, err = http.Get("http://" + addr + "/debug/baton/websockets?format=text")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Contains(t, string(body), "GET /ws")
	require.Contains(t, string(body), "websockets open 1")
}

// maskBytes masks p with key as a client does.
func maskBytes(key, p []byte) []byte {
	out := append([]byte(nil), key...)
	for i, b := range p {
		out = append(out, b^key[i%4])
	}
	return out
}

// wsRaw is a client over a raw socket, for frames gorilla's client will not send.
type wsRaw struct {
	c  net.Conn
	br *bufio.Reader
}

func wsRawDial(t testing.TB, addr, path string) *wsRaw {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path, addr)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, 101, resp.StatusCode)
	return &wsRaw{c: c, br: br}
}

func (r *wsRaw) write(t testing.TB, p []byte) {
	t.Helper()
	_, err := r.c.Write(p)
	require.NoError(t, err)
}

// readFrame reads one server frame (unmasked).
func (r *wsRaw) readFrame(t testing.TB) (httpcodec.WSOpcode, []byte, bool) {
	t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var h [2]byte
	_, err := io.ReadFull(r.br, h[:])
	require.NoError(t, err)
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		_, err = io.ReadFull(r.br, b[:])
		n = int(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, err = io.ReadFull(r.br, b[:])
		n = int(binary.BigEndian.Uint64(b[:]))
	}
	require.NoError(t, err)
	p := make([]byte, n)
	_, err = io.ReadFull(r.br, p)
	require.NoError(t, err)
	return httpcodec.WSOpcode(h[0] & 0x0f), p, h[0]&0x80 != 0
}

// expectEnd asserts that the server closes the connection (EOF or reset), ignoring bytes.
func (r *wsRaw) expectEnd(t testing.TB) {
	t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, r.br)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server did not close the connection")
	}
}

// TestWSInputOverflow: a client that keeps sending while its handler does not read is
// closed with 1008 once its unread input passes MaxMessageBytes + 64 KiB, and counted.
func TestWSInputOverflow(t *testing.T) {
	release := make(chan struct{})
	done := make(chan error, 1)
	s, addr := startWS(t, loop.Config{}, Config{MaxMessageBytes: 1000}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			w, err := Upgrade(c, opts(c, Config{}))
			if err != nil {
				return
			}
			if _, _, err := w.ReadMessage(); err != nil {
				done <- err
				return
			}
			ev := loop.NewFuture[struct{}](s.Loop(0))
			go func() { <-release; ev.Resolve(struct{}{}, nil) }()
			_, _ = ev.Await(c, 0) // busy elsewhere: the next message waits
			_, _, err = w.ReadMessage()
			done <- err
		})
	})
	defer close(release)
	rc := wsRawDial(t, addr, "/ws")
	frame := append([]byte{0x82, 0x80 | 125}, maskBytes([]byte{1, 2, 3, 4}, make([]byte, 125))...)
	flood := bytes.Repeat(frame, (66<<10)/len(frame)+10) // more than 1000 + 64 KiB
	rc.write(t, flood)
	op, p, _ := rc.readFrame(t)
	require.Equal(t, httpcodec.WSClose, op)
	require.Equal(t, uint16(1008), binary.BigEndian.Uint16(p))
	rc.expectEnd(t)
	require.Equal(t, uint64(1), wsStats(t, s).InputOverflows)
	release <- struct{}{}
	require.ErrorIs(t, recvErr(t, done), ErrSlowConsumer)
}

// TestWSStatsHandler: the admin handler serves the websockets page too.
func TestWSStatsHandler(t *testing.T) {
	s, addr := startServer(t, loop.Config{}, func(s *loop.Server) { s.Handle("GET /ws", wsEcho(nil)) })
	_ = wsDial(t, addr, "/ws", nil)
	require.Eventually(t, func() bool { return wsStats(t, s).Open == 1 }, 10*time.Second, time.Millisecond)
	rec := httptest.NewRecorder()
	stats.Handler(s).ServeHTTP(rec, httptest.NewRequest("GET", "/admin/websockets?format=text", nil))
	require.Equal(t, 200, rec.Code)
	require.Contains(t, rec.Body.String(), "websockets open 1")
	rec = httptest.NewRecorder()
	stats.Handler(s).ServeHTTP(rec, httptest.NewRequest("GET", "/admin/websockets", nil))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.Contains(t, rec.Body.String(), `"open": 1`)
}

// TestWSUpgradeWhileDraining: a handler that upgrades once the drain has begun gets an
// error and the client 503.
func TestWSUpgradeWhileDraining(t *testing.T) {
	errs := make(chan error, 1)
	started := make(chan struct{})
	s := newServer(t, loop.Config{}, Config{})
	s.Handle("GET /ws", func(c *loop.Ctx) {
		close(started)
		_, _ = s.Draining().Await(c, 0)
		_, err := Upgrade(c, opts(c, Config{}))
		errs <- err
	})
	errc := serveInBackground(t, s)
	type result struct {
		resp *http.Response
		err  error
	}
	res := make(chan result, 1)
	go func() {
		_, resp, err := websocket.DefaultDialer.Dial("ws://"+s.Addr().String()+"/ws", nil)
		res <- result{resp, err}
	}()
	<-started
	require.NoError(t, s.Shutdown(context.Background()))
	require.ErrorIs(t, <-errc, loop.ErrServerClosed)
	require.ErrorContains(t, recvErr(t, errs), "shutting down")
	r := <-res
	require.Error(t, r.err)
	require.Equal(t, 503, r.resp.StatusCode)
}
