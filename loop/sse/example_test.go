package sse_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/sse"
)

// A live score feed: the game publishes, every browser following /scores gets each event,
// and one that reconnects with Last-Event-ID gets what it missed.
func Example() {
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	scores, err := sse.New(srv, sse.Config{Name: "scores"})
	if err != nil {
		panic(err)
	}
	srv.Handle("GET /scores", scores.Serve)
	go func() { _ = srv.ListenAndServe() }()
	<-srv.Ready()
	defer srv.Close()

	scores.Publish(sse.Event{Type: "goal", Data: "alice 1:0"}) // kept for reconnecting clients
	scores.Publish(sse.Event{Type: "goal", Data: "bob 1:1"})

	// A browser that saw event 1 before its connection dropped reconnects.
	req, _ := http.NewRequest("GET", "http://"+srv.Addr().String()+"/scores", nil)
	req.Header.Set("Last-Event-ID", "1")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Header.Get("Content-Type"))
	br := bufio.NewReader(resp.Body)
	for {
		line, _ := br.ReadString('\n')
		if strings.HasPrefix(line, "retry:") || line == "\n" {
			continue
		}
		fmt.Print(line)
		if strings.HasPrefix(line, "data:") {
			break
		}
	}
	// Output:
	// text/event-stream; charset=utf-8
	// id: 2
	// event: goal
	// data: bob 1:1
}
