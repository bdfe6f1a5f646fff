package integration

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/ws"
)

// gatedOpener opens directory handles whose KeepAlive fails while blocked is set: a node
// cut off from its directory, without stopping the process.
type gatedOpener struct {
	op      directory.Opener
	blocked atomic.Bool
}

func (g *gatedOpener) Open(ctx context.Context, cfg directory.Config) (directory.Directory, error) {
	d, err := g.op.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return gatedDir{d, g}, nil
}

type gatedDir struct {
	directory.Directory
	g *gatedOpener
}

func (d gatedDir) KeepAlive(ctx context.Context) (time.Time, error) {
	if d.g.blocked.Load() {
		return time.Time{}, directory.Unavailable("keep-alive", errors.New("blocked by the test"))
	}
	return d.Directory.KeepAlive(ctx)
}

// seatedHello is what servePlay sends a seated player first.
type seatedHello struct {
	Room   string          `json:"room"`
	Node   string          `json:"node"`
	Token  directory.Token `json:"token"`
	Player string          `json:"player"`
}

// servePlay is docs/cluster.md's recipe "WebSocket members of a clustered room", the glue a
// game writes between loop/room and loop/ws (which know nothing of each other): GET
// /play/{room}?seat=S seats the player (room.Admit: 401 for a bad seat, 307 to the owner
// for a room another node owns, 503 when the directory is out of reach), upgrades, and
// makes the connection a member of the room. When the room moved (its ownership lapsed:
// the member's task is cancelled with room.ErrMoved), the handler closes the WebSocket
// with room.CloseMoved (4001) and the room's name as the reason: the client asks any
// node's /join again.
func servePlay(node string) func(c *loop.Ctx) {
	return func(c *loop.Ctx) {
		name := c.PathValue("room")
		r, seat, ok := room.Admit(c, name, func(l *loop.Loop) (*room.Room[string], error) {
			return room.New(l, room.Config[string]{Name: name, Period: 10 * time.Millisecond,
				Tick: func(_ *room.Room[string], tk *room.Tick[string]) { tk.DrainInputs(func(string) {}) }})
		})
		if !ok {
			return
		}
		// The seat token is the credential (not a cookie), and the page that joined may
		// come from another node: any origin may connect.
		conn, err := ws.Upgrade(c, ws.Config{CheckOrigin: func(*loop.Ctx, string) bool { return true }})
		if err != nil {
			return
		}
		if err := r.Attach(&c.Task); err != nil {
			if errors.Is(err, room.ErrMoved) {
				_ = conn.Close(room.CloseMoved, name)
			}
			return
		}
		hello, _ := json.Marshal(seatedHello{Room: name, Node: node, Token: r.Token(), Player: seat.Player})
		if conn.WriteText(hello) != nil {
			return
		}
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				break
			}
			_ = r.Input(string(msg))
		}
		if errors.Is(c.Err(), room.ErrMoved) {
			_ = conn.Close(room.CloseMoved, name) // the task is cancelled: this does not wait
		}
	}
}

// clusterNode starts a node of the directory op opens with the recipe's routes (GET
// /join/{room}?player=P, GET /play/{room}?seat=S) and waits until it holds a lease.
func clusterNode(t *testing.T, id string, op directory.Opener, seats *directory.SeatSigner, ttl time.Duration) string {
	t.Helper()
	s := loop.New(looptest.Config(t, loop.Config{}))
	require.NoError(t, room.UseDirectory(s, op, room.NodeConfig{
		Directory: directory.Config{Node: id, TTL: ttl, Margin: ttl / 5}, Seats: seats}))
	s.Handle("GET /join/{room}", func(c *loop.Ctx) { room.Join(c, c.PathValue("room"), c.Query("player")) })
	s.Handle("GET /play/{room}", servePlay(id))
	base := looptest.Start(t, s)
	addr := strings.TrimPrefix(base, "http://")
	require.Eventually(t, func() bool { _, err := joinRoom(addr, "probe", "nobody"); return err == nil },
		10*time.Second, 10*time.Millisecond, "node %s did not open its directory handle", id)
	return addr
}

// joinAnswer is room.Join's answer.
type joinAnswer struct {
	Room, Node, Addr, Seat string
	Token                  directory.Token
}

