package servers

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/stats"
)

// startBatonShards serves the plaintext and rooms routes on srv, a baton server with
// Config.Shards > 1. The other scenarios' baton routes share plain values between all
// their handlers, which is right for one loop only, so they are not served here.
func startBatonShards(srv *loop.Server, noAccounting bool) (*Running, error) {
	srv.Handle("GET /plaintext", func(c *loop.Ctx) {
		c.String(200, Hello)
	})
	registerRoomsBatonShards(srv)
	if !noAccounting {
		stats.Mount(srv, "/debug/baton") // totals over the shards plus each shard's figures
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case <-srv.Ready():
	case err := <-errc:
		return nil, err
	}
	return &Running{addr: srv.Addr().String(), close: func() error {
		err := srv.Close()
		<-errc
		return err
	}}, nil
}

// registerRoomsBatonShards is registerRoomsBaton for a server with shards: room i runs on
// loop LoopFor(its name), made by a setup task of that shard (over one period, as with
// one loop); a room's simulation state is touched by its ticks only, on its shard. The
// rooms are found through a sync.Map, because an input may arrive on any shard
// (Room.Input is safe from any goroutine); the setup is guarded by a mutex and the tick
// recorder has its own.
func registerRoomsBatonShards(srv *loop.Server) {
	var (
		mu    sync.Mutex // guards setup and started
		setup RoomSetup
		began bool
		rooms sync.Map // room name → *room.Room[Input]
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
		mu.Lock()
		if began {
			mu.Unlock()
			c.String(409, "rooms already set up\n")
			return
		}
		setup, began = s, true
		rec.setup(s)
		mu.Unlock()
		n := s.Rooms
		if s.HeavyIters > 0 {
			n++
		}
		for j := range len(srv.Loops()) {
			sh := srv.Loop(j)
			// Each shard makes its rooms at once, their first ticks spread over one
			// period by FirstTick (see registerRoomsBaton).
			sh.Go("rooms-setup", func(t *loop.Task) {
				start := time.Now()
				for i := range n {
					name, heavy := roomName(i), false
					if i == s.Rooms {
						name, heavy = HeavyRoomName, true
					}
					if srv.LoopFor(name).Index() != j {
						continue
					}
					cfg := benchRoomConfig(i, name, heavy, rec)
					cfg.FirstTick = firstTick(i, n, start)
					r, err := room.New(srv.Loop(j), cfg)
					if err != nil {
						return // draining or stopped
					}
					rooms.Store(name, r)
				}
			})
		}
		rec.reset()
		c.String(200, "ok")
	})
	srv.Handle("POST /rooms/{id}/input", func(c *loop.Ctx) {
		var r *room.Room[Input]
		if v, ok := rooms.Load(c.PathValue("id")); ok {
			r = v.(*room.Room[Input])
		}
		roomInput(c, r, rec)
	})
	srv.Handle("POST /rooms/reset", func(c *loop.Ctx) {
		rec.reset()
		c.String(200, "ok")
	})
	srv.Handle("GET /rooms/stats", func(c *loop.Ctx) {
		mu.Lock()
		s := setup
		mu.Unlock()
		c.JSON(200, rec.stats(s.Rooms, s.HeavyIters > 0))
	})
}
