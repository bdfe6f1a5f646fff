package recorder

import (
	"fmt"
	"sync"
	"time"
)

// LogLimiter rate-limits log lines about events that can come in floods (stalls, handler
// panics): every event is counted, a sample is logged, and each logged line can say how
// many events were left out since the line before. It is a token bucket: up to burst lines
// at once, then one line per every. Safe for concurrent use (a mutex held for a few
// instructions); the Watchdog uses one from its goroutine, and a loop can share one between
// its own goroutine and handlers running elsewhere.
//
// It is a generic cell rate algorithm: the state is the time at which the bucket is full
// again, so Allow needs no division and no timer.
type LogLimiter struct {
	every time.Duration
	slack time.Duration // (burst-1) * every: how far ahead of now full may be

	mu         sync.Mutex
	full       time.Time // when the bucket holds burst tokens again; zero: full now
	since      uint64    // events suppressed since the last allowed one
	allowed    uint64    // events allowed, in total
	suppressed uint64    // events suppressed, in total
}

// NewLogLimiter returns a limiter that lets burst events through at once and then one per
// every. It panics if burst < 1 or every <= 0 (a programming error). Any goroutine.
func NewLogLimiter(burst int, every time.Duration) *LogLimiter {
	if burst < 1 {
		panic(fmt.Sprintf("recorder: NewLogLimiter burst (%d) must be at least 1", burst))
	}
	if every <= 0 {
		panic(fmt.Sprintf("recorder: NewLogLimiter every (%v) must be positive", every))
	}
	return &LogLimiter{every: every, slack: time.Duration(burst-1) * every}
}

// Allow counts one event at now and says whether to log it. When ok, suppressed is the
// number of events not logged since the last one that was (to be put in the line, e.g.
// "suppressed=N"); when not ok, suppressed is 0. now need not be monotonic across callers:
// an event dated before the previous one is judged against the same state. Any goroutine.
func (l *LogLimiter) Allow(now time.Time) (ok bool, suppressed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.full.IsZero() && now.Before(l.full.Add(-l.slack)) {
		l.since++
		l.suppressed++
		return false, 0
	}
	base := l.full
	if base.IsZero() || base.Before(now) {
		base = now
	}
	l.full = base.Add(l.every)
	suppressed, l.since = l.since, 0
	l.allowed++
	return true, suppressed
}

// counts returns the events allowed and suppressed since the limiter was made. Any
// goroutine.
func (l *LogLimiter) counts() (allowed, suppressed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allowed, l.suppressed
}
