package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/examples/gameserver/game"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/ws"
)

// clusterConfig makes the server a node of a shared room directory (docs/cluster.md, "The
// flagship as a cluster"): -etcd names the directory, the rest come with it. Nil in
// options: one process on the embedded directory (make run).
type clusterConfig struct {
	Directory directory.Opener      // the shared directory (etcd.New on a client of -etcd)
	Node      string                // this node's ID (-node)
	Public    string                // the address players reach it at (-public; "": the listening address)
	Seats     *directory.SeatSigner // signs and checks seat tokens, with the key every node shares
}

// clusterHello is the first message of GET /play/{room}: where the player was seated.
type clusterHello struct {
	Type   string          `json:"type"` // "joined"
	Room   string          `json:"room"`
	Node   string          `json:"node"`
	Token  directory.Token `json:"token"`
	Player string          `json:"player"`
}

// seatKey reads the seat key every node of a cluster shares: at least 32 bytes.
func seatKey(getenv func(string) string) ([]byte, error) {
	k := getenv("GAMESERVER_SEAT_KEY")
	if len(k) < 32 {
		return nil, fmt.Errorf("-etcd needs GAMESERVER_SEAT_KEY, the seat key every node shares: at least 32 bytes (it has %d)", len(k))
	}
	return []byte(k), nil
}

// clusterRoutes registers the cluster's routes: GET /join/{room}?player=ID on any node
// answers where the room is (room.Join: the owner's address, or the node placement
// chooses, and a seat token); GET /play/{room}?seat=S at that address is the player's
// WebSocket (servePlay).
func (a *app) clusterRoutes() {
	a.srv.Handle("GET /join/{room}", a.join)
	a.srv.Handle("GET /play/{room}", a.servePlay)
}

// join is GET /join/{room}?player=ID: any node answers where the room is played. The
// player id is checked as elsewhere (validPlayer); the seat token names it.
func (a *app) join(c *loop.Ctx) {
	player, _, ok := validPlayer(c)
	if !ok {
		return
	}
	room.Join(c, c.PathValue("room"), string(player))
}

// openClusterArena makes the arena of a room a player joined by name: a match of humans
// only (no bots), named as the room. Loop-confined (room.Admit's open).
func (a *app) openClusterArena(name string) func(l *loop.Loop) (*room.Room[game.Input], error) {
	return func(*loop.Loop) (*room.Room[game.Input], error) {
		if ar := a.arenas[name]; ar != nil && !ar.ended {
			return nil, fmt.Errorf("room %s: an arena of that name runs here", name)
		}
		delete(a.arenas, name) // an ended one of the same name: replaced
		ar, err := a.makeArena(name, name, false, false)
		if err != nil {
			return nil, err
		}
		return ar.room, nil
	}
}

// servePlay is GET /play/{room}?seat=S&name=NAME: a player's WebSocket in a clustered
// room, at the address /join named. room.Admit checks the seat (401), makes the room here
// or finds it, and answers 307 to the owner when another node owns it (a WebSocket client
// in a browser cannot follow it: the page asks /join again when its socket fails before
// the hello), 503 when the directory is out of reach. Then the upgrade (any origin: the
// seat token is the credential, and the page may come from another node), the hello
// {"type":"joined","room","node","token","player"}, and the inputs and states of serveWS.
// When the room moved (its node's lease lapsed) the socket is closed with room.CloseMoved
// (4001) and the room's name as the reason: the page asks /join again.
func (a *app) servePlay(c *loop.Ctx) {
	name := c.PathValue("room")
	r, seat, ok := room.Admit(c, name, a.openClusterArena(name))
	if !ok {
		return
	}
	ar := a.arenas[name]
	if ar == nil || ar.room != r || ar.ended {
		c.SetHeader("Retry-After", "1")
		c.String(503, "503 Service Unavailable: the match in room "+name+" is over; join again\n")
		return
	}
	conn, err := ws.Upgrade(c, ws.Config{CheckOrigin: func(*loop.Ctx, string) bool { return true }})
	if err != nil {
		return
	}
	player := game.PlayerID(seat.Player)
	display := strings.TrimSpace(c.Query("name"))
	if display == "" || len(display) > 24 {
		display = seat.Player
	}
	if err := ar.m.Join(player, display, false); err != nil {
		b, _ := json.Marshal(wsMessage{Type: "error", Error: err.Error()})
		_ = conn.WriteText(b)
		_ = conn.Close(1008, "cannot join: "+err.Error())
		return
	}
	// The hello goes out before the connection joins the room's broadcast (nothing runs
	// on the loop in between: the write does not park), so it is the client's first
	// message.
	hello, _ := json.Marshal(clusterHello{Type: "joined", Room: name, Node: a.opts.Cluster.Node, Token: r.Token(), Player: seat.Player})
	if conn.WriteText(hello) != nil {
		ar.m.Leave(player)
		return
	}
	if err := ar.join(&c.Task, player, conn); err != nil {
		ar.m.Leave(player)
		if errors.Is(err, room.ErrMoved) {
			_ = conn.Close(room.CloseMoved, name)
		}
		return
	}
	defer ar.leave(player, conn)
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			break // the client left, the match ended, or the room moved
		}
		if ok, _ := a.inputLimit.Allow(string(player), c.Loop().Now()); !ok {
			a.droppedInputs.Add(1)
			continue
		}
		in := game.Input{}
		if json.Unmarshal(data, &in) != nil {
			continue
		}
		in.Player = player
		_ = r.Input(in)
	}
	if errors.Is(c.Err(), room.ErrMoved) {
		_ = conn.Close(room.CloseMoved, name) // the task is cancelled: this does not wait
	}
}
