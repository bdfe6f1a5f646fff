package stats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"
)

// A game server with its stats pages and dashboard on an admin listener, and the same
// figures read as Go values.
func Example() {
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.Handle("GET /leaderboard", func(c *loop.Ctx) { c.String(200, "alice 3\n") })
	go func() { _ = srv.ListenAndServe() }()
	<-srv.Ready()
	defer srv.Close()

	// The admin listener: in production an http.Server on 127.0.0.1:6060.
	admin := httptest.NewServer(http.StripPrefix("/debug/baton", stats.Handler(srv)))
	defer admin.Close()

	cl := &http.Client{Timeout: 10 * time.Second}
	for range 3 {
		resp, err := cl.Get("http://" + srv.Addr().String() + "/leaderboard")
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
	}

	// The routes page, as JSON.
	resp, err := cl.Get(admin.URL + "/debug/baton/routes")
	if err != nil {
		panic(err)
	}
	var page struct {
		Routes []struct {
			Route string `json:"route"`
			Count uint64 `json:"count"`
		} `json:"routes"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, page.Routes[0].Route, page.Routes[0].Count)

	// The same figures as Go values.
	snap, err := stats.Take(context.Background(), srv, stats.ViewRoutes|stats.ViewAdmission)
	if err != nil {
		panic(err)
	}
	fmt.Println(snap.Routes[0].Route, snap.Routes[0].Count, snap.Admission.Parsed >= 3)
	// Output:
	// 200 GET /leaderboard 3
	// GET /leaderboard 3 true
}
