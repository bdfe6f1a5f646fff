//go:build linux

package recorder

import (
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/accounting"
)

// lockedThread runs body on a goroutine locked to a thread of its own, which ends with the
// goroutine (it is not unlocked, so the runtime retires the thread and any change made to
// it). It returns the thread's id once body starts; stop asks body to return (through the
// flag it polls or the pipe it can block on) and waits for it.
type lockedThread struct {
	tid     int
	goid    uint64
	stopped atomic.Bool
	wake    [2]int // a pipe: writing to wake[1] wakes a body blocked on wake[0]
	wg      sync.WaitGroup
}

func startLocked(t *testing.T, setup func(tid int), body func(l *lockedThread)) *lockedThread {
	t.Helper()
	l := &lockedThread{}
	require.NoError(t, unix.Pipe2(l.wake[:], unix.O_CLOEXEC))
	tids := make(chan int)
	goids := make(chan uint64, 1)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		runtime.LockOSThread() // never unlocked: the thread goes when the goroutine does
		tid := unix.Gettid()
		goids <- currentGoroutineID()
		if setup != nil {
			setup(tid)
		}
		tids <- tid
		body(l)
	}()
	l.tid, l.goid = <-tids, <-goids
	t.Cleanup(l.stop)
	return l
}

func (l *lockedThread) stop() {
	if l.stopped.Swap(true) {
		return
	}
	_, _ = unix.Write(l.wake[1], []byte{1})
	l.wg.Wait()
	unix.Close(l.wake[0])
	unix.Close(l.wake[1])
}

// busy computes until stopped.
func busy(l *lockedThread) {
	x := 1
	for !l.stopped.Load() {
		for i := range 1000 {
			x = x*31 + i
		}
	}
	runtime.KeepAlive(x)
}

// blockedInPoll sleeps in the kernel (poll(2) on the wake pipe) until stopped.
func blockedInPoll(l *lockedThread) {
	fds := []unix.PollFd{{Fd: int32(l.wake[0]), Events: unix.POLLIN}}
	for !l.stopped.Load() {
		_, _ = unix.Poll(fds, -1)
	}
}

func TestThreadCPUOfAndStateOf(t *testing.T) {
	b := startLocked(t, nil, busy)
	c0, err := threadCPUOf(b.tid)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := threadCPUOf(b.tid)
		return err == nil && c-c0 >= 20*time.Millisecond
	}, 30*time.Second, time.Millisecond, "a busy thread's CPU clock advances")
	// Busy: running or runnable ('R'), but for the moments the runtime preempts its
	// goroutine and the locked thread sleeps until the goroutine is back.
	require.Eventually(t, func() bool { st, err := threadStateOf(b.tid); return err == nil && st == 'R' },
		30*time.Second, time.Millisecond)

	s := startLocked(t, nil, blockedInPoll)
	require.Eventually(t, func() bool { st, err := threadStateOf(s.tid); return err == nil && st == 'S' },
		30*time.Second, time.Millisecond, "a thread blocked in poll(2) sleeps")
	s0, err := threadCPUOf(s.tid)
	require.NoError(t, err)
	// While the busy thread computes 20 ms more, the sleeping one computes nothing.
	b0, _ := threadCPUOf(b.tid)
	require.Eventually(t, func() bool { c, _ := threadCPUOf(b.tid); return c-b0 >= 20*time.Millisecond },
		30*time.Second, time.Millisecond)
	s1, err := threadCPUOf(s.tid)
	require.NoError(t, err)
	assert.Less(t, s1-s0, time.Millisecond, "a sleeping thread's CPU clock stands still")

	// The calling thread's clock, read by id, is CLOCK_THREAD_CPUTIME_ID.
	runtime.LockOSThread()
	own, err := threadCPUOf(gettid())
	after := ThreadCPU()
	runtime.UnlockOSThread()
	require.NoError(t, err)
	assert.LessOrEqual(t, own, after)
	assert.Greater(t, own, time.Duration(0))

	// A thread of another process is not readable (the kernel answers only for threads of
	// this one). Whether a retired thread's id stops answering depends on when the runtime
	// and the kernel let it go, so the test asks about a process of its own instead.
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_, err1 := threadCPUOf(cmd.Process.Pid)
	assert.Error(t, err1, "another process's thread")
	st, err2 := threadStateOf(cmd.Process.Pid)
	assert.Error(t, err2, "another process's thread (state %q)", st)
	_, err = threadCPUOf(0)
	assert.Error(t, err)
	_, err = threadCPUOf(1) // init: not a thread of this process
	assert.Error(t, err)
}

func TestLoopThread(t *testing.T) {
	var lt LoopThread
	_, ok := lt.CPU()
	assert.False(t, ok, "before Publish")
	_, ok = lt.State()
	assert.False(t, ok)
	b := startLocked(t, func(int) { lt.Publish() }, busy)
	assert.Equal(t, b.tid, lt.threadID())
	cpu, ok := lt.CPU()
	assert.True(t, ok)
	assert.Greater(t, cpu, time.Duration(0))
	require.Eventually(t, func() bool { st, ok := lt.State(); return ok && st == 'R' }, 30*time.Second, time.Millisecond)
}

