package loop_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/loop"
)

// BenchmarkConnChurn measures one short-lived connection: connect on loopback, GET /, read
// the answer, close. Client and server share the process, so cpu-ns/op (the process's user
// plus system CPU per connection, from getrusage) includes the client's share; compare it
// between builds of the server, not with other figures.
func BenchmarkConnChurn(b *testing.B) {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s.Handle("GET /", func(c *loop.Ctx) { c.String(200, "ok\n") })
	served := make(chan error, 1)
	go func() { served <- s.ListenAndServe() }()
	<-s.Ready()
	addr := s.Addr().String()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(b, s.Shutdown(ctx))
		require.True(b, errors.Is(<-served, loop.ErrServerClosed))
	})
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		_ = c.Close()
	}
	b.StopTimer()
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}
