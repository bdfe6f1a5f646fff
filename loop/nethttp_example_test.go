package loop_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/batonrt/baton/loop"
)

// An existing net/http application (here a ServeMux with a JSON endpoint) mounted under a
// prefix of a baton server, beside baton's own handlers. The net/http handlers run on
// goroutines of their own, never on the loop.
func ExampleServer_HandleHTTP() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /legacy/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"version": "1.2.3"})
	})
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet()})
	s.HandleHTTP("/legacy/", mux)
	s.Handle("GET /native", func(c *loop.Ctx) { c.String(200, "on the loop") })
	url := serve(s)
	defer s.Close()

	fmt.Println(get(url + "/legacy/version"))
	fmt.Println(get(url + "/native"))
	// Output:
	// 200 {"version":"1.2.3"}
	// 200 on the loop
}

// An access log sampled one request in ten (and every 5xx), written by a goroutine of its
// own so that the loop never waits for the log.
func ExampleNewAccessLogger() {
	var logs bytes.Buffer // the writer goroutine is its only user until Close returns
	al, err := loop.NewAccessLogger(slog.New(slog.NewJSONHandler(&logs, nil)), loop.AccessLogOptions{SampleEvery: 10})
	if err != nil {
		panic(err)
	}
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet(), OnRequestDone: al.Record})
	s.Handle("GET /", func(c *loop.Ctx) { c.String(200, "hi") })
	url := serve(s)
	for range 20 {
		get(url + "/")
	}
	_ = s.Close()
	al.Close() // after the server: writes what is queued
	fmt.Println(al.Logged(), al.Dropped(), strings.Count(logs.String(), `"msg":"request"`))
	// Output: 2 0 2
}
