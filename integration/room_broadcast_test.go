package integration

import (
	"io"
	"net/http"
	"strconv"
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

// broadcastRooms is two rooms, a and b, each broadcasting "<name>:<seq>" to its members at
// every tick, and a /play route whose WebSocket joins one of them with Room.AttachConn. A
// player's message "leave" detaches it (it is then sent "left" and, five broadcasts later,
// "bye"), "move" attaches it to room b (it is then sent "moved").
type broadcastRooms struct {
	srv     *loop.Server
	base    string
	a, b    *room.Room[struct{}]
	seq     map[string]int // loop-confined
	sentA   atomic.Int64   // what room a's latest broadcast reached
	handled chan error     // each /play handler's end
}

func startBroadcastRooms(t *testing.T) *broadcastRooms {
	br := &broadcastRooms{seq: map[string]int{}, handled: make(chan error, 10)}
	br.srv = loop.New(looptest.Config(t, loop.Config{}))
	br.srv.Handle("GET /play", func(c *loop.Ctx) {
		r := br.a
		if c.Query("room") == "b" {
			r = br.b
		}
		w, err := ws.Upgrade(c, ws.Config{})
		if err != nil {
			return
		}
		if r.AttachConn(&c.Task, w) != nil {
			return
		}
		defer func() { br.handled <- c.Err() }()
		for {
			_, msg, err := w.ReadMessage()
			if err != nil {
				return
			}
			switch string(msg) {
			case "leave":
				r.Detach(&c.Task)
				if w.WriteText([]byte("left")) != nil {
					return
				}
				for at := br.seq["a"]; br.seq["a"] < at+5; { // room a broadcasts five more times
					if c.Sleep(time.Millisecond) != nil {
						return
					}
				}
				if w.WriteText([]byte("bye")) != nil {
					return
				}
			case "move":
				r = br.b
				if r.AttachConn(&c.Task, w) != nil || w.WriteText([]byte("moved")) != nil {
					return
				}
			}
		}
	})
	br.base = strings.Replace(looptest.Start(t, br.srv), "http", "ws", 1)
	tick := func(r *room.Room[struct{}], tk *room.Tick[struct{}]) {
		name := r.Name()
		br.seq[name]++
		sent := room.Broadcast(r, ws.NewPrepared(false, []byte(name+":"+strconv.Itoa(br.seq[name]))))
		if name == "a" {
			br.sentA.Store(int64(sent))
		}
	}
	looptest.OnLoop(t, br.srv.Loop(0), func() {
		var err error
		br.a, err = room.New(br.srv.Loop(0), room.Config[struct{}]{Name: "a", Period: 5 * time.Millisecond, Tick: tick})
		require.NoError(t, err)
		br.b, err = room.New(br.srv.Loop(0), room.Config[struct{}]{Name: "b", Period: 5 * time.Millisecond, Tick: tick})
		require.NoError(t, err)
	})
	return br
}

func (br *broadcastRooms) dial(t *testing.T, name string) *websocket.Conn {
	conn, _, err := websocket.DefaultDialer.Dial(br.base+"/play?room="+name, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func (br *broadcastRooms) members(t *testing.T, r *room.Room[struct{}]) (n int) {
	looptest.OnLoop(t, br.srv.Loop(0), func() { n = r.Members() })
	return n
}

// readStates reads messages until one is not a state of room prefix ("a:", "b:") or n
// states were read, and checks that the states are consecutive: every tick's broadcast
// arrived once, none twice, none lost. It returns the first other message ("" if none).
func readStates(t *testing.T, conn *websocket.Conn, prefix string, n int) (states int, other string) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	last := -1
	for states < n {
		_, msg, err := conn.ReadMessage()
		require.NoError(t, err)
		s, ok := strings.CutPrefix(string(msg), prefix)
		if !ok {
			return states, string(msg)
		}
		seq, err := strconv.Atoi(s)
		require.NoError(t, err)
		if last >= 0 {
			require.Equal(t, last+1, seq, "a tick's state lost or repeated")
		}
		last = seq
		states++
	}
	return states, ""
}

// TestRoomBroadcastToWebSocketMembers: room.Broadcast sends each tick's state once to every
// WebSocket member (gorilla/websocket clients over real sockets), and a member stops
// receiving once it leaves: detached (Detach), moved to another room (AttachConn), gone
// (the client closed), or its room stopped (its connection closes with 1000).
func TestRoomBroadcastToWebSocketMembers(t *testing.T) {
	br := startBroadcastRooms(t)
	stayer, leaver, mover := br.dial(t, "a"), br.dial(t, "a"), br.dial(t, "a")
	require.Eventually(t, func() bool { return br.sentA.Load() == 3 }, 10*time.Second, time.Millisecond,
		"room a's broadcast never reached its three players")
	for _, c := range []*websocket.Conn{stayer, leaver, mover} {
		n, other := readStates(t, c, "a:", 20)
		require.Equal(t, 20, n, "got %q", other)
	}

	// Detached: after "left" the next message is "bye", sent five broadcasts later.
	require.NoError(t, leaver.WriteMessage(websocket.TextMessage, []byte("leave")))
	_, other := readStates(t, leaver, "a:", 1<<30)
	require.Equal(t, "left", other)
	_, msg, err := leaver.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, "bye", string(msg), "a detached member received a broadcast")

	// Moved: after "moved" only room b's states, consecutive.
	require.NoError(t, mover.WriteMessage(websocket.TextMessage, []byte("move")))
	_, other = readStates(t, mover, "a:", 1<<30)
	require.Equal(t, "moved", other)
	n, other := readStates(t, mover, "b:", 20)
	require.Equal(t, 20, n, "a moved member got %q", other)

	require.Eventually(t, func() bool { return br.sentA.Load() == 1 }, 10*time.Second, time.Millisecond)
	n, other = readStates(t, stayer, "a:", 20)
	require.Equal(t, 20, n, "got %q", other)
	assert.Equal(t, 1, br.members(t, br.a), "the stayer only: the leaver's handler was detached, the mover's moved")

	// Gone: the client closes; the member leaves with its handler.
	require.NoError(t, stayer.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye")))
	require.Eventually(t, func() bool { return br.sentA.Load() == 0 && br.members(t, br.a) == 0 }, 10*time.Second, time.Millisecond)

	// Room b stops: its member's handler ends with ErrRoomStopped, its connection closes.
	br.b.Stop()
	select {
	case err := <-br.handled:
		assert.NoError(t, err, "the stayer's handler ended on the client's close")
	case <-time.After(10 * time.Second):
		t.Fatal("a handler did not end")
	}
	select {
	case err := <-br.handled:
		assert.ErrorIs(t, err, room.ErrRoomStopped)
	case <-time.After(10 * time.Second):
		t.Fatal("the moved member's handler did not end when room b stopped")
	}
	require.NoError(t, mover.SetReadDeadline(time.Now().Add(10*time.Second)))
	for {
		if _, _, err = mover.ReadMessage(); err != nil {
			break
		}
	}
	assert.True(t, websocket.IsCloseError(err, websocket.CloseNormalClosure), "%v", err)
	<-br.b.Done()
}

// BenchmarkRoomBroadcast measures room.Broadcast of a 200-byte prepared message to 100
// WebSocket members (AttachConn) against ws.Broadcast to the same connections kept in the
// app's own slice, per recipient: only the broadcast is timed (ns/send); the output is
// written outside the timing and the clients read it. allocs/op counts the whole run per
// recipient, the HTTP request that drives it included.
func BenchmarkRoomBroadcast(b *testing.B) {
	for _, via := range []string{"room", "ws"} {
		b.Run("via="+via, func(b *testing.B) { benchRoomBroadcast(b, via) })
	}
}

func benchRoomBroadcast(b *testing.B, via string) {
	const members = 100
	var r *room.Room[struct{}]
	var conns []*ws.Conn
	joined := make(chan struct{}, members)
	elapsed := make(chan time.Duration, 1)
	srv := loop.New(looptest.Config(b, loop.Config{}))
	srv.Handle("GET /member", func(c *loop.Ctx) {
		w, err := ws.Upgrade(c, ws.Config{})
		if err != nil || r.AttachConn(&c.Task, w) != nil {
			return
		}
		conns = append(conns, w)
		joined <- struct{}{}
		for {
			if _, _, err := w.ReadMessage(); err != nil {
				return
			}
		}
	})
	srv.Handle("GET /tick", func(c *loop.Ctx) {
		n, _ := strconv.Atoi(c.Query("n"))
		m := ws.NewPrepared(true, make([]byte, 200))
		var spent time.Duration
		for range n {
			start := time.Now()
			var sent int
			if via == "room" {
				sent = room.Broadcast(r, m)
			} else {
				sent = ws.Broadcast(m, conns)
			}
			spent += time.Since(start)
			if sent != members {
				c.String(500, "a member left\n")
				return
			}
			_ = c.Sleep(0) // the loop writes the output
		}
		elapsed <- spent
		c.String(200, "ok\n")
	})
	base := looptest.Start(b, srv)
	looptest.OnLoop(b, srv.Loop(0), func() {
		var err error
		r, err = room.New(srv.Loop(0), room.Config[struct{}]{Name: "bench", Period: time.Hour, Tick: func(*room.Room[struct{}], *room.Tick[struct{}]) {}})
		require.NoError(b, err)
	})
	for range members {
		conn, _, err := websocket.DefaultDialer.Dial(strings.Replace(base, "http", "ws", 1)+"/member", nil)
		require.NoError(b, err)
		b.Cleanup(func() { _ = conn.Close() })
		go func() { _, _ = io.Copy(io.Discard, conn.NetConn()) }()
		<-joined
	}
	b.ReportAllocs()
	b.ResetTimer()
	n := max(b.N/members, 1)
	resp, err := http.Get(base + "/tick?n=" + strconv.Itoa(n))
	require.NoError(b, err)
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(b, 200, resp.StatusCode)
	b.StopTimer()
	b.ReportMetric(float64(<-elapsed)/float64(n*members), "ns/send")
	r.Stop()
}
