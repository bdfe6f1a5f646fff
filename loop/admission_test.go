package loop

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// With RequestConcurrency 10 and MaxQueueLength 20, 100 concurrent slow requests: exactly
// 30 are admitted or queued and 70 get 429 with a numeric Retry-After; an exempt route
// answers during the flood; queued requests start in arrival order.
func testAdmissionLimitAndQueue(t *testing.T, m mode) {
	const n, q, total = 10, 20, 100
	release := make(chan struct{})
	var mu sync.Mutex
	var started []int // order in which handlers started
	var running atomic.Int32
	s, addr := startServer(t, m.cfg(Config{RequestConcurrency: n, MaxQueueLength: q}), func(s *Server) {
		s.Handle("GET /slow/{i}", func(c *Ctx) {
			i, _ := strconv.Atoi(c.PathValue("i"))
			mu.Lock()
			started = append(started, i)
			mu.Unlock()
			running.Add(1)
			for {
				select {
				case <-release:
					c.String(200, "done")
					return
				default:
				}
				if err := c.Sleep(2 * time.Millisecond); err != nil {
					return
				}
			}
		})
		s.Handle("GET /health", func(c *Ctx) { c.String(200, "ok") }, Exempt())
	})
	_ = s
	clients := make([]*client, total)
	// Send one at a time and wait until the server has seen it, so arrival order is known.
	for i := range clients {
		clients[i] = dial(t, addr)
		clients[i].send(fmt.Sprintf("GET /slow/%d HTTP/1.1\r\nHost: x\r\n\r\n", i))
		if i < n {
			waitFor(t, func() bool { return running.Load() == int32(i+1) })
		} else {
			time.Sleep(2 * time.Millisecond)
		}
	}
	// The refused ones are answered at once, while the others are held.
	refused := 0
	for i := n + q; i < total; i++ {
		resp, _ := clients[i].read("GET")
		if resp.StatusCode != 429 {
			t.Fatalf("request %d: status %d, want 429", i, resp.StatusCode)
		}
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || ra < 1 {
			t.Fatalf("request %d: Retry-After %q", i, resp.Header.Get("Retry-After"))
		}
		refused++
	}
	// Monitoring still works during the flood.
	resp, body := dial(t, addr).get("/health")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("exempt route: %d %q", resp.StatusCode, body)
	}
	if got := running.Load(); got != n {
		t.Fatalf("%d handlers running, want %d", got, n)
	}
	// Release the handlers one at a time: each completion admits exactly one queued
	// request, so the start order shows the queue order in both modes.
	for k := 0; k < n+q; k++ {
		release <- struct{}{}
		want := min(n+k+1, n+q)
		waitFor(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(started) == want
		})
	}
	for i := 0; i < n+q; i++ {
		resp, body := clients[i].read("GET")
		if resp.StatusCode != 200 || body != "done" {
			t.Fatalf("admitted request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if refused != total-n-q {
		t.Fatalf("refused %d, want %d", refused, total-n-q)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(started) != n+q {
		t.Fatalf("%d handlers started, want %d", len(started), n+q)
	}
	for k, i := range started[n:] { // the queued ones, in FIFO order
		if i != n+k {
			t.Fatalf("queued requests started in order %v, want %d.. in order", started[n:], n)
		}
	}
}

// A queued request whose client leaves is dropped from the queue without running.
func testAdmissionQueuedClientLeaves(t *testing.T, m mode) {
	var ran atomic.Int32
	block := make(chan struct{})
	_, addr := startServer(t, m.cfg(Config{RequestConcurrency: 1, MaxQueueLength: 5}), func(s *Server) {
		s.Handle("GET /w/{i}", func(c *Ctx) {
			ran.Add(1)
			for {
				select {
				case <-block:
					c.String(200, c.PathValue("i"))
					return
				default:
				}
				if c.Sleep(time.Millisecond) != nil {
					return
				}
			}
		})
	})
	first := dial(t, addr)
	first.send("GET /w/0 HTTP/1.1\r\nHost: x\r\n\r\n")
	waitFor(t, func() bool { return ran.Load() == 1 })
	leaver := dial(t, addr)
	leaver.send("GET /w/1 HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(20 * time.Millisecond)
	_ = leaver.c.Close()
	time.Sleep(20 * time.Millisecond)
	last := dial(t, addr)
	last.send("GET /w/2 HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(20 * time.Millisecond)
	close(block)
	if _, body := first.read("GET"); body != "0" {
		t.Fatalf("first: %q", body)
	}
	if _, body := last.read("GET"); body != "2" {
		t.Fatalf("last: %q", body)
	}
	if got := ran.Load(); got != 2 {
		t.Fatalf("%d handlers ran, want 2 (the leaver's must not run)", got)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func testHandlerTimeoutAnswers503(t *testing.T, m mode) {
	errs := make(chan error, 1)
	_, addr := startServer(t, m.cfg(Config{HandlerTimeout: 50 * time.Millisecond}), func(s *Server) {
		s.Handle("GET /slow", func(c *Ctx) {
			errs <- c.Sleep(10 * time.Second)
			c.String(200, "too late") // dropped: the server already answered
		})
		s.Handle("GET /fast", func(c *Ctx) { c.String(200, "fast") })
	})
	c := dial(t, addr)
	resp, _ := c.get("/slow")
	mustStatus(t, resp, 503)
	if err := <-errs; err == nil || err.Error() != "context deadline exceeded" {
		t.Fatalf("handler's Sleep returned %v", err)
	}
	resp, body := c.get("/fast") // the connection still works, with nothing stray on it
	if resp.StatusCode != 200 || body != "fast" {
		t.Fatalf("after timeout: %d %q", resp.StatusCode, body)
	}
}
