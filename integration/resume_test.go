package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
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
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/loop/ws"
)

// The client protocol (docs/client-protocol.md) over real sockets: nodes on one embedded
// directory in this process, gorilla/websocket clients speaking the contract.

var resumeKey = []byte(strings.Repeat("k", 32))

// seqInput is the test rooms' input: the player (stamped by the server) and the client's
// input, which is its own sequence number, so that the room's state shows which inputs it
// took and in which order.
type seqInput struct {
	Player string `json:"player"`
	N      uint64 `json:"n"`
}

// seqGame is a test room's state: every input taken, per player, and what the seat hooks
// told it. It travels in handoffs (JSON).
type seqGame struct {
	Inputs map[string][]uint64 `json:"inputs"`
	Events []string            `json:"events"`
}

// resumeNode is a node of the test cluster: its games by room (loop-confined: one loop),
// and every seat hook call as "node:event:player" on events.
type resumeNode struct {
	id     string
	addr   string
	games  map[string]*seqGame
	events chan string
	hold   time.Duration

	slowRestore   atomic.Int64 // ns Restore sleeps (on the target's loop)
	panicOnLeave  atomic.Bool  // OnLeave panics after telling
	refuseUpgrade atomic.Bool  // /play admits the player, then answers 503 without upgrading
}

func (n *resumeNode) config(name string) room.Config[seqInput] {
	g := &seqGame{Inputs: map[string][]uint64{}}
	n.games[name] = g
	told := func(ev string) func(*room.Room[seqInput], string) {
		return func(_ *room.Room[seqInput], p string) {
			g.Events = append(g.Events, ev+":"+p)
			n.events <- n.id + ":" + ev + ":" + p
			if ev == "leave" && n.panicOnLeave.Load() {
				panic("the game's OnLeave panics")
			}
		}
	}
	cfg := room.Config[seqInput]{Name: name, Period: 20 * time.Millisecond, Reconnect: n.hold, InputFull: room.RefuseInput,
		Tick: func(_ *room.Room[seqInput], tk *room.Tick[seqInput]) {
			tk.DrainInputs(func(in seqInput) { g.Inputs[in.Player] = append(g.Inputs[in.Player], in.N) })
		},
		OnLeave: told("leave"), OnReturn: told("return"), OnRemove: told("remove")}
	var restore func(*room.Room[seqInput], []byte) error
	cfg.Snapshot, restore = room.JSONState[seqInput](g)
	cfg.Restore = func(r *room.Room[seqInput], b []byte) error {
		// A restore that takes a while (a big state): the source stays frozen meanwhile,
		// so the inputs it gets are refused with "retry", whatever the machine's speed.
		time.Sleep(time.Duration(n.slowRestore.Load()))
		return restore(r, b)
	}
	return cfg
}

