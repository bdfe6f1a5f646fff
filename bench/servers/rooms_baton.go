package servers

import (
	"encoding/json"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
)

// registerRoomsBaton adds the rooms routes to srv: each room is a room.Room (deadline
// ticks on the loop, inputs through Room.Input, refused with 429 when the queue is full);
// the rooms map and the simulation states are plain values touched only on the loop.
func registerRoomsBaton(srv *loop.Server) {
	var (
		rooms map[string]*room.Room[Input]
		setup RoomSetup
		rec   = newTickRecorder()
	)
	srv.Handle("POST /rooms/setup", func(c *loop.Ctx) {
		var s RoomSetup
		if err := json.Unmarshal(c.Body(), &s); err != nil {
			c.String(400, "bad setup: "+err.Error()+"\n")
			return
		}
		if err := s.Validate(); err != nil {
			c.String(400, err.Error()+"\n")
			return
		}
		if rooms != nil {
			c.String(409, "rooms already set up\n")
			return
		}
		setup, rooms = s, make(map[string]*room.Room[Input], s.Rooms+1)
		rec.setup(s)
		n := s.Rooms
		if s.HeavyIters > 0 {
			n++
		}
		// The rooms' first ticks are spread over one period, as the baseline's goroutines
		// start, so that their ticks do not come due together. All are made now, each
		// with its own FirstTick, rather than one at a time after a Sleep: a late wake-up
		// (thousands of connections opening meanwhile) would bunch them.
		began := time.Now()
		for i := range n {
			name, heavy := roomName(i), false
			if i == s.Rooms {
				name, heavy = HeavyRoomName, true
			}
			cfg := benchRoomConfig(i, name, heavy, rec)
			cfg.FirstTick = firstTick(i, n, began)
			r, err := room.New(c.Loop(), cfg)
			if err != nil {
				room.Error(c, err)
				return
			}
			rooms[name] = r
		}
		rec.reset()
		c.String(200, "ok")
	})
	srv.Handle("POST /rooms/{id}/input", func(c *loop.Ctx) {
		roomInput(c, rooms[c.PathValue("id")], rec)
	})
	srv.Handle("POST /rooms/reset", func(c *loop.Ctx) {
		rec.reset()
		c.String(200, "ok")
	})
	srv.Handle("GET /rooms/stats", func(c *loop.Ctx) {
		c.JSON(200, rec.stats(setup.Rooms, setup.HeavyIters > 0))
	})
}

// benchRoomConfig is the configuration of bench room i (named name): its own simulation
// state, a tick that applies the queued inputs, runs rec's passes of the simulation (the
// heavy room's or a light one's) and records the tick's lateness, duration, skipped
// deadlines and inputs in rec.
func benchRoomConfig(i int, name string, heavy bool, rec *tickRecorder) room.Config[Input] {
	state := NewRoomState(uint64(i))
	var lastN uint64
	return room.Config[Input]{
		Name: name, Period: RoomPeriod, Budget: RoomBudget,
		InputQueue: RoomInputQueue, InputFull: room.RefuseInput,
		Tick: func(_ *room.Room[Input], tk *room.Tick[Input]) {
			now := time.Now()
			late := now.Sub(tk.Deadline)
			applied := 0
			tk.DrainInputs(func(in Input) {
				state.Apply(in)
				applied++
			})
			state.SimStep(rec.iters(heavy))
			var skipped uint64
			if lastN > 0 && tk.N > lastN+1 {
				skipped = tk.N - lastN - 1
			}
			lastN = tk.N
			rec.tick(heavy, max(late, 0), time.Since(now), skipped, applied)
		},
	}
}

// roomInput answers an input request for room r (nil: no such room): 400 for a malformed
// body, 404, 429 when the room's queue is full (counted in rec), else 200.
func roomInput(c *loop.Ctx, r *room.Room[Input], rec *tickRecorder) {
	in, ok := ParseInput(c.Body())
	if !ok {
		c.String(400, "bad input\n")
		return
	}
	if r == nil {
		c.String(404, "unknown room\n")
		return
	}
	err := r.Input(in)
	rec.input(err == nil)
	if err != nil {
		busy(c, 429)
		return
	}
	c.String(200, "ok")
}
