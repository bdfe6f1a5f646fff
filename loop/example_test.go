package loop_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// serve starts s on a free port and returns its base URL (examples only: tests use looptest).
func serve(s *loop.Server) string {
	go func() { _ = s.ListenAndServe() }()
	<-s.Ready()
	return "http://" + s.Addr().String()
}

func get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b))))
}

func post(url string) string {
	resp, err := http.Post(url, "text/plain", nil)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b))))
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Handlers share a plain map with no mutex: in single-thread mode only one runs at a time,
// even while others are parked in Sleep.
func Example() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet(), RequireSingleThread: true})
	lobby := map[string]int{} // no lock needed
	s.Handle("POST /lobby/{name}", func(c *loop.Ctx) {
		lobby[c.PathValue("name")]++
		_ = c.Sleep(time.Millisecond) // parks this task; others run meanwhile
		c.String(200, fmt.Sprint(len(lobby)))
	})
	url := serve(s)
	defer s.Close()

	fmt.Println(post(url + "/lobby/ana"))
	fmt.Println(post(url + "/lobby/bo"))
	fmt.Println(post(url + "/lobby/ana"))
	// Output:
	// 200 1
	// 200 2
	// 200 2
}

// A blocking call (a database, a file) runs in the offload pool while the handler's task
// is parked; the loop serves other requests meanwhile.
func Example_offload() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet()})
	s.Handle("GET /profile/{id}", func(c *loop.Ctx) {
		id := c.PathValue("id") // read the request on the loop; the function below runs off it
		name, err := offload.Do(c, func(ctx context.Context) (string, error) {
			time.Sleep(10 * time.Millisecond) // stands for a blocking query
			return "player-" + id, nil
		})
		if err != nil {
			c.String(503, "try again")
			return
		}
		c.String(200, name)
	})
	url := serve(s)
	defer s.Close()

	fmt.Println(get(url + "/profile/7"))
	// Output:
	// 200 player-7
}

// A game tick per match, stopped when the match ends. Ticks run on the loop and share the
// match state with handlers without locks.
func ExampleLoop_Every() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet()})
	ticks := 0 // the match's state: touched only on the loop
	var tick *loop.TaskHandle
	tick = s.Loop(0).Every("match 1", 5*time.Millisecond, func(t *loop.Task) {
		ticks++
		if ticks == 3 {
			tick.Stop() // the match ended: no more ticks
		}
	})
	s.Handle("GET /match/ticks", func(c *loop.Ctx) { c.String(200, fmt.Sprint(ticks)) })
	url := serve(s)
	defer s.Close()

	<-tick.Done()
	fmt.Println("match 1 ended")
	fmt.Println(get(url + "/match/ticks"))
	// Output:
	// match 1 ended
	// 200 3
}

// Shutdown lets the request in flight finish and answer; the drain report says what it
// waited for.
func ExampleServer_Shutdown() {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet()})
	started := make(chan struct{})
	s.Handle("GET /slow", func(c *loop.Ctx) {
		close(started)
		_ = c.Sleep(50 * time.Millisecond)
		c.String(200, "finished")
	})
	url := serve(s)

	answer := make(chan string)
	go func() { answer <- get(url + "/slow") }()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println("shutdown:", s.Shutdown(ctx))
	fmt.Println(<-answer)
	fmt.Println("in flight when it began:", s.DrainReport().InFlight)
	// Output:
	// shutdown: <nil>
	// 200 finished
	// in flight when it began: 1
}
