package accesslog_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/accesslog"
)

// An access log sampled one request in ten (and every 5xx), written by a goroutine of its
// own so that the loop never waits for the log.
func ExampleNew() {
	var logs bytes.Buffer // the writer goroutine is its only user until Close returns
	al, err := accesslog.New(slog.New(slog.NewJSONHandler(&logs, nil)), accesslog.Options{SampleEvery: 10})
	if err != nil {
		panic(err)
	}
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet(), OnRequestDone: al.Record})
	s.Handle("GET /", func(c *loop.Ctx) { c.String(200, "hi") })
	url := serve(s)
	for range 20 {
		fetch(url + "/")
	}
	_ = s.Close()
	al.Close() // after the server: writes what is queued
	fmt.Println(al.Logged(), al.Dropped(), strings.Count(logs.String(), `"msg":"request"`))
	// Output: 2 0 2
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve starts s and returns its base URL once it is ready.
func serve(s *loop.Server) string {
	go func() { _ = s.ListenAndServe() }()
	<-s.Ready()
	return "http://" + s.Addr().String()
}

// fetch requests url and discards the answer.
func fetch(url string) {
	if resp, err := http.Get(url); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}
