package health_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/health"
)

// The probes on an admin listener, off the loop: they answer, and name what holds the
// loop, even while a task holds it.
func Example() {
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	checks, err := health.New(srv, health.Config{}) // the documented defaults
	if err != nil {
		panic(err)
	}
	admin := httptest.NewServer(checks.Handler()) // in production: a loopback admin listener
	defer admin.Close()
	go func() { _ = srv.ListenAndServe() }()
	<-srv.Ready()
	defer srv.Close()

	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(admin.URL + path)
		if err != nil {
			panic(err)
		}
		_ = resp.Body.Close()
		fmt.Println(path, resp.StatusCode)
	}
	fmt.Println(checks.Healthz().Status, checks.Config().StallAfter)
	// Output:
	// /healthz 200
	// /readyz 200
	// ok 1s
}
