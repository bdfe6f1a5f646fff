package promexport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/health"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/loop/ws"
	"github.com/batonrt/baton/offload"
)

// flagship is a server shaped like examples/gameserver for the tests of the exposition as
// a whole (series counts, promtool, the dashboard's and the rules' names): the flagship's
// ten game routes (one a WebSocket), its stats pages and health probes on the same port,
// rooms that tick (one over budget on every tick, one with a queue that drops inputs), a
// gate and offloaded work.
type flagship struct {
	srv  *loop.Server
	base string

	mu    sync.Mutex
	rooms map[string]*room.Room[int]
}

// flagshipRoutes are the game routes, as examples/gameserver registers them.
var flagshipRoutes = []string{
	"GET /", "POST /tickets", "GET /tickets/{id}", "DELETE /tickets/{id}", "GET /ws",
	"GET /rooms/{id}/state", "POST /rooms/{id}/input", "GET /leaderboard", "GET /players/{id}", "GET /rooms",
}

// newFlagship starts it, with the routes extra adds besides.
func newFlagship(t *testing.T, extra ...func(*loop.Server)) *flagship {
	t.Helper()
	f := &flagship{srv: loop.New(looptest.Config(t, loop.Config{})), rooms: map[string]*room.Room[int]{}}
	s := f.srv
	gate := s.NewGate("db", 2, 16)
	ok := func(c *loop.Ctx) { c.String(200, "ok") }
	require.NoError(t, s.AddStats(ws.Section)) // as the flagship: the page before the first upgrade
	s.Handle("GET /", ok)
	s.Handle("POST /tickets", func(c *loop.Ctx) { c.String(201, "ticket") })
	s.Handle("GET /tickets/{id}", ok)
	s.Handle("DELETE /tickets/{id}", func(c *loop.Ctx) { c.Bytes(204, "", nil) })
	s.Handle("GET /ws", func(c *loop.Ctx) {
		conn, err := ws.Upgrade(c, ws.Config{})
		if err != nil {
			return
		}
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			_ = conn.WriteText(data)
		}
	})
	s.Handle("GET /rooms/{id}/state", func(c *loop.Ctx) { c.String(404, "no such room") })
	s.Handle("POST /rooms/{id}/input", func(c *loop.Ctx) {
		f.mu.Lock()
		r := f.rooms[c.PathValue("id")]
		f.mu.Unlock()
		if r == nil {
			c.String(404, "no such room")
			return
		}
		// Two inputs in one slice: the tick cannot run between them, so with a queue of one
		// the second is always dropped.
		for v := range 2 {
			if err := r.Input(v); err != nil && !errors.Is(err, room.ErrInputDropped) {
				c.String(500, err.Error())
				return
			}
		}
		c.Bytes(204, "", nil)
	})
	s.Handle("GET /leaderboard", func(c *loop.Ctx) {
		if err := gate.Enter(c); err != nil {
			c.String(503, err.Error())
			return
		}
		_, err := offload.Do(c, func(context.Context) (int, error) { return 1, nil })
		gate.Leave()
		if err != nil {
			c.String(500, err.Error())
			return
		}
		c.String(200, "[]")
	})
	s.Handle("GET /players/{id}", ok)
	s.Handle("GET /rooms", ok)
	stats.Mount(s, "/debug/baton")
	checks, err := health.New(s, health.Config{})
	require.NoError(t, err)
	checks.Mount()
	for _, fn := range extra {
		fn(s)
	}
	f.base = looptest.Start(t, s)

	// Two arenas: "hot" overruns on every tick (a budget of 1 ns), "busy" has a queue of one
	// input, so each POST of inputs has one dropped.
	made := make(chan error, 1)
	require.NoError(t, s.Loop(0).Post(func() {
		for _, rc := range []room.Config[int]{
			{Name: "hot", Period: 5 * time.Millisecond, Budget: time.Nanosecond},
			{Name: "busy", Period: 50 * time.Millisecond, InputQueue: 1},
		} {
			rc.Tick = func(r *room.Room[int], t *room.Tick[int]) { t.DrainInputs(func(int) {}) }
			r, err := room.New(s.Loop(0), rc)
			if err != nil {
				made <- err
				return
			}
			f.mu.Lock()
			f.rooms[rc.Name] = r
			f.mu.Unlock()
		}
		made <- nil
	}))
	require.NoError(t, <-made)
	return f
}

// play sends each game route traffic (n requests each, one WebSocket session that ends)
// and requests the stats pages and the health probes too.
func (f *flagship) play(t *testing.T, n int) {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path string, want int) {
		t.Helper()
		req, err := http.NewRequest(method, f.base+path, nil)
		require.NoError(t, err)
		resp, err := cl.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "%s %s", method, path)
	}
	for i := range n {
		do("GET", "/", 200)
		do("POST", "/tickets", 201)
		do("GET", fmt.Sprintf("/tickets/%d", i), 200)
		do("DELETE", fmt.Sprintf("/tickets/%d", i), 204)
		do("GET", fmt.Sprintf("/rooms/%d/state", i), 404)
		do("POST", "/rooms/busy/input", 204)
		do("GET", "/leaderboard", 200)
		do("GET", fmt.Sprintf("/players/%d", i), 200)
		do("GET", "/rooms", 200)
	}
	for _, p := range []string{"/debug/baton/loop", "/debug/baton/routes", "/debug/baton/rooms", "/debug/baton/websockets", "/healthz", "/readyz"} {
		do("GET", p, 200)
	}
	conn, _, err := websocket.DefaultDialer.Dial(strings.Replace(f.base, "http://", "ws://", 1)+"/ws", nil)
	require.NoError(t, err)
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("hi")))
	_, got, err := conn.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, "hi", string(got))
	require.NoError(t, conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")))
	_, _, err = conn.ReadMessage() // the server's close frame
	require.Error(t, err)
	conn.Close()
}