// realStall runs one stall of a task on thread th against a real watchdog reading th's
// clock and state (and the goroutine's status in the dump, as with a real loop). It ends
// the stall once it is logged, has lasted two thresholds and the watchdog has polled it
// again after logging it (so that the line at its end has a window even when the first
// line had none), and returns the stall's log line, the line logged at its end and the
// stall figures.
func realStall(t *testing.T, th *lockedThread) (warn, end string, st accounting.StallStats) {
	t.Helper()
	var lt LoopThread
	lt.tid.Store(int64(th.tid))
	var sl realSlice
	var logs syncBuffer
	const threshold = 60 * time.Millisecond
	w := StartWatchdog(WatchdogConfig{
		Threshold: threshold, Interval: 5 * time.Millisecond, Logger: testLogger(&logs),
		Probe: sl.probe, ThreadCPU: lt.CPU, ThreadState: lt.State,
		Describe: func(uint64) (string, uint64) { return "GET /t", th.goid },
	})
	defer w.Stop()
	sl.begin(1)
	var atLog time.Duration
	require.Eventually(t, func() bool {
		if atLog == 0 {
			if len(warnLines(logs.String())) == 0 {
				return false
			}
			atLog = w.Stats().CurrentElapsed
		}
		e := w.Stats().CurrentElapsed
		return e > atLog && e >= 2*threshold
	}, 30*time.Second, time.Millisecond)
	sl.end()
	require.Eventually(t, func() bool { return len(endLines(logs.String())) == 1 }, 30*time.Second, time.Millisecond)
	w.Stop()
	return warnLines(logs.String())[0], endLines(logs.String())[0], w.Stats()
}

// TestWatchdogCauseTask: a thread that computes through the stall is the task's doing.
// The thread asks for a larger share of the CPU (nice -10, where permitted) so that the
// other processes of a loaded machine do not starve it; a try where they still did (the
// thread got under an eighth of the time, runnable: cause=starved, rightly) is
// inconclusive, and the test is skipped after five such tries. Any other cause fails.
func TestWatchdogCauseTask(t *testing.T) {
	th := startLocked(t, func(tid int) { _ = unix.Setpriority(unix.PRIO_PROCESS, tid, -10) }, busy)
	var lines []string
	for range 5 {
		warn, end, st := realStall(t, th)
		if strings.Contains(end, "cause=task") {
			assert.Zero(t, st.Starved)
			return
		}
		require.Contains(t, end, "cause=starved", "a busy thread is the task's doing, or starved:\n%s\n%s", warn, end)
		lines = append(lines, warn, end)
	}
	t.Skipf("the machine starved a busy thread in every try:\n%s", strings.Join(lines, "\n"))
}

// TestWatchdogCauseBlocked: a thread asleep in a system call is the task blocking the loop.
func TestWatchdogCauseBlocked(t *testing.T) {
	th := startLocked(t, nil, blockedInPoll)
	warn, end, st := realStall(t, th)
	if !strings.Contains(warn, "cause=unknown") { // the watchdog was late: no window yet
		assert.Contains(t, warn, "cause=blocked", warn)
		assert.Contains(t, warn, "thread_state=S", warn)
	}
	assert.Contains(t, end, "cause=blocked", end)
	assert.Zero(t, st.Starved)
}

// TestWatchdogCauseStarved: a computing thread that the machine hardly runs (SCHED_IDLE,
// pinned to the CPU of a thread that computes at normal priority) is starved. With both
// Go processors (GOMAXPROCS=2 here) held by computing goroutines, the runtime also
// preempts the task's goroutine to run others, which leaves it runnable with its thread
// asleep: starved too, told by the goroutine's status in the dump; the test adds Go
// processors so that the watchdog is not starved as well. A watchdog that is late anyway
// sees the slice first when it is already a stall: its first line may then not know the
// cause, but the line at the end, measured over the rest of the stall, does.
func TestWatchdogCauseStarved(t *testing.T) {
	// Two computing goroutines hold two Go processors: give the watchdog and the test
	// two more, so that only the victim's thread is starved, by the OS.
	procs := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(procs + 2)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	cpu := -1
	for i := range 1024 {
		if set.IsSet(i) {
			cpu = i
			break
		}
	}
	require.GreaterOrEqual(t, cpu, 0)
	var one unix.CPUSet
	one.Set(cpu)
	pin := func(tid int) { require.NoError(t, unix.SchedSetaffinity(tid, &one)) }
	startLocked(t, pin, busy) // the hog
	th := startLocked(t, func(tid int) {
		pin(tid)
		const schedIdle = 5 // SCHED_IDLE: runs only when nothing else wants the CPU
		var param struct{ priority int32 }
		_, _, errno := unix.Syscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(tid), schedIdle, uintptr(unsafe.Pointer(&param)))
		require.Zero(t, errno)
	}, busy)
	warn, end, st := realStall(t, th)
	assert.Regexp(t, "cause=(starved|unknown)", warn)
	assert.Contains(t, end, "cause=starved", end)
	assert.Equal(t, uint64(1), st.Starved, "%+v", st)
}

func TestParseStatState(t *testing.T) {
	for in, want := range map[string]byte{
		"123 (baton) R 1 2 3": 'R',
		"123 (a) b) c) S 1":   'S',
		"123 (x (y)) D 0":     'D',
		"123 () t 0":          't',
	} {
		got, err := parseStatState([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "123 (x)", "123 (x) ", "123 (x)R", "no paren"} {
		_, err := parseStatState([]byte(in))
		assert.Error(t, err, in)
	}
}
