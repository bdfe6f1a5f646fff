package room_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
)

// Two nodes of one directory (in memory here; etcd.New(cli, "") across processes and
// machines): a player asks either node for a room (Join) and takes a seat where it says
// (Admit); a player who reaches a node that does not own the room is redirected to the
// owner, never seated in a second room of the same name.
func ExampleAdmit() {
	dir := directory.NewEmbedded()
	seats, _ := directory.NewSeatSigner(directory.SeatConfig{Key: []byte("a key every node shares, 32+ bytes")})
	node := func(id string) (*loop.Server, string) {
		s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet()})
		if err := room.UseDirectory(s, dir, room.NodeConfig{Directory: directory.Config{Node: id}, Seats: seats}); err != nil {
			panic(err)
		}
		s.Handle("GET /join/{room}", func(c *loop.Ctx) { room.Join(c, c.PathValue("room"), c.Query("player")) })
		s.Handle("GET /play/{room}", func(c *loop.Ctx) {
			name := c.PathValue("room")
			r, seat, ok := room.Admit(c, name, func(l *loop.Loop) (*room.Room[string], error) {
				return room.New(l, room.Config[string]{Name: name, Period: 50 * time.Millisecond,
					Tick: func(*room.Room[string], *room.Tick[string]) {}})
			})
			if !ok {
				return // answered: 401, 307 to the owner, or 503
			}
			c.String(200, seat.Player+" seated in "+r.Name()+" on "+id) // then: upgrade, r.Attach(&c.Task)
		})
		return s, serve(s)
	}
	a, urlA := node("a")
	defer a.Close()
	b, urlB := node("b")
	defer b.Close()

	type answer struct{ Node, Addr, Seat string }
	join := func(url, player string) (a answer) {
		for range 500 { // a node answers 503 until it holds its lease (just after it starts)
			resp, err := http.Get(url + "/join/m1?player=" + player)
			if err == nil && resp.StatusCode == 200 {
				_ = json.NewDecoder(resp.Body).Decode(&a)
				resp.Body.Close()
				return a
			}
			if err == nil {
				resp.Body.Close()
			}
			time.Sleep(20 * time.Millisecond)
		}
		return a
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	p1 := join(urlB, "p1") // nobody owns m1: placement chooses a node (equal nodes: "a")
	fmt.Println("ask b, go to", p1.Node)
	fmt.Println(get("http://" + p1.Addr + "/play/m1?seat=" + p1.Seat))
	p2 := join(urlB, "p2") // a owns m1 now
	fmt.Println("ask b, go to", p2.Node)
	resp, _ := noFollow.Get(urlB + "/play/m1?seat=" + p2.Seat) // p2 goes to b anyway
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Location") == urlA+"/play/m1?seat="+p2.Seat)
	// Output:
	// ask b, go to a
	// 200 p1 seated in m1 on a
	// ask b, go to a
	// 307 true
}
