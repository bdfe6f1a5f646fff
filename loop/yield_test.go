package loop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A task that yields in a loop until another request arrives must not keep the loop from
// polling I/O: the other request is accepted, parsed and run between its yields.
func TestYieldingTaskDoesNotStarveIO(t *testing.T) {
	var flag atomic.Bool
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /a", func(c *Ctx) {
			for !flag.Load() {
				_ = c.Sleep(0)
			}
			c.String(200, "a")
		})
		s.Handle("GET /b", func(c *Ctx) {
			flag.Store(true)
			_ = c.Sleep(50 * time.Millisecond)
			c.String(200, "b")
		})
	})
	a := dial(t, addr)
	a.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(20 * time.Millisecond)
	b := dial(t, addr)
	b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := b.read("GET")
	if resp.StatusCode != 200 || body != "b" {
		t.Fatalf("b: %d %q", resp.StatusCode, body)
	}
	if _, body = a.read("GET"); body != "a" {
		t.Fatalf("a: %q", body)
	}
}

// TestSleepZeroYieldsEvenWhenCancelled: Sleep(0) is the yield. A cancelled task's Sleep(0)
// still lets the ready tasks run before it returns the cancellation, so a loop of CPU work
// that misses the error cannot hold the loop.
func TestSleepZeroYieldsEvenWhenCancelled(t *testing.T) {
	s, _ := startServer(t, Config{}, func(*Server) {})
	type result struct {
		otherRan bool
		err      error
	}
	got := make(chan result, 1)
	l := s.Loop(0)
	require.NoError(t, l.Post(func() {
		l.Go("cancelled", func(tk *Task) {
			tk.cancel(context.Canceled)
			ran := false
			l.Go("other", func(*Task) { ran = true }) // on the loop: ready at once
			err := tk.Sleep(0)
			got <- result{otherRan: ran, err: err}
		})
	}))
	select {
	case r := <-got:
		assert.True(t, r.otherRan, "the ready task ran before Sleep(0) returned")
		assert.ErrorIs(t, r.err, context.Canceled)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the task did not finish")
	}
}
