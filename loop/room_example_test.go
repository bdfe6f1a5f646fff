package loop_test

import (
	"fmt"
	"strconv"
	"time"

	"github.com/batonrt/baton/loop"
)

// A room per match: players' moves go into the room's input queue from their handlers,
// the tick applies them at 20 Hz, and the state is shared with the handlers without locks.
func ExampleNewRoom() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet()})
	type move struct{ player, dx int }
	pos := map[int]int{} // the match's state: loop-owned, no lock
	applied := loop.NewEvent(s)
	var match *loop.Room[move]
	s.Handle("POST /move/{player}", func(c *loop.Ctx) {
		p, _ := strconv.Atoi(c.PathValue("player"))
		if c.RoomError(match.Input(move{p, 1})) { // 429 if the queue is full (RefuseInput)
			return
		}
		c.String(202, "queued")
	})
	s.Handle("GET /pos/{player}", func(c *loop.Ctx) {
		_ = applied.WaitTimeout(c, time.Second)
		p, _ := strconv.Atoi(c.PathValue("player"))
		c.String(200, fmt.Sprint(pos[p]))
	})
	_ = s.Post(func() { // rooms are made on the loop: this runs once the server is ready
		match, _ = loop.NewRoom(s, loop.RoomConfig[move]{
			Name: "match-1", Period: 50 * time.Millisecond, InputFull: loop.RefuseInput,
			Tick: func(r *loop.Room[move], t *loop.Tick[move]) {
				n := 0
				t.DrainInputs(func(m move) { pos[m.player] += m.dx; n++ })
				if n > 0 {
					applied.Set()
				}
			},
		})
	})
	url := serve(s)
	defer s.Close()

	fmt.Println(post(url + "/move/7"))
	fmt.Println(get(url + "/pos/7"))
	// Output:
	// 202 queued
	// 200 1
}
