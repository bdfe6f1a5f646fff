package looptest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

// A LogBuffer collects a server's log, written on its loop, for the test's goroutine to
// read: here the log line of a handler's panic, which the server contains and answers 500.
func ExampleLogBuffer() {
	var logs looptest.LogBuffer
	s := loop.New(loop.Config{
		Addr:   "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	s.Handle("GET /boom", func(c *loop.Ctx) { panic("out of cheese") })
	go s.ListenAndServe()
	<-s.Ready()

	resp, err := http.Get("http://" + s.Addr().String() + "/boom")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	_ = s.Shutdown(context.Background())

	fmt.Println("status:", resp.StatusCode)
	fmt.Println("logged:", strings.Contains(logs.String(), "out of cheese"))
	// Output:
	// status: 500
	// logged: true
}
