package ratelimit_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/ratelimit"
)

// Each player may move twice at once, then once every 100 s: the third move in a row gets
// 429 with the seconds until its next token in Retry-After, and another player is not
// held back.
func Example() {
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	moves := ratelimit.New(ratelimit.Config{Rate: 0.01, Burst: 2})
	byPlayer := func(c *loop.Ctx) string { return c.PathValue("player") }
	srv.Handle("POST /move/{player}", moves.Middleware(byPlayer)(func(c *loop.Ctx) { c.Bytes(204, "", nil) }))
	go func() { _ = srv.ListenAndServe() }()
	<-srv.Ready()
	defer srv.Close()

	cl := &http.Client{Timeout: 10 * time.Second}
	move := func(player string) {
		resp, err := cl.Post("http://"+srv.Addr().String()+"/move/"+player, "text/plain", nil)
		if err != nil {
			panic(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Println(player, resp.StatusCode, "Retry-After", ra)
			return
		}
		fmt.Println(player, resp.StatusCode)
	}
	move("alice")
	move("alice")
	move("alice")
	move("bob")
	// Output:
	// alice 204
	// alice 204
	// alice 429 Retry-After 100
	// bob 204
}
