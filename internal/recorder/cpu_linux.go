//go:build linux

package recorder

import (
	"time"

	"golang.org/x/sys/unix"
)

// ThreadCPUSupported reports whether ThreadCPU measures anything on this platform.
const ThreadCPUSupported = true

// ThreadCPU returns the CPU time consumed so far by the calling OS thread
// (CLOCK_THREAD_CPUTIME_ID), or 0 if the clock cannot be read. It is meaningful across
// two calls only if the goroutine stayed on one thread in between (runtime.LockOSThread,
// as a locked event loop is). It is a system call (Linux has no vDSO fast path for this
// clock): see BenchmarkThreadCPU for its cost. Any goroutine.
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
