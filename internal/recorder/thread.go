package recorder

import (
	"bytes"
	"errors"
	"sync/atomic"
	"time"
)

// LoopThread names the OS thread a loop runs on, so that a Watchdog on another goroutine
// can read that thread's CPU clock and state while the loop is stuck (WatchdogConfig's
// ThreadCPU and ThreadState). It is meaningful only for a loop goroutine locked to its
// thread (runtime.LockOSThread): otherwise the goroutine may have moved to another thread.
// The zero value names no thread. Safe for concurrent use.
type LoopThread struct {
	tid atomic.Int64
}

// Publish records the calling thread as the loop's. Call it once from the loop goroutine,
// after it is locked to its thread (for example in the loop's first callback). Loop
// goroutine only.
func (l *LoopThread) Publish() { l.tid.Store(int64(gettid())) }

// threadID returns the published thread id, or 0 before Publish (and on platforms without
// thread ids). Any goroutine.
func (l *LoopThread) threadID() int { return int(l.tid.Load()) }

// CPU returns the loop thread's CPU time so far, or ok=false before Publish or when the
// clock cannot be read. It fits WatchdogConfig.ThreadCPU. Any goroutine.
func (l *LoopThread) CPU() (time.Duration, bool) {
	tid := l.threadID()
	if tid == 0 {
		return 0, false
	}
	d, err := threadCPUOf(tid)
	return d, err == nil
}

// State returns the loop thread's scheduling state (see threadStateOf), or ok=false before
// Publish or when it cannot be read. It fits WatchdogConfig.ThreadState. Any goroutine.
func (l *LoopThread) State() (byte, bool) {
	tid := l.threadID()
	if tid == 0 {
		return 0, false
	}
	s, err := threadStateOf(tid)
	return s, err == nil
}

// parseStatState returns the state field of a /proc/<pid>/stat line: the first field after
// the command name, which is in parentheses and may itself hold spaces and parentheses.
func parseStatState(b []byte) (byte, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) || b[i+1] != ' ' {
		return 0, errors.New("recorder: malformed stat line")
	}
	return b[i+2], nil
}
