package ws

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
)

// wsPingFrame is a masked client ping carrying payload.
func wsPingFrame(payload []byte) []byte {
	return append([]byte{0x89, 0x80 | byte(len(payload))}, maskBytes([]byte{9, 8, 7, 6}, payload)...)
}

// TestWSPingFloodBounded: a client that floods pings and never reads does not make the
// server queue pongs without bound: the answers count against MaxQueuedBytes (past it
// only the latest ping is answered, once the client has read its output down), other
// connections are served meanwhile, and once the client goes its connection and queue
// are gone. "idle": the handler writes nothing; "backlog": the handler's writer is parked
// on a backlog the client does not read, so the output is over the bound throughout.
func TestWSPingFloodBounded(t *testing.T) {
	const limit = 64 << 10
	const msgSize = 16 << 10
	for _, backlog := range []int{0, 16 << 20} {
		name := map[bool]string{true: "backlog", false: "idle"}[backlog > 0]
		t.Run(name, func(t *testing.T) {
			s, addr := startWS(t, loop.Config{}, Config{MaxQueuedBytes: limit, StallTimeout: -1, PingInterval: -1},
				func(s *loop.Server) {
					s.Handle("GET /echo", wsEcho(nil))
					s.Handle("GET /hello", func(c *loop.Ctx) { c.String(200, "hello\n") })
					s.Handle("GET /ws", func(c *loop.Ctx) {
						w, err := Upgrade(c, opts(c, Config{}))
						if err != nil {
							return
						}
						p := bytes.Repeat([]byte("d"), msgSize)
						for sent := 0; sent < backlog; sent += len(p) {
							if w.WriteBinary(p) != nil {
								return
							}
						}
						for {
							if _, _, err := w.ReadMessage(); err != nil {
								return
							}
						}
					})
				})
			rc := wsRawDial(t, addr, "/ws")
			// The most the server may queue: the bound, the frame that took it past the
			// bound (a parked writer's), one pong.
			bound := limit + msgSize + 4 + httpcodec.WSMaxControlPayload + 2
			if backlog > 0 {
				require.Eventually(t, func() bool { return wsStats(t, s).QueuedBytes > limit }, 10*time.Second, time.Millisecond,
					"the writer did not fill the output past the bound")
			}
			// 125-byte payloads in writes of 8 frames: 16 MiB of pings, whose pongs (127
			// bytes each) would be 15.5 MiB if every one were queued; the kernel's buffers
			// take a few MiB of them. (The client's receive buffer is left at its default:
			// shrunk to 4 KiB, loopback TCP stalls the client's own sending in
			// retransmission backoff once it overfills.)
			ping := wsPingFrame(bytes.Repeat([]byte("p"), 125))
			batch := bytes.Repeat(ping, 8)
			const total = 16 << 20
			peak := 0
			other := wsDial(t, addr, "/echo", nil)
			for sent := 0; sent < total; sent += len(batch) {
				_ = rc.c.SetWriteDeadline(time.Now().Add(20 * time.Second))
				_, err := rc.c.Write(batch)
				require.NoError(t, err, "the server stopped reading the pings")
				if sent%(1<<20) < len(batch) {
					q := wsStats(t, s).QueuedBytes
					peak = max(peak, q)
					require.LessOrEqual(t, q, bound, "queued output past the bound after %d MiB of pings", sent>>20)
					// Another WebSocket and a plain request are answered meanwhile.
					require.NoError(t, other.WriteMessage(websocket.TextMessage, []byte("still there")))
					_ = other.SetReadDeadline(time.Now().Add(10 * time.Second))
					_, p, err := other.ReadMessage()
					require.NoError(t, err)
					require.Equal(t, "still there", string(p))
					resp, err := http.Get("http://" + addr + "/hello")
					require.NoError(t, err)
					_ = resp.Body.Close()
					require.Equal(t, 200, resp.StatusCode)
				}
			}
			st := wsStats(t, s)
			peak = max(peak, st.QueuedBytes)
			t.Logf("after %d MiB of pings: queued %d B (peak sampled %d B), bound %d B", total>>20, st.QueuedBytes, peak, bound)
			require.LessOrEqual(t, st.QueuedBytes, bound)

			// The client reads now: the whole backlog and the pongs arrive, the last pong
			// answering the last ping (between data frames, wherever the output was under
			// the bound again).
			rc.write(t, wsPingFrame([]byte("last")))
			data, pongs, last := 0, 0, false
			for !last || data < backlog {
				op, p, _ := rc.readFrame(t)
				if op == httpcodec.WSBinary {
					data += len(p)
					continue
				}
				require.Equal(t, httpcodec.WSPong, op)
				require.False(t, last, "a pong after the last ping's")
				pongs++
				last = string(p) == "last"
			}
			t.Logf("read back %d B of data and %d pongs for %d pings", data, pongs, total/len(ping)+1)
			require.Equal(t, backlog, data)
			_ = rc.c.Close()
			require.Eventually(t, func() bool { st := wsStats(t, s); return st.Open == 1 && st.QueuedBytes == 0 },
				10*time.Second, time.Millisecond, "the flooder's connection and queue are gone")
		})
	}
}

