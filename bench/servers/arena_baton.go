package servers

import (
	"strconv"
	"time"

	"github.com/batonrt/baton/bench/arena"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/ws"
)

// registerArenaBaton adds the arena route to srv the way the shared rig's baton target
// does it, on baton's public API: a loop/room Room per game room (its tick every
// arena.Period), players upgraded in the callback form (ws.UpgradeTo) whose OnMessage
// queues the input with Room.Input; the tick drains the inputs, steps, encodes the state
// once (ws.NewPrepared) and hands it to the room's players (ws.Broadcast). The rooms
// map and the rooms' state are plain values touched only on the loop.
func registerArenaBaton(srv *loop.Server) {
	type arenaRoom struct {
		id    int
		r     *room.Room[arena.Input]
		sim   *arena.Sim
		conns []*ws.Conn // by slot; nil: no player there
		n     int
		buf   []byte
	}
	rooms := map[int]*arenaRoom{}
	allowAll := ws.Config{CheckOrigin: func(*loop.Ctx, string) bool { return true }}
	srv.Handle("GET "+ArenaPath, func(c *loop.Ctx) {
		id, slot, ok := ParseArenaQuery(c.RawQuery())
		if !ok {
			c.String(400, "bad room or slot\n")
			return
		}
		rm := rooms[id]
		if rm == nil {
			rm = &arenaRoom{id: id, sim: arena.NewSim(uint32(id)), conns: make([]*ws.Conn, arena.Players),
				buf: make([]byte, arena.StateSize)}
			r, err := room.New(c.Loop(), room.Config[arena.Input]{
				Name:   "arena-" + strconv.Itoa(id),
				Period: arena.Period,
				Tick: func(_ *room.Room[arena.Input], t *room.Tick[arena.Input]) {
					t.DrainInputs(rm.sim.Apply)
					rm.sim.Step()
					ws.Broadcast(ws.NewPrepared(true, rm.sim.Encode(rm.buf, time.Now())), rm.conns)
				},
			})
			if room.Error(c, err) {
				return
			}
			rm.r = r
			rooms[id] = rm
		}
		conn, err := ws.UpgradeTo(c, allowAll, ws.Handler{
			OnMessage: func(w *ws.Conn, binary bool, data []byte) {
				if in, ok := arena.ParseInput(data); ok {
					in.Slot = slot
					_ = rm.r.Input(in) // a full queue drops it; the player's next input supersedes it
				}
			},
			OnClose: func(w *ws.Conn, err error) {
				if rm.conns[slot] != w {
					return
				}
				rm.conns[slot] = nil
				if rm.n--; rm.n == 0 {
					rm.r.Stop()
					delete(rooms, id)
				}
			},
		})
		if err != nil {
			if rm.n == 0 {
				rm.r.Stop()
				delete(rooms, id)
			}
			return // UpgradeTo answered
		}
		if old := rm.conns[slot]; old != nil {
			_ = old.Close(1000, "replaced")
		} else {
			rm.n++
		}
		rm.conns[slot] = conn
	})
}
