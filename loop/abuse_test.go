package loop

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heapWatcher samples the heap while a test runs and reports the peak growth.
type heapWatcher struct {
	base uint64
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func watchHeap() *heapWatcher {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w := &heapWatcher{base: ms.HeapInuse, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tk.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > w.peak.Load() {
					w.peak.Store(ms.HeapInuse)
				}
			}
		}
	}()
	return w
}

// growth stops the watcher and returns the peak heap growth in bytes.
func (w *heapWatcher) growth() uint64 {
	close(w.stop)
	<-w.done
	if p := w.peak.Load(); p > w.base {
		return p - w.base
	}
	return 0
}

// A client that never reads its responses: the server stops taking its pipelined requests
// once its unsent output passes the bound, drops it after the write-stall timeout, keeps
// memory bounded and serves others meanwhile.
func testClientNeverReads(t *testing.T, m mode) {
	big := strings.Repeat("b", 1<<20)
	var served atomic.Int32
	s, addr := startServer(t, m.cfg(Config{WriteStallTimeout: 300 * time.Millisecond}), func(s *Server) {
		s.Handle("GET /big", func(c *Ctx) {
			served.Add(1)
			c.String(200, big)
		})
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	hw := watchHeap()
	lazy := dial(t, addr)
	_ = lazy.c.(*net.TCPConn).SetReadBuffer(4096)
	// 200 pipelined requests for 1 MiB each: 200 MiB if the server buffered them all.
	lazy.send(strings.Repeat("GET /big HTTP/1.1\r\nHost: x\r\n\r\n", 200))
	normal := dial(t, addr)
	for i := 0; i < 20; i++ {
		resp, body := normal.get("/ok")
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("normal client: %d %q", resp.StatusCode, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Still without reading: the server must give up on it after the stall timeout. (Ask
	// the server: the client would see the close only after draining the kernel's buffers,
	// which TCP's zero-window probing can delay for long.)
	waitFor(t, func() bool {
		done := make(chan int, 1)
		if s.Loop(0).Post(func() { done <- len(s.conns.all) }) != nil {
			return false
		}
		return <-done == 1 // only the normal client is left
	})
	_ = lazy.c.Close()
	growth := hw.growth()
	if n := served.Load(); n >= 200 {
		t.Fatalf("all %d responses were produced for a client that reads nothing", n)
	}
	if growth > 64<<20 {
		t.Fatalf("heap grew by %d MiB for a non-reading client", growth>>20)
	}
	t.Logf("non-reading client: %d of 200 responses produced, heap growth %.1f MiB", served.Load(), float64(growth)/(1<<20))
}

// 2,000 slowloris connections trickle header bytes; all are closed by the header timeout
// while a normal client keeps being served.
func testManySlowloris(t *testing.T, m mode) {
	const n = 2000
	_, addr := startServer(t, m.cfg(Config{ReadHeaderTimeout: 500 * time.Millisecond}), func(s *Server) {
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // trickle one byte per connection every 50 ms
		defer wg.Done()
		req := []byte("GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 200))
		for k := 0; ; k++ {
			for _, c := range conns {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Write(req[k%len(req) : k%len(req)+1])
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	normal := dial(t, addr)
	for i := 0; i < 10; i++ {
		resp, body := normal.get("/ok")
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("normal client: %d %q", resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	closed := 0
	deadline := time.Now().Add(15 * time.Second)
	buf := make([]byte, 512)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		for {
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("a slowloris connection was still open after 15s (%d closed)", closed)
				}
				closed++
				break
			}
		}
	}
	close(stop)
	wg.Wait()
	if closed != n {
		t.Fatalf("%d of %d closed", closed, n)
	}
	resp, _ := normal.get("/ok")
	mustStatus(t, resp, 200)
}

// 10,000 pipelined requests in one write are all answered, in order.
func testTenThousandPipelined(t *testing.T, m mode) {
	const n = 10000
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /p/{i}", func(c *Ctx) { c.String(200, c.PathValue("i")) })
	})
	c := dial(t, addr)
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "GET /p/%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	go func() { _, _ = io.WriteString(c.c, sb.String()) }()
	for i := 0; i < n; i++ {
		resp, body := c.read("GET")
		if resp.StatusCode != 200 || body != fmt.Sprint(i) {
			t.Fatalf("response %d: %d %q", i, resp.StatusCode, body)
		}
	}
}

// A client that closes in the middle of a body leaves nothing behind; a 10 GB
// Content-Length claim is refused before any body is read.
func testAbruptCloseAndHugeClaims(t *testing.T, m mode) {
	var ran atomic.Int32
	s, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("POST /up", func(c *Ctx) {
			ran.Add(1)
			c.String(200, fmt.Sprint(len(c.Body())))
		})
	})
	hw := watchHeap()
	for i := 0; i < 50; i++ {
		c := dial(t, addr)
		c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + strings.Repeat("x", 10000))
		_ = c.c.Close()
	}
	c := dial(t, addr)
	c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n")
	resp, _ := c.read("POST")
	mustStatus(t, resp, 413)
	c.expectClosed(5 * time.Second)
	c = dial(t, addr)
	c.send("POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\n")
	resp, _ = c.read("POST")
	if resp.StatusCode != 413 && resp.StatusCode != 400 {
		t.Fatalf("huge chunk: %d", resp.StatusCode)
	}
	if g := hw.growth(); g > 64<<20 {
		t.Fatalf("heap grew by %d MiB", g>>20)
	}
	c = dial(t, addr)
	c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	resp, body := c.read("POST")
	if resp.StatusCode != 200 || body != "3" {
		t.Fatalf("normal upload: %d %q", resp.StatusCode, body)
	}
	if got := ran.Load(); got != 1 {
		t.Fatalf("%d handlers ran, want 1 (incomplete bodies must not run)", got)
	}
	_ = c.c.Close()
	// Every connection of this test is gone from the server's books.
	waitFor(t, func() bool {
		done := make(chan int, 1)
		if s.Loop(0).Post(func() { done <- len(s.conns.all) }) != nil {
			return false
		}
		return <-done == 0
	})
}