// TestWSControlWhileHandlerBusy: the loop answers control frames whatever the handler is
// doing. The handler upgrades and then waits on an Event without reading (the flagship's
// /ws while its ticket waits for a match): a ping is answered before and after a message
// that the handler has not read arrived, and a close frame is echoed at once. Once the
// handler reads, it gets the messages that arrived, in order, then the client's close.
// The task form and the callback form with its handler still running.
func TestWSControlWhileHandlerBusy(t *testing.T) {
	for _, form := range []string{"task", "callback"} {
		t.Run(form, func(t *testing.T) {
			release := make(chan struct{})
			got := make(chan string, 8)
			done := make(chan error, 1)
			s, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
				s.Handle("GET /ws", func(c *loop.Ctx) {
					ev := loop.NewFuture[struct{}](s.Loop(0))
					go func() { <-release; ev.Resolve(struct{}{}, nil) }()
					if form == "callback" {
						_, err := UpgradeTo(c, opts(c, Config{}), Handler{
							OnMessage: func(w *Conn, _ bool, p []byte) { got <- string(p) },
							OnClose:   func(w *Conn, err error) { done <- err },
						})
						if err != nil {
							return
						}
						_, _ = ev.Await(c, 0) // the handler has not returned: messages wait for it
						return
					}
					w, err := Upgrade(c, opts(c, Config{}))
					if err != nil {
						return
					}
					_, _ = ev.Await(c, 0) // busy elsewhere: nothing reads
					for {
						_, p, err := w.ReadMessage()
						if err != nil {
							done <- err
							return
						}
						got <- string(p)
					}
				})
			})
			conn := wsDial(t, addr, "/ws", nil)
			pongs := make(chan string, 8)
			conn.SetPongHandler(func(p string) error { pongs <- p; return nil })
			closed := make(chan error, 1)
			go func() {
				for {
					if _, _, err := conn.ReadMessage(); err != nil {
						closed <- err
						return
					}
				}
			}()
			expectPong := func(p string) {
				t.Helper()
				require.NoError(t, conn.WriteControl(websocket.PingMessage, []byte(p), time.Now().Add(5*time.Second)))
				select {
				case got := <-pongs:
					require.Equal(t, p, got)
				case <-time.After(5 * time.Second):
					t.Fatalf("no pong for ping %q while the handler is busy", p)
				}
			}
			expectPong("before any message")
			require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("one")))
			require.NoError(t, conn.WriteMessage(websocket.BinaryMessage, []byte("two")))
			expectPong("behind two unread messages")
			require.NoError(t, conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4001, "bye"), time.Now().Add(5*time.Second)))
			select {
			case err := <-closed:
				var ce *websocket.CloseError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, 4001, ce.Code, "the close code is echoed")
			case <-time.After(5 * time.Second):
				t.Fatal("the close frame was not echoed while the handler is busy")
			}
			close(release)
			for _, want := range []string{"one", "two"} {
				select {
				case p := <-got:
					require.Equal(t, want, p)
				case <-time.After(10 * time.Second):
					t.Fatalf("the handler did not get %q", want)
				}
			}
			var ce *CloseError
			require.ErrorAs(t, recvErr(t, done), &ce)
			require.Equal(t, uint16(4001), ce.Code)
			require.Eventually(t, func() bool { return wsStats(t, s).Open == 0 }, 10*time.Second, time.Millisecond)
		})
	}
}

// TestWSUpgradeRefusedWhileSaturated: while the loop fails readiness for its lag (a task
// holds it 150 ms per slice, past Config.WebSocket.SaturatedLag, for over a second: the lag
// sampler, due every 100 ms, runs about 50 ms late each time), an
// upgrade is refused with 503
// and Retry-After, counted on the websockets page, which answers meanwhile; once the loop
// keeps up again the upgrade succeeds.
func TestWSUpgradeRefusedWhileSaturated(t *testing.T) {
	var stop atomic.Bool
	hogging := make(chan struct{})
	wcfg := Config{SaturatedLag: 20 * time.Millisecond, SaturatedUtilisation: -1}
	lim := limitsOf(&wcfg)
	s, addr := startWS(t, loop.Config{}, wcfg, func(s *loop.Server) {
		s.Handle("GET /ws", wsEcho(nil))
		s.Handle("GET /hog", func(c *loop.Ctx) {
			close(hogging)
			for !stop.Load() {
				for end := time.Now().Add(150 * time.Millisecond); time.Now().Before(end); {
				}
				_ = c.Sleep(0)
			}
			c.String(200, "done\n")
		})
		stats.Mount(s, "/debug")
	})
	t.Cleanup(func() { stop.Store(true) }) // before the server's own cleanup drains it
	hogDone := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/hog")
		if err == nil {
			_ = resp.Body.Close()
		}
		hogDone <- err
	}()
	<-hogging
	require.Eventually(t, func() bool {
		var busy string
		onLoop(t, s, func() { busy = saturated(s.Loop(0), &lim) })
		return busy == "loop_lag"
	}, 10*time.Second, time.Millisecond)

	d := &websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.Dial("ws://"+addr+"/ws", nil)
	if conn != nil {
		_ = conn.Close()
	}
	require.Error(t, err, "upgraded while the loop is saturated")
	require.Equal(t, 503, resp.StatusCode)
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	require.Positive(t, ra)
	t.Logf("refused with 503, Retry-After %d s, loop lag %.0f ms", ra, float64(s.Loop(0).Vitals().Lag)/1e6)

	// The admin page answers while the loop is saturated, and counts the refusal.
	page, err := http.Get("http://" + addr + "/debug/websockets")
	require.NoError(t, err)
	var doc Stats
	require.NoError(t, json.NewDecoder(page.Body).Decode(&doc))
	_ = page.Body.Close()
	require.Equal(t, 200, page.StatusCode)
	require.Equal(t, uint64(1), doc.SaturatedRefusals)

	stop.Store(true)
	require.NoError(t, <-hogDone)
	require.Eventually(t, func() bool {
		var busy string
		onLoop(t, s, func() { busy = saturated(s.Loop(0), &lim) })
		return busy == ""
	}, 10*time.Second, time.Millisecond)
	conn = wsDial(t, addr, "/ws", nil)
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("in")))
	_, p, err := conn.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, "in", string(p))
}
