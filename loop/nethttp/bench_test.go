package nethttp

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
)

// BenchmarkHTTPAdapter compares one keep-alive client's round trips, interleaved in one
// run: a native baton handler, the same answer from a net/http handler through the adapter
// (single- and multi-thread mode), and that net/http handler on net/http.Server.
func BenchmarkHTTPAdapter(b *testing.B) {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "Hello, World!")
	})
	ref := httptest.NewServer(hello)
	b.Cleanup(ref.Close)
	_, native := startServer(b, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /", func(c *loop.Ctx) { c.Bytes(200, "text/plain", []byte("Hello, World!")) })
	})
	_, single := startServer(b, loop.Config{}, func(s *loop.Server) { handle(b, s, "/", hello) })
	_, multi := startServer(b, loop.Config{MultiThread: true}, func(s *loop.Server) { handle(b, s, "/", hello) })
	targets := []struct{ name, addr string }{
		{"native", native}, {"adapter-single", single}, {"adapter-multi", multi},
		{"net/http", strings.TrimPrefix(ref.URL, "http://")},
	}
	conns := make([]*rtConn, len(targets))
	for i, tg := range targets {
		conns[i] = newRTConn(b, tg.addr)
	}
	total := make([]time.Duration, len(targets))
	const batch = 200
	b.ResetTimer()
	for n := 0; n < b.N; n += batch {
		for i := range targets {
			j := (i + n/batch) % len(targets) // rotate the order
			total[j] += conns[j].roundTrips(b, batch)
		}
	}
	b.StopTimer()
	rounds := float64((b.N + batch - 1) / batch * batch)
	for i, tg := range targets {
		b.ReportMetric(float64(total[i].Nanoseconds())/rounds, tg.name+"-ns/req")
	}
	b.ReportMetric(0, "ns/op")
}

type rtConn struct {
	c  net.Conn
	br *bufio.Reader
}

func newRTConn(b *testing.B, addr string) *rtConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return &rtConn{c: c, br: bufio.NewReader(c)}
}

var rtRequest = []byte("GET / HTTP/1.1\r\nHost: bench\r\n\r\n")

func (r *rtConn) roundTrips(b *testing.B, n int) time.Duration {
	start := time.Now()
	for range n {
		if _, err := r.c.Write(rtRequest); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(r.br, nil)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	return time.Since(start)
}
