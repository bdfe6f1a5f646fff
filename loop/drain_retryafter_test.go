package loop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDrainRefusalSaysRetryAfter: while a request in flight holds the drain open, a request
// sent during the drain on a connection opened before it is refused with 503, Retry-After:
// 1 and Connection: close (the request did not run, so a client may send it again, a POST
// included), and the request in flight still completes. (A new connection is not taken
// during a drain at all: TestDrainListenerTakesNoNewConnection.)
func TestDrainRefusalSaysRetryAfter(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	release := NewFuture[struct{}](s.loopRef)
	var holding atomic.Bool
	s.Handle("GET /hold", func(c *Ctx) {
		holding.Store(true)
		if _, err := release.Await(c, 0); err != nil {
			return
		}
		c.String(200, "held")
	})
	var ran atomic.Int32
	s.Handle("POST /order", func(c *Ctx) { ran.Add(1); c.String(200, "ordered") })
	errc := serveInBackground(t, s)
	addr := s.Addr().String()

	inflight := dial(t, addr)
	inflight.send("GET /hold HTTP/1.1\r\nHost: test\r\n\r\n")
	require.Eventually(t, holding.Load, 10*time.Second, time.Millisecond)
	late := dial(t, addr) // silent until the drain began
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	require.Eventually(t, s.Draining().Done, 10*time.Second, time.Millisecond)

	late.send("POST /order HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\nhi")
	resp, _ := late.read("POST")
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.True(t, resp.Close, "the refusal closes the connection")
	assert.Zero(t, ran.Load(), "a refused request does not run")
	_ = late.c.Close()

	release.Resolve(struct{}{}, nil)
	resp, body := inflight.read("GET")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "held", body)
	assert.True(t, resp.Close, "a response written during the drain closes its connection")
	_ = inflight.c.Close() // the server lingers until the client closes: do not make it wait
	require.NoError(t, <-shut)
	require.ErrorIs(t, <-errc, ErrServerClosed)
	assert.Equal(t, 1, s.DrainReport().RejectedDuring)
}