// startResumeNode starts a node with the contract's routes: /join/{room}?player=P,
// /play/{room}?seat=S or ?resume=R (room.Admit, ws.Upgrade, room.Play), and for the test
// /state/{room} (the room's state here) and POST /handoff/{room}?to=N (Room.Handoff).
// configure, if given, changes the server and its node's config before they start.
func startResumeNode(t *testing.T, id string, emb directory.Opener, seats *directory.SeatSigner, hold time.Duration,
	configure ...func(s *loop.Server, nc *room.NodeConfig)) *resumeNode {
	t.Helper()
	n := &resumeNode{id: id, games: map[string]*seqGame{}, events: make(chan string, 1024), hold: hold}
	s := loop.New(looptest.Config(t, loop.Config{Shards: 1}))
	nc := room.NodeConfig{Directory: directory.Config{Node: id}, Seats: seats, HandoffKey: resumeKey}
	for _, f := range configure {
		f(s, &nc)
	}
	require.NoError(t, room.UseDirectory(s, emb, nc))
	require.NoError(t, room.AcceptHandoffs(s, func(name string) (room.Config[seqInput], error) { return n.config(name), nil }))
	rooms := map[string]*room.Room[seqInput]{}
	stats.Mount(s, "/debug/baton")
	s.Handle("GET /join/{room}", func(c *loop.Ctx) { room.Join(c, c.PathValue("room"), c.Query("player")) })
	s.Handle("GET /play/{room}", func(c *loop.Ctx) {
		name := c.PathValue("room")
		r, _, ok := room.Admit(c, name, func(l *loop.Loop) (*room.Room[seqInput], error) { return room.New(l, n.config(name)) })
		if !ok {
			return
		}
		rooms[name] = r
		if n.refuseUpgrade.Load() { // as ws.Upgrade does when the loop is saturated
			c.String(503, "503 Service Unavailable: saturated\n")
			return
		}
		conn, err := ws.Upgrade(c, ws.Config{CheckOrigin: func(*loop.Ctx, string) bool { return true }, KeepOnDrain: true})
		if err != nil {
			return
		}
		_ = room.Play(c, r, conn, func(player string, raw json.RawMessage) (seqInput, error) {
			in := seqInput{Player: player}
			return in, json.Unmarshal(raw, &in.N)
		})
	})
	s.Handle("GET /state/{room}", func(c *loop.Ctx) {
		if g := n.games[c.PathValue("room")]; g != nil {
			c.JSON(200, g)
			return
		}
		c.String(404, "no such room\n")
	})
	s.Handle("POST /handoff/{room}", func(c *loop.Ctx) {
		r := rooms[c.PathValue("room")]
		if r == nil {
			c.String(404, "no such room\n")
			return
		}
		if _, err := r.Handoff(c, c.Query("to")); err != nil {
			c.String(500, err.Error()+"\n")
			return
		}
		c.String(200, "moved\n")
	})
	n.addr = strings.TrimPrefix(looptest.Start(t, s), "http://")
	require.Eventually(t, func() bool { _, err := joinRoom(n.addr, "probe", "nobody"); return err == nil },
		10*time.Second, 10*time.Millisecond, "node %s did not open its directory handle", id)
	return n
}

// state reads a room's state on the node.
func (n *resumeNode) state(t *testing.T, name string) seqGame {
	t.Helper()
	g, err := n.stateOf(name)
	require.NoError(t, err)
	return g
}

// stateOf reads a room's state on the node. Any goroutine.
func (n *resumeNode) stateOf(name string) (seqGame, error) {
	var g seqGame
	resp, err := http.Get("http://" + n.addr + "/state/" + name)
	if err != nil {
		return g, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return g, errors.New(resp.Status)
	}
	return g, json.NewDecoder(resp.Body).Decode(&g)
}

// waitEvent waits for the event ev ("node:kind:player") among n's hook calls.
func (n *resumeNode) waitEvent(t *testing.T, ev string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case got := <-n.events:
			if got == ev {
				return
			}
		case <-deadline:
			t.Fatalf("no %q within %v", ev, within)
		}
	}
}

// playHello is the contract's first message.
type playHello struct {
	Type, Room, Node, Player, Resume string
	Token                            directory.Token
	Ack                              uint64
	Resumed                          bool
}

// playAnswer is a server message as the bot reads it.
type playAnswer struct {
	Type    string `json:"type"`
	Seq     uint64 `json:"seq"`
	Ack     uint64 `json:"ack"`
	AfterMs int64  `json:"after_ms"`
	Error   string `json:"error"`
}

// dialPlay connects to /play/{room} at addr with a query (seat=... or resume=...) and
// reads the hello; on a refused upgrade it returns the status.
func dialPlay(addr, name, query string) (*websocket.Conn, playHello, int, error) {
	conn, h, status, _, err := dialContract(addr, name, query)
	return conn, h, status, err
}

