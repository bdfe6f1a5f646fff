package room_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
)

// Two nodes of one directory (in memory here; etcd across processes) sharing a handoff
// key: a match opened on node a, with 42 points scored, moves live to node b, state and
// all, under a greater token. A draining node does the same with each of its rooms.
func ExampleRoom_Handoff() {
	dir := directory.NewEmbedded()
	key := []byte("a handoff key every node shares, 32+ bytes")
	type match struct{ Score int }
	var mu sync.Mutex
	score := map[string]*match{} // node -> the match's state there
	config := func(node string) func(name string) (room.Config[int], error) {
		return func(name string) (room.Config[int], error) {
			m := &match{}
			mu.Lock()
			score[node] = m
			mu.Unlock()
			cfg := room.Config[int]{Name: name, Period: 20 * time.Millisecond,
				Tick: func(_ *room.Room[int], t *room.Tick[int]) {
					mu.Lock()
					defer mu.Unlock()
					t.DrainInputs(func(points int) { m.Score += points })
				}}
			snap, restore := room.JSONState[int](m)
			cfg.Snapshot = func(r *room.Room[int]) ([]byte, error) { mu.Lock(); defer mu.Unlock(); return snap(r) }
			cfg.Restore = func(r *room.Room[int], b []byte) error { mu.Lock(); defer mu.Unlock(); return restore(r, b) }
			return cfg, nil
		}
	}
	node := func(id string) (*loop.Server, string) {
		s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet()})
		if err := room.UseDirectory(s, dir, room.NodeConfig{Directory: directory.Config{Node: id}, HandoffKey: key}); err != nil {
			panic(err)
		}
		if err := room.AcceptHandoffs(s, config(id)); err != nil { // POST /baton/handoff
			panic(err)
		}
		rooms := map[string]*room.Room[int]{} // this node's rooms: one loop, so loop-confined
		s.Handle("POST /open/{room}", func(c *loop.Ctx) {
			cfg, _ := config(id)(c.PathValue("room"))
			r, err := room.New(c.Loop(), cfg)
			if err == nil {
				_, err = r.Claimed(c)
			}
			if err != nil {
				c.String(503, err.Error())
				return
			}
			rooms[r.Name()] = r
			_ = r.Input(42)
			c.String(200, "opened on "+id)
		})
		s.Handle("POST /move/{room}/{to}", func(c *loop.Ctx) {
			r := rooms[c.PathValue("room")]
			before := r.Token()
			tok, err := r.Handoff(c, c.PathValue("to"))
			if err != nil {
				c.String(502, err.Error()) // the room carries on here
				return
			}
			c.String(200, fmt.Sprintf("moved to %s, token grew: %v", c.PathValue("to"), tok > before))
		})
		return s, serve(s)
	}
	a, urlA := node("a")
	defer a.Close()
	b, _ := node("b")
	defer b.Close()

	fmt.Println(post(urlA + "/open/m1"))
	fmt.Println(post(urlA + "/move/m1/b"))
	mu.Lock()
	fmt.Println("score on b:", score["b"].Score)
	mu.Unlock()
	// Output:
	// 200 opened on a
	// 200 moved to b, token grew: true
	// score on b: 42
}
