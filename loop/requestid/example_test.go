package requestid_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/requestid"
)

// A request that brings its id keeps it; one that does not gets a generated one. Either
// way the response carries it and the handler reads it with Get.
func Example() {
	mw, err := requestid.New(requestid.Config{})
	if err != nil {
		panic(err)
	}
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.Use(mw)
	srv.Handle("GET /", func(c *loop.Ctx) { c.String(200, requestid.Get(c)) })
	go func() { _ = srv.ListenAndServe() }()
	<-srv.Ready()
	defer srv.Close()
	cl := &http.Client{}
	defer cl.CloseIdleConnections() // before the server closes
	generated := regexp.MustCompile(`^[0-9a-v]{12}-[0-9a-z]+$`)

	call := func(incoming string) {
		req, _ := http.NewRequest("GET", "http://"+srv.Addr().String()+"/", nil)
		if incoming != "" {
			req.Header.Set("X-Request-Id", incoming)
		}
		resp, err := cl.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		fmt.Printf("sent %q: handler saw the header's id %v, kept %v, generated %v\n",
			incoming, string(body) == id, id == incoming, generated.MatchString(id))
	}
	call("checkout-7f3a")
	call("")
	call("<forged id>")
	// Output:
	// sent "checkout-7f3a": handler saw the header's id true, kept true, generated false
	// sent "": handler saw the header's id true, kept false, generated true
	// sent "<forged id>": handler saw the header's id true, kept false, generated true
}
