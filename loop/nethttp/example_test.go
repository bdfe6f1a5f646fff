package nethttp_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/nethttp"
)

// An existing net/http application (here a ServeMux with a JSON endpoint) mounted under a
// prefix of a baton server, beside baton's own handlers. The net/http handlers run on
// goroutines of their own, never on the loop.
func Example() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /legacy/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"version": "1.2.3"})
	})
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	legacy, err := nethttp.New(s, nethttp.Config{MaxConcurrent: 64})
	if err != nil {
		panic(err)
	}
	legacy.Handle("/legacy/", mux)
	s.Handle("GET /native", func(c *loop.Ctx) { c.String(200, "on the loop") })
	go func() { _ = s.ListenAndServe() }()
	<-s.Ready()
	defer s.Close()

	get := func(path string) string {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + s.Addr().String() + path)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	fmt.Println(get("/legacy/version"))
	fmt.Println(get("/native"))
	// Output:
	// 200 {"version":"1.2.3"}
	// 200 on the loop
}
