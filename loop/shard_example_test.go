package loop_test

import (
	"fmt"
	"strconv"

	"github.com/batonrt/baton/loop"
)

// Several loops in one process: state kept per loop needs no lock, a key such as a room
// id has a home loop, and a handler reaches another loop through its Post.
func ExampleServer_Loop() {
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Shards: 2, Logger: quiet()})
	hits := make([]int, len(srv.Loops())) // hits[i] is touched by loop i only
	srv.Handle("GET /hit", func(c *loop.Ctx) {
		hits[c.Loop().Index()]++
		c.String(200, strconv.Itoa(hits[c.Loop().Index()]))
	})
	inbox := make([][]string, len(srv.Loops())) // inbox[i]: loop i only
	srv.Handle("POST /rooms/{id}/say", func(c *loop.Ctx) {
		home := srv.LoopFor(c.PathValue("id")) // the loop that holds this room
		from := c.Loop().Index()
		_ = home.Post(func() { inbox[home.Index()] = append(inbox[home.Index()], "hello from loop "+strconv.Itoa(from)) })
		c.Bytes(204, "", nil)
	})
	base := serve(srv)
	fmt.Println(get(base + "/hit")) // the first hit of whichever loop took the connection
	fmt.Println(post(base + "/rooms/arena-7/say"))
	home := srv.LoopFor("arena-7")
	got := make(chan int)
	_ = home.Post(func() { got <- len(inbox[home.Index()]) }) // runs after the handler's post
	fmt.Println(len(srv.Loops()), "loops;", <-got, "message on the room's loop")
	_ = srv.Close()
	// Output:
	// 200 1
	// 204
	// 2 loops; 1 message on the room's loop
}
