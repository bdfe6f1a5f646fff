package loop

import (
	"runtime"
	"time"
)

// yieldEvery is how long the loop goroutine may go without passing through Go's scheduler
// while it is busy. It must stay well under the 10 ms after which sysmon forces a
// preemption (the runtime's forcePreemptNS), so that sysmon never sees one scheduling
// slice of the loop last that long.
//
// Why the loop yields at all: it spends most of a busy turn in gnet's system calls (read,
// write, epoll_wait), and gnet passes through the scheduler only when an epoll_wait finds
// nothing (its runtime.Gosched). A loop that always finds more work kept one slice for
// longer than 10 ms; sysmon then took its P away in the middle of a system call (with one
// P: a thread hand-off on every such call) or sent it a preemption signal, and after each
// take it polled every 20 µs again, each poll two context switches on the loop's CPU. A
// yield every few milliseconds costs one scheduler pass (no thread hand-off with one P)
// and leaves sysmon asleep: docs/bench.md, "The loop yields to the runtime".
const yieldEvery = 4 * time.Millisecond

// maybeYield runs the loop's yield (runtime.Gosched) if yieldEvery has passed since the
// last one, now being the current callback's clock reading. Loop only, outside tasks: at
// the end of a gnet callback (busyEnd), where the loop holds no state across the yield.
func (s *Server) maybeYield(now int64) {
	if now-s.yieldAt < int64(yieldEvery) {
		return
	}
	s.yieldAt = now
	if s.yield != nil {
		s.yield()
	}
}

// yieldFor is the loop's yield for cfg: runtime.Gosched, or nil with Config.LockOSThread,
// where a Gosched would hand the P to another thread and back (a locked goroutine cannot
// be resumed by the thread that finds it runnable), two thread switches per yield.
func yieldFor(cfg Config) func() {
	if cfg.LockOSThread {
		return nil
	}
	return runtime.Gosched
}
