package loop

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Issue 27 item 9: many streams starting together share the loop. Each stream writes at
// most streamSliceBudget (plus the write that crossed it) before it gives the loop back,
// so a plain GET arriving meanwhile is answered while most streams are still filling
// their sockets, instead of after every one of them has filled its socket's send buffer
// (autotuned up to 4 MiB); and a stream's socket takes at most its bounded send buffer,
// so the bytes queued per slow reader stay near the documented bound (streamHighWater in
// baton plus twice Config.StreamSendBuffer in the kernel).
//
// The streams are started together deterministically: their handlers wait on one Future,
// which the test sets on the loop; the plain GET is sent right after. No client reads a stream.
func TestStreamsStartingTogetherShareTheLoop(t *testing.T) {
	const streams = 150
	const chunk = 16 << 10
	var ev atomic.Pointer[Future[struct{}]]
	var waiting, maxSlice atomic.Int64
	type probe struct{ started, held int }
	atGet := make(chan probe, 1)
	s, addr := startServer(t, Config{}, func(s *Server) {
		ev.Store(NewFuture[struct{}](s.Loop(0)))
		s.Handle("GET /stream", func(c *Ctx) {
			waiting.Add(1)
			if _, err := ev.Load().Await(c, 0); err != nil {
				return
			}
			w := c.Stream(200, "application/octet-stream")
			buf := []byte(strings.Repeat("s", chunk))
			round, inSlice := c.Stats().Rounds, 0
			for sent := 0; sent < 64<<20; sent += chunk {
				if _, err := w.Write(buf); err != nil {
					return
				}
				inSlice += chunk
				if int64(inSlice) > maxSlice.Load() {
					maxSlice.Store(int64(inSlice))
				}
				if r := c.Stats().Rounds; r != round { // the write gave the loop up
					round, inSlice = r, 0
				}
			}
		})
		s.Handle("GET /plain", func(c *Ctx) {
			// On the loop: count the streams started and those already held back by their
			// client (unsent output past the high-water mark, where Write parks).
			var p probe
			for _, cs := range c.srv.conns.all {
				if cs.ctx != nil && cs.ctx.streaming && cs.writable() {
					p.started++
					if cs.gc.OutboundBuffered()+len(cs.out) > streamHighWater {
						p.held++
					}
				}
			}
			atGet <- p
			c.String(200, "plain")
		})
	})
	conns := make([]net.Conn, streams)
	for i := range conns {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		t.Cleanup(func() { _ = nc.Close() })
		_, err = nc.Write([]byte("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		conns[i] = nc
	}
	require.Eventually(t, func() bool { return waiting.Load() == streams }, 20*time.Second, time.Millisecond)
	plain := dial(t, addr)
	// Set on the loop and waited for, so the GET cannot be read before it; the streams'
	// first slices run in the same loop turn, right after it.
	inLoop(t, s, func() { ev.Load().Resolve(struct{}{}, nil) })
	sent := time.Now()
	resp, body := plain.get("/plain")
	took := time.Since(sent)
	mustStatus(t, resp, 200)
	require.Equal(t, "plain", body)
	p := <-atGet
	t.Logf("the GET took %v; when it ran: %d streams started, %d held back by their clients; largest slice %d bytes",
		took, p.started, p.held, maxSlice.Load())
	require.Equal(t, streams, p.started, "the GET ran before the streams were released")
	require.Less(t, p.held, streams, "the GET waited until every stream had filled its socket")

	// Every stream ends held back by its client; then the bytes queued for each are bounded.
	require.Eventually(t, func() bool {
		held := 0
		inLoop(t, s, func() {
			for _, cs := range s.conns.all {
				if cs.writable() && cs.gc.OutboundBuffered()+len(cs.out) > streamHighWater {
					held++
				}
			}
		})
		return held == streams
	}, 30*time.Second, 5*time.Millisecond, "not every stream was held back")
	require.LessOrEqual(t, maxSlice.Load(), int64(streamSliceBudget+chunk), "a stream held the loop past its slice budget")
	var mostOut, mostKernel, mostSndbuf int
	inLoop(t, s, func() {
		for _, cs := range s.conns.all {
			if cs.ctx == nil || !cs.ctx.streaming || !cs.writable() {
				continue
			}
			fd := cs.gc.Fd()
			q, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
			require.NoError(t, err)
			sb, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
			require.NoError(t, err)
			mostOut = max(mostOut, cs.gc.OutboundBuffered()+len(cs.out))
			mostKernel, mostSndbuf = max(mostKernel, q), max(mostSndbuf, sb)
		}
	})
	t.Logf("per stream at most: %d bytes unsent in baton, %d in the kernel's send queue, send buffer %d",
		mostOut, mostKernel, mostSndbuf)
	require.LessOrEqual(t, mostOut, streamHighWater+streamSliceBudget+chunk)
	require.LessOrEqual(t, mostSndbuf, 2*defaultStreamSendBuffer, "the stream's socket kept the kernel's autotuned send buffer")
	// TCP takes a write while its queue is under the buffer, so the queue may pass it by
	// one write's segment (up to 64 KiB).
	require.LessOrEqual(t, mostKernel, 2*defaultStreamSendBuffer+64<<10)
}

// Item 9 in multi-thread mode and with the bound turned off: a streaming connection's
// socket gets Config.StreamSendBuffer as its send buffer (the kernel reports it doubled),
// and a negative value leaves the kernel's autotuning alone.
func TestStreamSendBufferBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		bound  bool
		sndbuf int
	}{
		{"multi-thread", Config{MultiThread: true}, true, defaultStreamSendBuffer},
		{"custom", Config{StreamSendBuffer: 64 << 10}, true, 64 << 10},
		{"off", Config{StreamSendBuffer: -1}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var written atomic.Int64
			s, addr := startServer(t, tc.cfg, func(s *Server) {
				s.Handle("GET /big", bigStream(16<<20, &written, func(*Ctx) {}))
			})
			c := dial(t, addr)
			c.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
			waitHeldBack(t, s)
			var sb int
			inLoop(t, s, func() {
				for _, cs := range s.conns.all {
					if cs.writable() {
						v, err := unix.GetsockoptInt(cs.gc.Fd(), unix.SOL_SOCKET, unix.SO_SNDBUF)
						require.NoError(t, err)
						sb = max(sb, v)
					}
				}
			})
			t.Logf("send buffer %d", sb)
			if tc.bound {
				require.Equal(t, 2*tc.sndbuf, sb)
			} else {
				require.Greater(t, sb, 2*defaultStreamSendBuffer, "the kernel's autotuning was not left alone")
			}
			resp, body := c.read("GET")
			mustStatus(t, resp, 200)
			require.Len(t, body, 16<<20)
		})
	}
}
