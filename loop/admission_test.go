package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	clients := make([]*client, total)
	// Send one at a time and wait until the server has seen it, so arrival order is known.
	for i := range clients {
		clients[i] = dial(t, addr)
		clients[i].send(fmt.Sprintf("GET /slow/%d HTTP/1.1\r\nHost: x\r\n\r\n", i))
		if i < n {
			waitFor(t, func() bool { return running.Load() == int32(i+1) })
		} else {
			seen := uint64(i - n + 1) // requests queued or refused so far
			waitFor(t, func() bool { a := admissionOf(t, s); return a.QueuedTotal+a.RefusedTotal == seen })
		}
	}
	// The refused ones are answered at once, while the others are held.
	refused := 0
	for i := n + q; i < total; i++ {
		resp, _ := clients[i].read("GET")
		require.Equal(t, 429, resp.StatusCode, "request %d", i)
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err, "request %d: Retry-After %q", i, resp.Header.Get("Retry-After"))
		require.GreaterOrEqual(t, ra, 1, "request %d: Retry-After", i)
		refused++
	}
	// Monitoring still works during the flood.
	resp, body := dial(t, addr).get("/health")
	require.Equal(t, 200, resp.StatusCode, "exempt route")
	require.Equal(t, "ok", body, "exempt route")
	require.EqualValues(t, n, running.Load(), "handlers running")
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
		require.Equal(t, 200, resp.StatusCode, "admitted request %d", i)
		require.Equal(t, "done", body, "admitted request %d", i)
	}
	require.Equal(t, total-n-q, refused, "refused")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, started, n+q, "handlers started")
	want := make([]int, q) // the queued ones, in FIFO order
	for k := range want {
		want[k] = n + k
	}
	require.Equal(t, want, started[n:], "queued requests' start order")
}

// A queued request whose client leaves is dropped from the queue without running.
func testAdmissionQueuedClientLeaves(t *testing.T, m mode) {
	var ran atomic.Int32
	block := make(chan struct{})
	s, addr := startServer(t, m.cfg(Config{RequestConcurrency: 1, MaxQueueLength: 5}), func(s *Server) {
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
	queued := func(want int) func() bool {
		return func() bool { return admissionOf(t, s).Queued == want }
	}
	first := dial(t, addr)
	first.send("GET /w/0 HTTP/1.1\r\nHost: x\r\n\r\n")
	waitFor(t, func() bool { return ran.Load() == 1 })
	leaver := dial(t, addr)
	leaver.send("GET /w/1 HTTP/1.1\r\nHost: x\r\n\r\n")
	waitFor(t, queued(1))
	_ = leaver.c.Close()
	waitFor(t, queued(0)) // the server saw the close and dropped the request from the queue
	last := dial(t, addr)
	last.send("GET /w/2 HTTP/1.1\r\nHost: x\r\n\r\n")
	waitFor(t, queued(1))
	close(block)
	_, body := first.read("GET")
	require.Equal(t, "0", body, "first")
	_, body = last.read("GET")
	require.Equal(t, "2", body, "last")
	require.EqualValues(t, 2, ran.Load(), "handlers ran (the leaver's must not run)")
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.False(t, time.Now().After(deadline), "condition not reached within 10s")
		time.Sleep(time.Millisecond) // polls the condition: orders nothing
	}
}

// admissionOf returns s's admission figures, copied on the loop. Any goroutine but the
// loop's.
func admissionOf(t testing.TB, s *Server) accounting.AdmissionStats {
	t.Helper()
	a, err := askLoop(context.Background(), s, 10*time.Second, s.admissionSnapshot)
	require.NoError(t, err)
	return a
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
	err := <-errs
	require.Error(t, err, "handler's Sleep")
	require.Equal(t, "context deadline exceeded", err.Error(), "handler's Sleep")
	resp, body := c.get("/fast") // the connection still works, with nothing stray on it
	require.Equal(t, 200, resp.StatusCode, "after timeout")
	require.Equal(t, "fast", body, "after timeout")
}

// Requests refused with 429 appear on a stats page, in the DrainReport and in a log line.
func TestRefusalsAreVisible(t *testing.T) {
	var logs syncBuffer
	cfg := Config{RequestConcurrency: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	s, addr := startServer(t, cfg, func(s *Server) {
		s.Handle("GET /hold", func(c *Ctx) {
			_ = c.Sleep(time.Hour) // holds the only slot until the client leaves
		})
		s.Handle("GET /x", func(c *Ctx) { c.String(200, "x") })
		s.HandleStats("/debug/baton")
	})
	hold := dial(t, addr)
	hold.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	c := dial(t, addr)
	require.Eventually(t, func() bool {
		resp, _ := c.get("/x")
		return resp.StatusCode == 429
	}, 10*time.Second, 5*time.Millisecond)
	resp, body := c.get("/debug/baton/admission")
	require.Equal(t, 200, resp.StatusCode)
	var page struct {
		Refused uint64 `json:"refused_total"`
		Active  int    `json:"active"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &page), body)
	assert.GreaterOrEqual(t, page.Refused, uint64(1))
	assert.Equal(t, 1, page.Active)
	assert.Contains(t, logs.String(), "429")
	_ = hold.c.Close()
	require.NoError(t, s.Shutdown(context.Background()))
	assert.GreaterOrEqual(t, s.DrainReport().Refused, uint64(1))
}
