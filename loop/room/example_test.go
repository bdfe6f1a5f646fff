package room_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
)

// A room per match: players' moves go into the room's input queue from their handlers,
// the tick applies them at 20 Hz, and the state is shared with the handlers without locks.
func ExampleNew() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet()})
	type move struct{ player, dx int }
	pos := map[int]int{} // the match's state: loop-owned, no lock
	applied := loop.NewFuture[struct{}](s.Loop(0))
	var match *room.Room[move]
	s.Handle("POST /move/{player}", func(c *loop.Ctx) {
		p, _ := strconv.Atoi(c.PathValue("player"))
		if room.Error(c, match.Input(move{p, 1})) { // 429 if the queue is full (RefuseInput)
			return
		}
		c.String(202, "queued")
	})
	s.Handle("GET /pos/{player}", func(c *loop.Ctx) {
		_, _ = applied.Await(c, time.Second)
		p, _ := strconv.Atoi(c.PathValue("player"))
		c.String(200, fmt.Sprint(pos[p]))
	})
	home := s.Loop(0)
	_ = home.Post(func() { // rooms are made on the loop: this runs once the server is ready
		match, _ = room.New(home, room.Config[move]{
			Name: "match-1", Period: 50 * time.Millisecond, InputFull: room.RefuseInput,
			Tick: func(r *room.Room[move], t *room.Tick[move]) {
				n := 0
				t.DrainInputs(func(m move) { pos[m.player] += m.dx; n++ })
				if n > 0 {
					applied.Resolve(struct{}{}, nil)
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

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve starts s and returns its base URL once it is ready.
func serve(s *loop.Server) string {
	go func() { _ = s.ListenAndServe() }()
	<-s.Ready()
	return "http://" + s.Addr().String()
}

func get(url string) string { return answer(http.Get(url)) }

func post(url string) string { return answer(http.Post(url, "text/plain", nil)) }

// answer formats a response as "status body".
func answer(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}
