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
	// HandoffKey authenticates the rooms nodes hand each other (and signs players' resume
	// tokens); nil: rooms joined by name end with their node, as before.
	HandoffKey []byte
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
		ar, err := a.makeArena(name, name, false, false, a.opts.Cluster != nil && a.opts.Cluster.HandoffKey != nil)
		if err != nil {
			return nil, err
		}
		return ar.room, nil
	}
}

// servePlay is GET /play/{room}?seat=S&name=NAME (or ?resume=R): a player's WebSocket
// in a clustered room, at the address /join named, by the client protocol
// (docs/client-protocol.md; the page's client is baton.mjs). room.Admit checks the seat or
// resume token (401), makes the room here or finds it, seats the player (taking back the
// seat held for them after a drop or a move), and answers 307 to the owner when another
// node owns it (a browser cannot follow it: the client asks /join again when its socket
// fails before the hello), 503 when the directory is out of reach. Then the upgrade (any
// origin: the token is the credential, and the page may come from another node), the
// player into the match (back from a drop: still there), and room.Play: the hello
// {"type":"joined","room","node","token","player","resume","ack","resumed"}, the match's
// states, the player's inputs {"type":"input","seq":N,"input":{"dx","dy"}} answered
// ack/retry/refused, and the close 4001 naming the new owner when the room moves.
func (a *app) servePlay(c *loop.Ctx) {
	name := c.PathValue("room")
	r, seat, ok := room.Admit(c, name, a.openClusterArena(name))
	if !ok {
		return
	}
	ar := a.arenaOf(name, r)
	if ar == nil || ar.ended {
		c.SetHeader("Retry-After", "1")
		c.String(503, "503 Service Unavailable: the match in room "+name+" is over; join again\n")
		return
	}
	// KeepOnDrain: when this node drains, room.Play closes the socket with 4001 naming
	// the node the room was handed to (or 1000 when the match ends), not the drain's 1001.
	conn, err := ws.Upgrade(c, ws.Config{CheckOrigin: func(*loop.Ctx, string) bool { return true }, KeepOnDrain: true})
	if err != nil {
		return
	}
	player := game.PlayerID(seat.Player)
	display := strings.TrimSpace(c.Query("name"))
	if display == "" || len(display) > 24 {
		display = seat.Player
	}
	if p := ar.m.Player(player); p == nil || p.Left {
		if err := ar.m.Join(player, display, false); err != nil {
			b, _ := json.Marshal(wsMessage{Type: "error", Error: err.Error()})
			_ = conn.WriteText(b)
			_ = conn.Close(1008, "cannot join: "+err.Error())
			return
		}
	}
	ar.conns[player] = conn // the arena broadcasts its states while it has connections
	defer func() {
		if ar.conns[player] == conn {
			delete(ar.conns, player)
		}
	}()
	_ = room.Play(c, r, conn, func(id string, raw json.RawMessage) (game.Input, error) {
		if ok, _ := a.inputLimit.Allow(id, c.Loop().Now()); !ok {
			a.droppedInputs.Add(1)
			return game.Input{}, errInputRate
		}
		in := game.Input{}
		if err := json.Unmarshal(raw, &in); err != nil {
			return in, err
		}
		in.Player = game.PlayerID(id)
		return in, nil
	})
}

// errInputRate refuses a seated player's input over the per-player rate.
var errInputRate = errors.New("over the input rate")

// handedConfig is AcceptHandoffs' configFor: the config of a match another node hands
// to this one, whose Restore sets a fresh match from the snapshot. The arena joins
// a.arenas when the room first ticks or a player arrives (arenaOf): a restore whose
// compare-and-swap then fails leaves nothing behind. Loop-confined (the endpoint's
// handler).
func (a *app) handedConfig(name string) (room.Config[game.Input], error) {
	m, err := game.NewMatch(name, a.opts.Arena, 0)
	if err != nil {
		return room.Config[game.Input]{}, err
	}
	ar := a.newArenaState(name, m, false, false)
	cfg := ar.config(name, true)
	restore := cfg.Restore
	cfg.Restore = func(r *room.Room[game.Input], b []byte) error {
		if err := restore(r, b); err != nil {
			return err
		}
		ar.room = r
		a.handed[name] = ar
		return nil
	}
	return cfg, nil
}

// arenaOf returns the arena of room r named name: the one this node made, or one handed
// to it (adopted now). Loop-confined.
func (a *app) arenaOf(name string, r *room.Room[game.Input]) *arena {
	if ar := a.arenas[name]; ar != nil && ar.room == r {
		return ar
	}
	if ar := a.handed[name]; ar != nil && ar.room == r {
		a.adopt(ar)
		return ar
	}
	return nil
}

// adopt makes a match handed to this node one of its arenas. Loop-confined.
func (a *app) adopt(ar *arena) {
	if a.handed[ar.id] == ar {
		delete(a.handed, ar.id)
	}
	if ar.adopted {
		return
	}
	ar.adopted = true
	a.arenas[ar.id] = ar
	a.live++
	a.log.Info("gameserver: match handed to this node", "room", ar.room.Name(), "token", ar.room.Token(), "tick", ar.m.Tick())
}
