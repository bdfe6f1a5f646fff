//go:build linux

package recorder

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// gettid returns the id of the OS thread running the caller (gettid(2)). It names a
// thread for threadCPUOf and threadStateOf only while the caller stays on it: call it from
// a goroutine locked to its thread (runtime.LockOSThread). Any goroutine.
func gettid() int { return unix.Gettid() }

// threadClock returns the clock id of thread tid's CPU clock, as glibc's
// pthread_getcpuclockid builds it: the complemented tid shifted past the 3-bit clock field,
// which says per thread (4) and scheduler runtime (CPUCLOCK_SCHED, 2).
func threadClock(tid int) int32 { return int32(^uint32(tid)<<3 | 6) }

// threadCPUOf returns the CPU time that OS thread tid of this process has consumed so far
// (its CLOCK_THREAD_CPUTIME_ID, read from another thread through the thread's CPU clock
// id). The kernel answers only for threads of the calling process; an error means the
// thread is gone or the clock cannot be read. It is one system call. Any goroutine.
func threadCPUOf(tid int) (time.Duration, error) {
	if tid <= 0 {
		return 0, fmt.Errorf("recorder: threadCPUOf: no thread %d", tid)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(threadClock(tid), &ts); err != nil {
		return 0, fmt.Errorf("recorder: threadCPUOf(%d): %w", tid, err)
	}
	return time.Duration(ts.Nano()), nil
}

// threadStateOf returns the scheduling state of OS thread tid of this process, the third
// field of /proc/self/task/<tid>/stat: 'R' running or runnable (waiting for a CPU), 'S'
// sleeping in the kernel (a blocking system call, a futex), 'D' in uninterruptible sleep
// (disk), and so on (proc(5)). It opens and reads a file: call it for a stall, not per
// slice. Any goroutine.
func threadStateOf(tid int) (byte, error) {
	if tid <= 0 {
		return 0, fmt.Errorf("recorder: threadStateOf: no thread %d", tid)
	}
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("recorder: threadStateOf(%d): %w", tid, err)
	}
	return parseStatState(b)
}
