package loop

import (
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/internal/scheduler"
)

// A stream's share of the loop and of the kernel (issue 27, item 9). A streaming handler
// in loop mode writes on its task; Write parks only when the client is more than
// streamHighWater behind, and until then every flush hands bytes to the socket, which takes
// as many as its send buffer holds (autotuned up to net.ipv4.tcp_wmem's maximum, 4 MiB on
// a stock Linux). So a stream's first slice used to run until the kernel stopped taking
// bytes: many streams starting together held the loop for seconds, every slice under the
// stall threshold, and each slow reader pinned megabytes. Two bounds fix it:
//
//   - a slice budget: once a stream's task has written streamSliceBudget bytes in one
//     slice without parking, Write hands them to the socket and yields, so the loop polls
//     I/O and runs the other tasks before the stream goes on (loopMode.flush);
//   - a send buffer: a connection's socket gets Config.StreamSendBuffer as its SO_SNDBUF
//     when it first streams (both modes), so a slow reader holds a bounded amount in the
//     kernel and the stream parks on backpressure (the drain watch) early.

// streamSliceBudget is how many bytes a stream's task writes in one slice before it yields:
// small enough that a round of many streams' slices is short, large enough that the yield's
// extra loop turn is a small part of a fast reader's throughput (docs/concurrency.md).
const streamSliceBudget = 32 << 10

// spendSlice counts n bytes written by task t in its current slice and reports whether the
// slice has written its budget. Loop-confined.
func (cs *conn) spendSlice(t *scheduler.Task, n int) bool {
	if id, r := t.ID(), t.Rounds(); id != cs.sliceTask || r != cs.sliceRound {
		cs.sliceTask, cs.sliceRound, cs.sliceOut = id, r, 0
	}
	cs.sliceOut += n
	return cs.sliceOut >= streamSliceBudget
}

// yieldStream writes c's gathered output now and yields c's task, so the bytes leave
// before the loop runs the others. From c's task, loop mode.
func (s *Server) yieldStream(c *Ctx) {
	s.flush(c.conn)
	c.Task.ops.yield(&c.Task)
}

// boundSendBuffer sets cs's socket's send buffer to Config.StreamSendBuffer the first time
// cs streams (negative: never). A failure is logged at debug level and leaves the kernel's
// buffer as it was: the stream still works, only less bounded. Loop-confined.
func (s *Server) boundSendBuffer(cs *conn) {
	if cs.sndbufSet || s.cfg.StreamSendBuffer < 0 || !cs.writable() {
		return
	}
	cs.sndbufSet = true
	if err := unix.SetsockoptInt(cs.gc.Fd(), unix.SOL_SOCKET, unix.SO_SNDBUF, s.cfg.StreamSendBuffer); err != nil {
		s.log.Debug("loop: could not bound a stream's send buffer", "err", err, "bytes", s.cfg.StreamSendBuffer)
	}
}