// sendSeqInput sends input seq (its value is seq) by the contract.
func sendSeqInput(conn *websocket.Conn, seq uint64) error {
	return conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"input","seq":`+strconv.FormatUint(seq, 10)+`,"input":`+strconv.FormatUint(seq, 10)+`}`))
}

// inputsAcked sends inputs from..to one by one, each waiting for its ack.
func inputsAcked(t *testing.T, conn *websocket.Conn, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		require.NoError(t, sendSeqInput(conn, seq))
		var a playAnswer
		require.NoError(t, conn.ReadJSON(&a))
		require.Equal(t, playAnswer{Type: "ack", Seq: seq}, a)
	}
}

func seqRange(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func newSeatSigner(t *testing.T) *directory.SeatSigner {
	s, err := directory.NewSeatSigner(directory.SeatConfig{Key: []byte(strings.Repeat("s", 32))})
	require.NoError(t, err)
	return s
}

// TestResumeAfterDrop: a player whose connection drops (the TCP connection closed under
// the client, no close frame) and who comes back 2 s later with the resume token from
// the hello takes back their seat: the same player, resumed, the hello's ack naming the
// last input taken; the room was told of the leave and the return; inputs go on from the
// next number; the spent token is refused after.
func TestResumeAfterDrop(t *testing.T) {
	a := startResumeNode(t, "a", directory.NewEmbedded(), newSeatSigner(t), 10*time.Second)
	j, err := joinRoom(a.addr, "den", "ann")
	require.NoError(t, err)
	conn, h, _, err := dialPlay(j.Addr, "den", "seat="+url.QueryEscape(j.Seat))
	require.NoError(t, err)
	assert.Equal(t, playHello{Type: "joined", Room: "den", Node: "a", Player: "ann", Resume: h.Resume, Token: h.Token}, h, "a new seat: ack 0, not resumed")
	require.NotEmpty(t, h.Resume)
	inputsAcked(t, conn, 1, 5)

	dropped := time.Now()
	require.NoError(t, conn.UnderlyingConn().Close()) // a drop: no close frame
	a.waitEvent(t, "a:leave:ann", 5*time.Second)
	time.Sleep(2*time.Second - time.Since(dropped)) // the scenario: away for 2 s

	conn2, h2, status, err := dialPlay(j.Addr, "den", "resume="+url.QueryEscape(h.Resume))
	require.NoError(t, err, "status %d", status)
	defer conn2.Close()
	assert.Equal(t, "ann", h2.Player)
	assert.True(t, h2.Resumed)
	assert.Equal(t, uint64(5), h2.Ack, "the hello says which inputs the room has")
	assert.Equal(t, h.Token, h2.Token, "the same room")
	assert.NotEqual(t, h.Resume, h2.Resume, "a new resume token")
	a.waitEvent(t, "a:return:ann", 5*time.Second)
	t.Logf("resumed %v after the drop", time.Since(dropped).Round(time.Millisecond))
	inputsAcked(t, conn2, 6, 8)
	require.NoError(t, sendSeqInput(conn2, 3)) // a duplicate: acked again, not taken
	var dup playAnswer
	require.NoError(t, conn2.ReadJSON(&dup))
	assert.Equal(t, playAnswer{Type: "ack", Seq: 8}, dup, "a duplicate gets the cumulative ack")

	require.Eventually(t, func() bool { return len(a.state(t, "den").Inputs["ann"]) == 8 }, 5*time.Second, 10*time.Millisecond)
	g := a.state(t, "den")
	assert.Equal(t, seqRange(1, 8), g.Inputs["ann"], "every input once, in order, across the drop")
	assert.Equal(t, []string{"leave:ann", "return:ann"}, g.Events)

	// The spent token is refused; so is a token for another room, and a forged one.
	_, _, status, err = dialPlay(j.Addr, "den", "resume="+url.QueryEscape(h.Resume))
	require.Error(t, err)
	assert.Equal(t, 401, status, "a resume token works once")
	_, _, status, _ = dialPlay(j.Addr, "other", "resume="+url.QueryEscape(h2.Resume))
	assert.Equal(t, 401, status, "a token for another room")
	forged := []byte(h2.Resume)
	forged[len(forged)-2] ^= 1
	_, _, status, _ = dialPlay(j.Addr, "den", "resume="+url.QueryEscape(string(forged)))
	assert.Equal(t, 401, status, "a forged signature")
	// The player's name in the token changed to another's: the signature no longer fits.
	payload, sig, _ := strings.Cut(h2.Resume, ".")
	_, _, status, _ = dialPlay(j.Addr, "den", "resume="+url.QueryEscape(strings.Replace(payload, payload[len(payload)-4:], "Ym9i", 1)+"."+sig))
	assert.Equal(t, 401, status, "a token turned to another player")
	// The live connection still works: none of the refusals touched it.
	inputsAcked(t, conn2, 9, 9)
}

// TestResumeTokenOutlivesARefusedUpgrade: a resume that Admit accepts but whose upgrade
// is then refused (503, as ws.Upgrade answers on a saturated loop) does not spend the
// token: the player never got the hello with the next one, so the same token takes the
// seat back on the next try. Once a hello went out, the old token is spent.
func TestResumeTokenOutlivesARefusedUpgrade(t *testing.T) {
	a := startResumeNode(t, "a", directory.NewEmbedded(), newSeatSigner(t), 10*time.Second)
	j, err := joinRoom(a.addr, "den", "ann")
	require.NoError(t, err)
	conn, h, _, err := dialPlay(j.Addr, "den", "seat="+url.QueryEscape(j.Seat))
	require.NoError(t, err)
	inputsAcked(t, conn, 1, 3)
	require.NoError(t, conn.UnderlyingConn().Close())
	a.waitEvent(t, "a:leave:ann", 5*time.Second)

	a.refuseUpgrade.Store(true)
	for range 3 {
		_, _, status, err := dialPlay(j.Addr, "den", "resume="+url.QueryEscape(h.Resume))
		require.Error(t, err)
		require.Equal(t, 503, status)
	}
	a.refuseUpgrade.Store(false)

	conn2, h2, status, err := dialPlay(j.Addr, "den", "resume="+url.QueryEscape(h.Resume))
	require.NoError(t, err, "status %d: the refused upgrades spent the token", status)
	defer conn2.Close()
	assert.Equal(t, "ann", h2.Player)
	assert.True(t, h2.Resumed)
	assert.Equal(t, uint64(3), h2.Ack)
	inputsAcked(t, conn2, 4, 4)
	_, _, status, _ = dialPlay(j.Addr, "den", "resume="+url.QueryEscape(h.Resume))
	assert.Equal(t, 401, status, "the hello with a new token spent the old one")
}

// TestResumePastTheLimit: a player away longer than Config.Reconnect is removed, the room
// is told (OnRemove after OnLeave), and their resume token is refused after.
func TestResumePastTheLimit(t *testing.T) {
	const hold = 300 * time.Millisecond
	a := startResumeNode(t, "a", directory.NewEmbedded(), newSeatSigner(t), hold)
	j, err := joinRoom(a.addr, "den", "bob")
	require.NoError(t, err)
	conn, h, _, err := dialPlay(j.Addr, "den", "seat="+url.QueryEscape(j.Seat))
	require.NoError(t, err)
	inputsAcked(t, conn, 1, 2)
	dropped := time.Now()
	require.NoError(t, conn.UnderlyingConn().Close())
	a.waitEvent(t, "a:leave:bob", 5*time.Second)
	a.waitEvent(t, "a:remove:bob", 5*time.Second)
	away := time.Since(dropped)
	assert.GreaterOrEqual(t, away, hold, "not removed before the hold ran out")
	t.Logf("removed %v after the drop (hold %v)", away.Round(time.Millisecond), hold)
	_, _, status, err := dialPlay(j.Addr, "den", "resume="+url.QueryEscape(h.Resume))
	require.Error(t, err)
	assert.Equal(t, 401, status, "the seat is gone")
	assert.Equal(t, []string{"leave:bob", "remove:bob"}, a.state(t, "den").Events)

	// Joining again makes a new seat: a new player of the room, inputs from 1.
	j2, err := joinRoom(a.addr, "den", "bob")
	require.NoError(t, err)
	conn2, h2, _, err := dialPlay(j2.Addr, "den", "seat="+url.QueryEscape(j2.Seat))
	require.NoError(t, err)
	defer conn2.Close()
	assert.False(t, h2.Resumed)
	assert.Zero(t, h2.Ack)
}

// TestResumeReplacesLiveConnection: a resume while the old connection is still open (the
// server has not seen the drop: a half-open TCP connection) takes the seat over; the
// older connection is closed with 4002.
func TestResumeReplacesLiveConnection(t *testing.T) {
	a := startResumeNode(t, "a", directory.NewEmbedded(), newSeatSigner(t), 10*time.Second)
	j, err := joinRoom(a.addr, "den", "cy")
	require.NoError(t, err)
	old, h, _, err := dialPlay(j.Addr, "den", "seat="+url.QueryEscape(j.Seat))
	require.NoError(t, err)
	defer old.Close()
	inputsAcked(t, old, 1, 3)
	conn, h2, _, err := dialPlay(j.Addr, "den", "resume="+url.QueryEscape(h.Resume))
	require.NoError(t, err)
	defer conn.Close()
	assert.True(t, h2.Resumed)
	assert.Equal(t, uint64(3), h2.Ack)
	_ = old.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err = old.ReadMessage()
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 4002, ce.Code)
	inputsAcked(t, conn, 4, 4)
	assert.Empty(t, a.state(t, "den").Events, "a replaced connection is no leave")
}

// TestResumeAfterMove: a player sending inputs without pause while its room moves to
// another node is refused with "retry" during the freeze, gets a close 4001 whose reason
// names the new owner, resumes there with its resume token as the same player, without a
// join, and resends what the new owner does not have: the room's state on the new owner
// holds every input exactly once, in order.
func TestResumeAfterMove(t *testing.T) {
	emb := directory.NewEmbedded()
	seats := newSeatSigner(t)
	a := startResumeNode(t, "a", emb, seats, 10*time.Second)
	bn := startResumeNode(t, "b", emb, seats, 10*time.Second)
	nodes := []*resumeNode{a, bn}
	const total = 2000
	p := &playClient{room: "hall", player: "dee", nodes: func() []string { return []string{a.addr, bn.addr} },
		every: 200 * time.Microsecond, window: 64, total: total, hold: 10 * time.Second}

	var wg sync.WaitGroup
	var from, to *resumeNode
	var moveErr error
	wg.Add(1)
	go func() { // move the room once the player is well under way
		defer wg.Done()
		deadline := time.Now().Add(20 * time.Second)
		for from == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			for i, n := range nodes {
				if g, err := n.stateOf("hall"); err == nil && len(g.Inputs["dee"]) >= 200 {
					from, to = n, nodes[1-i]
				}
			}
		}
		if from == nil {
			moveErr = errors.New("the player did not get 200 inputs into the room in 20 s")
			return
		}
		to.slowRestore.Store(int64(20 * time.Millisecond))
		resp, err := http.Post("http://"+from.addr+"/handoff/hall?to="+to.id, "", nil)
		if err == nil {
			if resp.StatusCode != 200 {
				err = errors.New(resp.Status)
			}
			resp.Body.Close()
		}
		moveErr = err
	}()
	stop := make(chan struct{})
	timeout := time.AfterFunc(30*time.Second, func() { close(stop) })
	p.run(stop)
	defer p.close()
	timeout.Stop()
	wg.Wait()
	require.NoError(t, moveErr)
	require.Empty(t, p.problems)
	require.Equal(t, uint64(total), p.acked.Load(), "every input acked")

	require.Equal(t, []string{to.id}, p.moved, "one move, to the node asked")
	require.Len(t, p.backs, 1)
	back := p.backs[0]
	assert.Equal(t, clientBack{cause: "4001", took: back.took, resumed: true}, back, "resumed at the node the 4001 named, without a join")
	require.Eventually(t, func() bool { return len(to.state(t, "hall").Inputs["dee"]) >= total }, 5*time.Second, 10*time.Millisecond)
	g := to.state(t, "hall")
	assert.Equal(t, seqRange(1, total), g.Inputs["dee"], "every input once, in order, across the move")
	assert.Empty(t, g.Events, "a move is no leave")
	t.Logf("retry answers: %d, of which %d during the freeze; resumed at the new owner %v after the 4001", p.retries, p.frozen, back.took)
	assert.Positive(t, p.frozen, "inputs sent during the freeze were refused with retry (and resent)")
	fig := seatFigures(t, to.addr)
	assert.Equal(t, 1, fig.Seats.Resumed, "the new owner counts the resume")
}

// seatFigures reads the seat figures of a node's cluster stats section.
func seatFigures(t *testing.T, addr string) struct {
	Seats struct{ Resumed, Held, Removed, Replaced, Refused int }
} {
	t.Helper()
	var f struct {
		Seats struct{ Resumed, Held, Removed, Replaced, Refused int }
	}
	resp, err := http.Get("http://" + addr + "/debug/baton/cluster")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, fmt.Sprint(resp.Header))
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
	return f
}

// TestResumeDroppedBeforeMove: a player whose connection dropped is held when the room
// moves: the seat travels in the snapshot, the resume token works at the new owner, and
// the new owner's room is told of the return (the leave was told on the old one; the
// game's record of both travelled with the state).
func TestResumeDroppedBeforeMove(t *testing.T) {
	emb := directory.NewEmbedded()
	seats := newSeatSigner(t)
	nodes := map[string]*resumeNode{
		"a": startResumeNode(t, "a", emb, seats, 10*time.Second),
		"b": startResumeNode(t, "b", emb, seats, 10*time.Second),
	}
	j, err := joinRoom(nodes["a"].addr, "nook", "fay")
	require.NoError(t, err)
	conn, h, _, err := dialPlay(j.Addr, "nook", "seat="+url.QueryEscape(j.Seat))
	require.NoError(t, err)
	from, to := nodes[h.Node], nodes[map[string]string{"a": "b", "b": "a"}[h.Node]]
	inputsAcked(t, conn, 1, 3)
	require.NoError(t, conn.UnderlyingConn().Close())
	from.waitEvent(t, from.id+":leave:fay", 5*time.Second)

	status, err := postStatus("http://" + from.addr + "/handoff/nook?to=" + to.id)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	_, _, status, _ = dialPlay(from.addr, "nook", "resume="+url.QueryEscape(h.Resume))
	assert.Equal(t, 307, status, "the old owner sends a resume to the new one")

	conn2, h2, status, err := dialPlay(to.addr, "nook", "resume="+url.QueryEscape(h.Resume))
	require.NoError(t, err, "status %d", status)
	defer conn2.Close()
	assert.Equal(t, playHello{Type: "joined", Room: "nook", Node: to.id, Player: "fay", Resume: h2.Resume, Token: h2.Token, Ack: 3, Resumed: true}, h2)
	assert.Greater(t, h2.Token, h.Token, "the new owner's token is greater")
	to.waitEvent(t, to.id+":return:fay", 5*time.Second)
	inputsAcked(t, conn2, 4, 5)
	require.Eventually(t, func() bool { return len(to.state(t, "nook").Inputs["fay"]) == 5 }, 5*time.Second, 10*time.Millisecond)
	g := to.state(t, "nook")
	assert.Equal(t, seqRange(1, 5), g.Inputs["fay"])
	assert.Equal(t, []string{"leave:fay", "return:fay"}, g.Events)
}

// TestResumeOffRemovesAtOnce: with a negative Config.Reconnect no seat is held: a drop
// is a leave and a removal together, and the resume token is refused.
func TestResumeOffRemovesAtOnce(t *testing.T) {
	a := startResumeNode(t, "a", directory.NewEmbedded(), newSeatSigner(t), -1)
	j, err := joinRoom(a.addr, "den", "gus")
	require.NoError(t, err)
	conn, h, _, err := dialPlay(j.Addr, "den", "seat="+url.QueryEscape(j.Seat))
	require.NoError(t, err)
	inputsAcked(t, conn, 1, 1)
	require.NoError(t, conn.UnderlyingConn().Close())
	a.waitEvent(t, "a:leave:gus", 5*time.Second)
	a.waitEvent(t, "a:remove:gus", 5*time.Second)
	_, _, status, _ := dialPlay(j.Addr, "den", "resume="+url.QueryEscape(h.Resume))
	assert.Equal(t, 401, status)
	assert.Equal(t, []string{"leave:gus", "remove:gus"}, a.state(t, "den").Events)
}

// TestResumeHookPanics: a seat hook that panics is contained like a panicking tick: the
// room ticks on, the player resumes, the next hook runs and inputs are taken.
func TestResumeHookPanics(t *testing.T) {
	a := startResumeNode(t, "a", directory.NewEmbedded(), newSeatSigner(t), 10*time.Second)
	a.panicOnLeave.Store(true)
	j, err := joinRoom(a.addr, "den", "hal")
	require.NoError(t, err)
	conn, h, _, err := dialPlay(j.Addr, "den", "seat="+url.QueryEscape(j.Seat))
	require.NoError(t, err)
	inputsAcked(t, conn, 1, 2)
	require.NoError(t, conn.UnderlyingConn().Close())
	a.waitEvent(t, "a:leave:hal", 5*time.Second)
	conn2, h2, status, err := dialPlay(j.Addr, "den", "resume="+url.QueryEscape(h.Resume))
	require.NoError(t, err, "status %d", status)
	defer conn2.Close()
	assert.Equal(t, uint64(2), h2.Ack)
	a.waitEvent(t, "a:return:hal", 5*time.Second)
	inputsAcked(t, conn2, 3, 4)
	require.Eventually(t, func() bool { return len(a.state(t, "den").Inputs["hal"]) == 4 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, seqRange(1, 4), a.state(t, "den").Inputs["hal"])
}
