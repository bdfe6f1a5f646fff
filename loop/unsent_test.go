package loop

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unsentReading is what the loop saw of one connection: gnet's own count of the output it
// holds, and what conn.unsent answered.
type unsentReading struct{ gnet, unsent int }

// readUnsent reads, on the loop, every writable connection's gnet backlog and unsent. It
// fails the test where backlog was clear while gnet held output: unsent would have
// answered 0 for output still waiting.
func readUnsent(t *testing.T, s *Server) []unsentReading {
	t.Helper()
	got := make(chan []unsentReading, 1)
	var clearButHeld atomic.Int64
	require.NoError(t, s.Loop(0).Post(func() {
		var rs []unsentReading
		for _, cs := range s.conns.all {
			if !cs.writable() {
				continue
			}
			g := cs.gc.OutboundBuffered()
			if !cs.backlog && g > 0 {
				clearButHeld.Add(1)
			}
			rs = append(rs, unsentReading{g, cs.unsent()})
		}
		got <- rs
	}))
	select {
	case rs := <-got:
		require.Zero(t, clearButHeld.Load(), "backlog clear while gnet held output")
		return rs
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not answer")
		return nil
	}
}

// TestUnsentFollowsGnetsBacklog: a connection's unsent output (conn.unsent, which asks
// gnet only while backlog is set) is gnet's own count at every reading, over a real socket
// whose client stops reading (gnet's buffer fills) and then reads everything (gnet drains
// it on its own, between the loop's callbacks).
func TestUnsentFollowsGnetsBacklog(t *testing.T) {
	const total = 16 << 20
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	var written atomic.Int64
	done := make(chan struct{})
	s.Handle("GET /big", bigStream(total, &written, func(*Ctx) { close(done) }))
	errc := serveInBackground(t, s)
	defer func() {
		require.NoError(t, s.Close())
		<-errc
	}()

	nc, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Write([]byte("GET /big HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)

	// The client reads nothing: gnet's buffer fills past the streaming high-water mark.
	held := false
	deadline := time.Now().Add(20 * time.Second)
	for !held && time.Now().Before(deadline) {
		for _, r := range readUnsent(t, s) {
			assert.Equal(t, r.gnet, r.unsent)
			held = held || r.unsent > streamHighWater
		}
		time.Sleep(2 * time.Millisecond)
	}
	require.True(t, held, "gnet's buffer never filled")

	// The client reads everything: gnet drains its buffer with no write of the loop's
	// after the last; unsent must see it go to 0.
	readErr := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, nc, total)
		readErr <- err
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not finish")
	}
	require.NoError(t, <-readErr)
	require.Eventually(t, func() bool {
		for _, r := range readUnsent(t, s) {
			if r.gnet != r.unsent || r.unsent != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "unsent did not follow gnet's drained buffer to 0")
}