// joinRoom asks the node at addr where room is, for player.
func joinRoom(addr, roomName, player string) (joinAnswer, error) {
	resp, err := http.Get("http://" + addr + "/join/" + roomName + "?player=" + url.QueryEscape(player))
	if err != nil {
		return joinAnswer{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return joinAnswer{}, errors.New(resp.Status)
	}
	var a joinAnswer
	return a, json.NewDecoder(resp.Body).Decode(&a)
}

// play dials the WebSocket a join answer names and reads the hello.
func play(t *testing.T, a joinAnswer) (*websocket.Conn, seatedHello) {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial("ws://"+a.Addr+"/play/"+a.Room+"?seat="+url.QueryEscape(a.Seat), nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	var h seatedHello
	require.NoError(t, conn.ReadJSON(&h))
	return conn, h
}

// TestClusterWebSocketMoved: two nodes on one directory, real WebSocket clients. A player
// joined through either node is seated at the owner; the same seat presented to the other
// node's WebSocket endpoint gets 307 with Location at the owner (no twin room: the browser
// client reads no Location, which is why it joins over HTTP first and asks /join again
// when its socket fails). When the owner stops renewing its lease, its member is closed
// with 4001 (room.CloseMoved) and reason "arena", and a join through any node then seats
// the player on the other node under a greater token.
func TestClusterWebSocketMoved(t *testing.T) {
	emb := directory.NewEmbedded()
	seats, err := directory.NewSeatSigner(directory.SeatConfig{Key: []byte(strings.Repeat("s", 32))})
	require.NoError(t, err)
	const ttl = time.Second
	gates := map[string]*gatedOpener{"a": {op: emb}, "b": {op: emb}}
	addrs := map[string]string{}
	for _, id := range []string{"a", "b"} {
		addrs[id] = clusterNode(t, id, gates[id], seats, ttl)
	}

	a, err := joinRoom(addrs["b"], "arena", "ann")
	require.NoError(t, err)
	conn, hello := play(t, a)
	defer conn.Close()
	owner, other := hello.Node, map[string]string{"a": "b", "b": "a"}[hello.Node]
	assert.Equal(t, a.Node, owner, "the player is seated on the node Join named")
	assert.Equal(t, "ann", hello.Player)
	assert.Positive(t, int64(hello.Token))
	again, err := joinRoom(addrs[other], "arena", "bob")
	require.NoError(t, err)
	assert.Equal(t, owner, again.Node, "a join through the other node names the owner")
	assert.Equal(t, hello.Token, again.Token)

	// The seat at the wrong node: 307 to the owner, never a second room.
	wrong := again
	wrong.Addr = addrs[other]
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+wrong.Addr+"/play/arena?seat="+url.QueryEscape(wrong.Seat), nil)
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	require.NotNil(t, resp)
	resp.Body.Close()
	assert.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode)
	loc, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	assert.Equal(t, addrs[owner], loc.Host, "Location names the owner")
	assert.Equal(t, "/play/arena", loc.Path)

	// The owner is cut off from the directory: its member hears that the room moved.
	cut := time.Now()
	gates[owner].blocked.Store(true)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(3*ttl)))
	var code int
	var reason string
	for {
		_, _, err := conn.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			code, reason = ce.Code, ce.Text
			break
		}
		require.NoError(t, err, "the member was not closed with a close frame")
	}
	closedAfter := time.Since(cut)
	assert.Equal(t, room.CloseMoved, code)
	assert.Equal(t, "arena", reason, "the reason names the room to join again")

	// The client joins again through any node: once the directory has freed the room, it
	// is placed on the live node and claimed there under a greater token.
	var moved joinAnswer
	require.Eventually(t, func() bool {
		moved, err = joinRoom(addrs[owner], "arena", "ann")
		return err == nil && moved.Node == other
	}, 5*time.Second, 20*time.Millisecond, "the room was not placed on the other node")
	conn2, hello2 := play(t, moved)
	defer conn2.Close()
	assert.Equal(t, other, hello2.Node)
	assert.Greater(t, hello2.Token, hello.Token)
	t.Logf("closed with %d %q %v after the cut; re-seated on %s (token %d -> %d) %v after it",
		code, reason, closedAfter.Round(time.Millisecond), other, hello.Token, hello2.Token, time.Since(cut).Round(time.Millisecond))
	gates[owner].blocked.Store(false)
}
