package loop

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"slices"
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
	probe := dial(b, addr)
	resp, body := probe.get("/")
	if resp.StatusCode != 200 || body != "Hello, World!" {
		b.Fatalf("probe: %d %q", resp.StatusCode, body)
	}
	pc := newPlainClient(b, addr, conns, depth)
	defer pc.close()
	b.ReportAllocs()
	b.ResetTimer()
	elapsed := pc.run(b, b.N)
	b.StopTimer()
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

// BenchmarkAccountingCost measures what accounting costs end to end, in one run: two
// servers, one with accounting and one without, are driven alternately over loopback in
// rounds (16 keep-alive connections each, the order swapped every round) so that drift in
// the machine's speed hits both alike. One op is one request to each server. It reports
// the time per request of each ("on-ns/req", "off-ns/req") and the cost, on/off - 1 in
// percent of throughput: "cost-%" from the totals, "cost-%-median" as the median of the
// per-round ratios. Target (docs/accounting.md): under 5%.
func BenchmarkAccountingCost(b *testing.B) {
	for _, depth := range []int{1, 16} {
		b.Run(fmt.Sprintf("conns=16/depth=%d", depth), func(b *testing.B) {
			hello := func(s *Server) { s.Handle("GET /", func(c *Ctx) { c.String(200, "Hello, World!") }) }
			_, addrOn := startServer(b, Config{}, hello)
			_, addrOff := startServer(b, Config{NoAccounting: true}, hello)
			on := newPlainClient(b, addrOn, 16, depth)
			off := newPlainClient(b, addrOff, 16, depth)
			defer on.close()
			defer off.close()
			const rounds = 20
			per := max(b.N/rounds, 16*depth)
			on.run(b, per) // warm up both
			off.run(b, per)
			b.ReportAllocs()
			b.ResetTimer()
			var tOn, tOff time.Duration
			ratios := make([]float64, 0, rounds)
			for r := range rounds {
				var dOn, dOff time.Duration
				if r%2 == 0 {
					dOn, dOff = on.run(b, per), off.run(b, per)
				} else {
					dOff, dOn = off.run(b, per), on.run(b, per)
				}
				tOn += dOn
				tOff += dOff
				ratios = append(ratios, float64(dOn)/float64(dOff))
			}
			b.StopTimer()
			slices.Sort(ratios)
			n := float64(per * rounds)
			b.ReportMetric(float64(tOn.Nanoseconds())/n, "on-ns/req")
			b.ReportMetric(float64(tOff.Nanoseconds())/n, "off-ns/req")
			b.ReportMetric((float64(tOn)/float64(tOff)-1)*100, "cost-%")
			b.ReportMetric((ratios[rounds/2-1]+ratios[rounds/2])/2*100-100, "cost-%-median")
			b.ReportMetric(0, "ns/op") // the op mixes both servers: see the metrics above
		})
	}
}

// plainClient drives keep-alive GET / requests over a fixed set of connections, reading
// fixed-size responses (the Date header has a fixed width) into buffers it allocates once
// per run, so allocs per request are the server's.
type plainClient struct {
	ncs     []net.Conn
	req     []byte
	respLen int
	depth   int
}

func newPlainClient(b *testing.B, addr string, conns, depth int) *plainClient {
	pc := &plainClient{
		req:     []byte(strings.Repeat("GET / HTTP/1.1\r\nHost: bench\r\n\r\n", depth)),
		respLen: probeLen(b, addr),
		depth:   depth,
	}
	for range conns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		pc.ncs = append(pc.ncs, nc)
	}
	return pc
}

// run sends n requests (rounded up to whole pipelines) spread over the connections and
// returns how long they took.
func (pc *plainClient) run(b *testing.B, n int) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, len(pc.ncs))
	start := time.Now()
	for _, nc := range pc.ncs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, pc.respLen*pc.depth)
			for next.Add(int64(pc.depth))-int64(pc.depth) < int64(n) {
				if _, err := nc.Write(pc.req); err != nil {
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
		}()
	}
	wg.Wait()
	d := time.Since(start)
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	return d
}

func (pc *plainClient) close() {
	for _, nc := range pc.ncs {
		nc.Close()
	}
}
