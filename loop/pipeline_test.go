package loop

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client that stops reading but keeps sending is cut off once its
// unparsed input passes Config.MaxBufferedInput, whatever the connection is doing.
func TestInputBoundedWhileOutputBacksUp(t *testing.T) {
	big := strings.Repeat("b", 1<<20)
	_, addr := startServer(t, Config{MaxBufferedInput: 1 << 20, MaxOutputBytes: 2 << 20}, func(s *Server) {
		s.Handle("GET /big", func(c *Ctx) { c.String(200, big) })
	})
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer nc.Close()
	var sb strings.Builder
	for i := 0; i < 40; i++ {
		sb.WriteString("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	_, err = io.WriteString(nc, sb.String())
	require.NoError(t, err)
	flood := []byte(strings.Repeat("GET /big HTTP/1.1\r\nHost: x\r\n\r\n", 1000))
	deadline := time.Now().Add(20 * time.Second)
	var sent int
	for time.Now().Before(deadline) {
		_ = nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := nc.Write(flood)
		sent += n
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // the kernel buffers are full: keep pushing until the server cuts us off
			}
			break // reset or broken pipe: the server closed the connection
		}
	}
	require.True(t, time.Now().Before(deadline), "still accepting input after %d MiB", sent>>20)
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
		require.Equal(t, 200, resp.StatusCode, "normal client")
		require.Equal(t, "ok", body, "normal client")
		time.Sleep(10 * time.Millisecond) // spreads the checks over the backlog's growth; orders nothing
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
	require.Less(t, served.Load(), int32(200), "every response was produced for a client that reads nothing")
	require.LessOrEqual(t, growth, uint64(64<<20), "heap growth for a non-reading client")
	t.Logf("non-reading client: %d of 200 responses produced, heap growth %.1f MiB", served.Load(), float64(growth)/(1<<20))
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
		require.Equal(t, 200, resp.StatusCode, "response %d", i)
		require.Equal(t, fmt.Sprint(i), body, "response %d", i)
	}
}

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
