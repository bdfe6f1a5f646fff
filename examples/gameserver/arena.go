package main

import (
	"math/rand/v2"
	"time"

	"github.com/batonrt/baton/examples/gameserver/game"
	"github.com/batonrt/baton/examples/gameserver/store"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/ws"
)

// arena is one match on the loop: a game.Match as a room's state, ticked at 20 Hz. Its
// players' inputs arrive through the room's input queue (from WebSocket tasks and the
// HTTP input route) and its state leaves as one prepared message broadcast to every
// connected player per tick. Loop-confined.
type arena struct {
	app   *app
	id    string
	m     *game.Match
	room  *room.Room[game.Input]
	bots  []game.PlayerID
	heavy bool // burns heavyBurn per tick (-heavy-room)
	loner bool // bots only: starts another when it ends

	fromTickets bool                           // formed by the matchmaker: counts in app.matches
	started     time.Time                      // when the matchmaker formed it
	seats       map[game.PlayerID]*game.Ticket // each human's ticket: its secret authenticates the player's inputs

	conns map[game.PlayerID]*ws.Conn // each player's latest connection: only its end makes the player leave

	snap    []byte     // the latest snapshot (game.Match.AppendSnapshot)
	msg     []byte     // the same wrapped as a WebSocket message, reused each tick
	changed *loop.Cond // broadcast at every snapshot: the long-polls wait on it
	ended   bool
	endedAt time.Time
	adopted bool // counted in app.arenas and live: false for a match handed to this node until its first tick
}

// newArena starts an empty match in a new room named after it.
func (a *app) newArena(id string, loner, heavy bool) (*arena, error) {
	return a.makeArena(id, "arena-"+id, loner, heavy, false)
}

// makeArena starts an empty match with id in a new room named roomName; a movable one has
// Snapshot and Restore hooks (a cluster room joined by name: handed to another node when
// this one drains).
func (a *app) makeArena(id, roomName string, loner, heavy, movable bool) (*arena, error) {
	m, err := game.NewMatch(id, a.opts.Arena, rand.Uint64())
	if err != nil {
		return nil, err
	}
	ar := a.newArenaState(id, m, loner, heavy)
	ar.room, err = room.New(a.srv.Loop(0), ar.config(roomName, movable))
	if err != nil {
		return nil, err
	}
	ar.adopted = true
	ar.publish()
	a.arenas[id] = ar
	a.live++
	return ar, nil
}

// newArenaState makes an arena's state around match m, without its room.
func (a *app) newArenaState(id string, m *game.Match, loner, heavy bool) *arena {
	return &arena{app: a, id: id, m: m, heavy: heavy, loner: loner,
		conns: map[game.PlayerID]*ws.Conn{}, seats: map[game.PlayerID]*game.Ticket{}, changed: loop.NewCond(a.srv.Loop(0))}
}

// config is the arena's room config.
func (ar *arena) config(roomName string, movable bool) room.Config[game.Input] {
	cfg := room.Config[game.Input]{
		Name:       roomName,
		Period:     tickPeriod,
		Tick:       ar.tick,
		InputQueue: 256,
		// A dropped input is superseded by the player's next one (sent at up to 20 Hz).
		InputFull: room.DropInput,
		OnDrain:   ar.onDrain,
		OnMoved:   ar.onMoved,
		// Seated players (cluster mode, servePlay) keep their place while their
		// connection is away: they stop moving, and leave the match only when their
		// seat's hold (30 s) ran out.
		OnLeave: func(_ *room.Room[game.Input], id string) {
			if p := ar.m.Player(game.PlayerID(id)); p != nil {
				p.DX, p.DY = 0, 0
			}
		},
		OnRemove: func(_ *room.Room[game.Input], id string) { ar.m.Leave(game.PlayerID(id)) },
	}
	if movable {
		cfg.Snapshot, cfg.Restore = room.JSONState[game.Input](ar.m) // the match's own MarshalJSON
	}
	return cfg
}

// tick is the room's tick: apply the inputs queued since the last one, steer the bots,
// step the simulation by the time that really passed, and broadcast the new state.
func (ar *arena) tick(r *room.Room[game.Input], t *room.Tick[game.Input]) {
	if !ar.adopted { // handed to this node: its first tick here
		ar.app.adopt(ar)
	}
	if ar.heavy {
		burn(heavyBurn) // the demo's culprit: the rooms page names this room
	}
	t.DrainInputs(func(in game.Input) { _ = ar.m.Apply(in) }) // a player who left: ignored
	for _, id := range ar.bots {
		_ = ar.m.Apply(ar.m.BotInput(id))
	}
	over := ar.m.Step(min(t.DT, maxDT))
	ar.publish()
	if over {
		ar.finish(t.Task.Loop().Now())
	}
}

// onDrain ends the match now (Shutdown): its result counts like any other, and the
// writer writes it before the server stops.
func (ar *arena) onDrain(r *room.Room[game.Input], deadline time.Time) {
	if ar.ended {
		return
	}
	ar.m.End(game.EndShutdown)
	ar.publish()
	ar.finish(time.Now())
}

// onMoved runs when the room stopped because its node's lease lapsed (a cluster node cut
// off from the directory, or paused): another node may run the room now, so this match
// ends here without a result (its token is stale: the store would refuse it). Its
// members' handlers close their sockets with room.CloseMoved (servePlay).
func (ar *arena) onMoved(r *room.Room[game.Input]) {
	if ar.ended {
		return
	}
	ar.ended, ar.endedAt = true, time.Now()
	ar.app.live--
	if ar.fromTickets {
		ar.app.matches--
	}
	ar.app.log.Warn("gameserver: the room moved to another node (handed off, or this node's lease lapsed)", "room", r.Name(), "token", r.Token())
	if ar.loner {
		ar.app.startBotArena(ar.heavy)
	}
}

// finish hands the result to the writer and stops the room: its WebSocket tasks are
// cancelled (they close their connections) and a bot arena starts its successor.
func (ar *arena) finish(now time.Time) {
	if ar.ended {
		return
	}
	ar.ended, ar.endedAt = true, now
	ar.app.live--
	if ar.fromTickets {
		ar.app.matches--
	}
	ar.app.submit(store.Finished{Result: ar.m.Result(), Ended: now, Room: ar.room.Name(), Token: int64(ar.room.Token())})
	ar.room.Stop()
	if ar.loner {
		ar.app.startBotArena(ar.heavy)
	}
}

// publish takes a snapshot, broadcasts it to the connected players (encoded once) and
// wakes the long-polls.
func (ar *arena) publish() {
	ar.snap = ar.m.AppendSnapshot(ar.snap[:0])
	if len(ar.conns) > 0 {
		ar.msg = append(append(append(ar.msg[:0], `{"type":"state","state":`...), ar.snap...), '}')
		room.Broadcast(ar.room, ws.NewPrepared(false, ar.msg)) // to every connection attached with join
	}
	ar.changed.Broadcast() // allocates nothing while no long-poll waits
}

// join makes the connection of t, a player's (or spectator's) WebSocket task, a member of
// the arena's room that receives its snapshots until t ends; leave marks the player gone
// from the match unless it has connected again since.
func (ar *arena) join(t *loop.Task, id game.PlayerID, c *ws.Conn) error {
	if err := ar.room.AttachConn(t, c); err != nil {
		return err
	}
	ar.conns[id] = c
	return nil
}

func (ar *arena) leave(id game.PlayerID, c *ws.Conn) {
	if ar.conns[id] == c {
		delete(ar.conns, id)
		ar.m.Leave(id)
	}
}

// burn spins the CPU for d: the heavy room's simulated expensive tick.
func burn(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
