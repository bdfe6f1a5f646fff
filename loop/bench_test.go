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

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
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

// BenchmarkServeNoIO measures the loop's own work per request with no sockets and no
// syscalls: fake gnet connections hand a server reads of depth pipelined requests, one
// connection after the other, and swallow the responses. Two servers, one with accounting
// and one without, take turns in chunks of about 4,096 requests, so that drift in the
// machine's speed hits both alike. One op is one request to each; it reports "on-ns/req"
// and "off-ns/req" (wall time), "on-cpu-ns/req" and "off-cpu-ns/req" (the process's CPU
// time, steadier on a machine shared with other work) and "cost-%" (on/off - 1, wall). The
// syscalls a real request also pays are missing from both, so this cost bounds the
// end-to-end one from above, with far less noise: it is the figure to optimise against. With 1,024 connections the per-connection
// state no longer stays in the caches, as with 1,024 real clients.
func BenchmarkServeNoIO(b *testing.B) {
	for _, c := range []struct{ conns, depth int }{{1, 1}, {1024, 1}, {1, 16}} {
		b.Run(fmt.Sprintf("conns=%d/depth=%d", c.conns, c.depth), func(b *testing.B) {
			on := newFakeServer(b, Config{}, c.conns, c.depth)
			off := newFakeServer(b, Config{NoAccounting: true}, c.conns, c.depth)
			reads := max(4096/c.depth, 1)
			b.ReportAllocs()
			b.ResetTimer()
			var tOn, tOff, cpuOn, cpuOff time.Duration
			n := 0
			for r := 0; n < b.N; r++ {
				if r%2 == 0 {
					tOn, cpuOn = addServe(on, reads, tOn, cpuOn)
					tOff, cpuOff = addServe(off, reads, tOff, cpuOff)
				} else {
					tOff, cpuOff = addServe(off, reads, tOff, cpuOff)
					tOn, cpuOn = addServe(on, reads, tOn, cpuOn)
				}
				n += reads * c.depth
			}
			b.StopTimer()
			on.check(b)
			off.check(b)
			b.ReportMetric(float64(tOn.Nanoseconds())/float64(n), "on-ns/req")
			b.ReportMetric(float64(tOff.Nanoseconds())/float64(n), "off-ns/req")
			b.ReportMetric(float64(cpuOn.Nanoseconds())/float64(n), "on-cpu-ns/req")
			b.ReportMetric(float64(cpuOff.Nanoseconds())/float64(n), "off-cpu-ns/req")
			b.ReportMetric((float64(tOn)/float64(tOff)-1)*100, "cost-%")
			b.ReportMetric(0, "ns/op") // the op mixes both servers: see the metrics above
		})
	}
}

// addServe runs fs.serve(reads) and adds its wall time to wall and the process's CPU time
// over it to cpu. On a machine shared with other work, CPU time leaves out the time the
// process waited for a core, so it is the steadier of the two figures.
func addServe(fs *fakeServer, reads int, wall, cpu time.Duration) (time.Duration, time.Duration) {
	c0 := processCPU()
	wall += fs.serve(reads)
	return wall, cpu + processCPU() - c0
}

// processCPU returns the CPU time the process has used (every thread, user and system).
func processCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// fakeServer is a server fed by fakeConns, without its gnet engine: the benchmark's
// goroutine is its loop.
type fakeServer struct {
	s       *Server
	fcs     []*fakeConn
	ev      *events
	next    int // the connection the next read comes from
	depth   int
	reads   int64
	respLen int64
}

func newFakeServer(b *testing.B, cfg Config, conns, depth int) *fakeServer {
	cfg.Logger = quietLogger(b)
	s := New(cfg)
	s.Handle("GET /", func(c *Ctx) { c.String(200, "Hello, World!") })
	b.Cleanup(s.sched.Close)
	in := []byte(strings.Repeat("GET / HTTP/1.1\r\nHost: bench\r\n\r\n", depth))
	fs := &fakeServer{s: s, ev: (*events)(s), depth: depth}
	for range conns {
		fc := &fakeConn{in: in}
		fc.SetContext(s.newConn(fc))
		fs.fcs = append(fs.fcs, fc)
	}
	fc := fs.fcs[0]
	fs.ev.OnTraffic(fc) // warm up, and learn the response's length
	if fc.written == 0 || fc.written%int64(depth) != 0 {
		b.Fatalf("warm-up wrote %d bytes for %d requests", fc.written, depth)
	}
	fs.respLen, fc.written = fc.written/int64(depth), 0
	return fs
}

// serve hands the server n reads, one per connection in turn, and returns how long it took.
func (fs *fakeServer) serve(n int) time.Duration {
	start := time.Now()
	for range n {
		fc := fs.fcs[fs.next]
		if fs.next++; fs.next == len(fs.fcs) {
			fs.next = 0
		}
		fc.off = 0
		fs.ev.OnTraffic(fc)
	}
	fs.reads += int64(n)
	return time.Since(start)
}

// check fails b unless every request was answered.
func (fs *fakeServer) check(b *testing.B) {
	var written int64
	for _, fc := range fs.fcs {
		written += fc.written
	}
	if want := fs.reads * int64(fs.depth) * fs.respLen; written != want {
		b.Fatalf("wrote %d bytes, want %d (%d reads of %d requests)", written, want, fs.reads, fs.depth)
	}
}

var fakeAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}

// fakeConn is the part of gnet.Conn the server's request path uses, over a fixed input
// buffer; the rest of the interface is nil and panics if called.
type fakeConn struct {
	gnet.Conn
	in      []byte
	off     int
	written int64
	ctx     any
}

func (f *fakeConn) Peek(int) ([]byte, error)    { return f.in[f.off:], nil }
func (f *fakeConn) Discard(n int) (int, error)  { f.off += n; return n, nil }
func (f *fakeConn) InboundBuffered() int        { return len(f.in) - f.off }
func (f *fakeConn) OutboundBuffered() int       { return 0 }
func (f *fakeConn) Write(p []byte) (int, error) { f.written += int64(len(p)); return len(p), nil }
func (f *fakeConn) Context() any                { return f.ctx }
func (f *fakeConn) SetContext(ctx any)          { f.ctx = ctx }
func (f *fakeConn) RemoteAddr() net.Addr        { return fakeAddr }
