package loop_test

import (
	"fmt"
	"strconv"

	"github.com/batonrt/baton/loop"
)

// Several loops in one process: state kept per shard needs no lock, a key such as a room
// id has a home shard, and a handler reaches another shard through its Post.
func ExampleServer_Shard() {
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Shards: 2, Logger: quiet()})
	hits := make([]int, srv.Shards()) // hits[i] is touched by shard i's loop only
	srv.Handle("GET /hit", func(c *loop.Ctx) {
		hits[c.Shard()]++
		c.String(200, strconv.Itoa(hits[c.Shard()]))
	})
	inbox := make([][]string, srv.Shards()) // inbox[i]: shard i's loop only
	srv.Handle("POST /rooms/{id}/say", func(c *loop.Ctx) {
		home := srv.ShardFor(c.PathValue("id")) // the shard that holds this room
		from := c.Shard()
		_ = srv.Shard(home).Post(func() { inbox[home] = append(inbox[home], "hello from shard "+strconv.Itoa(from)) })
		c.NoContent()
	})
	base := serve(srv)
	fmt.Println(get(base + "/hit")) // the first hit of whichever shard took the connection
	fmt.Println(post(base + "/rooms/arena-7/say"))
	home := srv.ShardFor("arena-7")
	got := make(chan int)
	_ = srv.Shard(home).Post(func() { got <- len(inbox[home]) }) // runs after the handler's post
	fmt.Println(srv.Shards(), "shards;", <-got, "message on the room's shard")
	_ = srv.Close()
	// Output:
	// 200 1
	// 204
	// 2 shards; 1 message on the room's shard
}
