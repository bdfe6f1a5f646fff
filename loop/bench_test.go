package loop

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPlaintext measures end-to-end keep-alive requests over loopback: one op is one
// request answered with the 13-byte "Hello, World!". The client side reads fixed-size
// responses into reused buffers and allocates nothing per request, so allocs/op is the
// server's. Sub-benchmarks compare the loop locked to its OS thread or not, and pipelining
// depth 1 (request/response) with 16.
func BenchmarkPlaintext(b *testing.B) {
	for _, lock := range []bool{false, true} {
		for _, depth := range []int{1, 16} {
			for _, acct := range []bool{true, false} {
				b.Run(fmt.Sprintf("lock=%v/conns=16/depth=%d/accounting=%v", lock, depth, acct), func(b *testing.B) {
					benchPlaintext(b, Config{LockOSThread: lock, NoAccounting: !acct}, 16, depth)
				})
			}
		}
	}
}

func benchPlaintext(b *testing.B, cfg Config, conns, depth int) {
	_, addr := startServer(b, cfg, func(s *Server) {
		s.Handle("GET /", func(c *Ctx) { c.String(200, "Hello, World!") })
	})
	req := []byte(strings.Repeat("GET / HTTP/1.1\r\nHost: bench\r\n\r\n", depth))
	// Learn the exact response size (the Date header has a fixed width).
	probe := dial(b, addr)
	resp, body := probe.get("/")
	if resp.StatusCode != 200 || body != "Hello, World!" {
		b.Fatalf("probe: %d %q", resp.StatusCode, body)
	}
	respLen := probeLen(b, addr)

	var next atomic.Int64
	total := int64(b.N)
	var wg sync.WaitGroup
	errc := make(chan error, conns)
	ncs := make([]net.Conn, conns)
	for i := range ncs {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		ncs[i] = nc
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for _, nc := range ncs {
		wg.Add(1)
		go func(nc net.Conn) {
			defer wg.Done()
			defer nc.Close()
			buf := make([]byte, respLen*depth)
			for {
				n := next.Add(int64(depth))
				if n-int64(depth) >= total {
					return
				}
				if _, err := nc.Write(req); err != nil {
					errc <- err
					return
				}
				if _, err := io.ReadFull(nc, buf); err != nil {
					errc <- err
					return
				}
				if !bytes.HasSuffix(buf, []byte("Hello, World!")) {
					errc <- fmt.Errorf("bad response %q", buf)
					return
				}
			}
		}(nc)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
}

func probeLen(b *testing.B, addr string) int {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	if _, err := io.WriteString(nc, "GET / HTTP/1.1\r\nHost: bench\r\n\r\n"); err != nil {
		b.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n := 0
	for !bytes.HasSuffix(buf[:n], []byte("Hello, World!")) {
		m, err := nc.Read(buf[n:])
		if err != nil {
			b.Fatal(err)
		}
		n += m
	}
	return n
}
