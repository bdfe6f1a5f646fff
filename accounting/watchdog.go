package accounting

import (
	"bytes"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// WatchdogConfig configures a Watchdog.
type WatchdogConfig struct {
	// Threshold is how long a slice may run before it is a stall (default
	// DefaultStallThreshold).
	Threshold time.Duration

	// Interval is the poll period (default Threshold/DefaultStallPollDivisor). A stall is
	// noticed at most Interval late, and its recorded duration is at most Interval short.
	Interval time.Duration

	// LogEvery rate-limits log lines: a stall that starts less than LogEvery after the last
	// logged one is counted but not logged (default DefaultStallLogEvery).
	LogEvery time.Duration

	// Logger receives one Warn record per logged stall (default slog.Default()).
	Logger *slog.Logger

	// Probe reports the slice holding the loop right now: its task id and how long it has
	// run, or ok=false when no slice runs (the scheduler's Running). Required; called from
	// the watchdog's goroutine, so it must be safe for concurrent use.
	Probe func() (taskID uint64, elapsed time.Duration, ok bool)

	// Describe returns the route (or label) and goroutine id of a task, for the log line
	// and its stack (Current.Describe fits). Optional; called from the watchdog's goroutine
	// while the loop is stalled, so it must be safe for concurrent use and must not need
	// the loop. route "" and goid 0 when unknown.
	Describe func(taskID uint64) (route string, goid uint64)
}

// Watchdog notices slices that hold the loop past a threshold, from its own goroutine: it
// polls Probe every Interval, logs each stall once (task id, route, time so far and the
// task's goroutine stack, rate-limited), and when the stall ends (the probe shows another
// slice, or none) records the stall's final observed duration. Safe for concurrent use.
//
// Capturing the stack dumps every goroutine (runtime.Stack with all=true), which stops the
// world for a moment; it happens only for a stall that is logged.
type Watchdog struct {
	cfg  WatchdogConfig
	now  func() time.Time // time.Now; a test's fake clock
	stop chan struct{}
	done chan struct{}
	once sync.Once

	// The watchdog goroutine's own state.
	active    bool
	id        uint64    // task of the stall in progress
	startedAt time.Time // its slice's start, as seen by the watchdog
	lastPoll  time.Time // last poll that saw it
	lastElap  time.Duration
	lastLog   time.Time

	mu sync.Mutex // guards st
	st StallStats
	h  store
}

// StartWatchdog starts a watchdog goroutine; stop it with Stop. It panics if cfg.Probe is
// nil. Any goroutine.
func StartWatchdog(cfg WatchdogConfig) *Watchdog {
	w := newWatchdog(cfg)
	go w.run()
	return w
}

func newWatchdog(cfg WatchdogConfig) *Watchdog {
	if cfg.Probe == nil {
		panic("accounting: WatchdogConfig.Probe is required")
	}
	if cfg.Threshold <= 0 {
		cfg.Threshold = DefaultStallThreshold
	}
	if cfg.Interval <= 0 {
		cfg.Interval = max(cfg.Threshold/DefaultStallPollDivisor, minStallPoll)
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = DefaultStallLogEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watchdog{
		cfg:  cfg,
		now:  time.Now,
		stop: make(chan struct{}),
		done: make(chan struct{}),
		h:    newStore(Config{}.withDefaults(time.Time{}).layout()),
	}
	w.st.Threshold = cfg.Threshold
	return w
}

// Stop stops the watchdog and waits for its goroutine to exit. A stall in progress is not
// counted. Safe to call more than once. Any goroutine.
func (w *Watchdog) Stop() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Watchdog) run() {
	defer close(w.done)
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.poll()
		}
	}
}

// poll runs one probe. Called only from the watchdog goroutine (or a test standing in
// for it).
func (w *Watchdog) poll() {
	id, elapsed, ok := w.cfg.Probe()
	now := w.now() // after the probe: start below is at or after the true start
	start := now.Add(-elapsed)
	if w.active {
		// Same slice iff same task and it already ran at the previous poll (a later slice
		// of the same task starts after that poll).
		if ok && id == w.id && !start.After(w.lastPoll) {
			w.lastPoll, w.lastElap = now, elapsed
			w.mu.Lock()
			w.st.CurrentElapsed = elapsed
			w.mu.Unlock()
			return
		}
		w.end()
	}
	if !ok || elapsed < w.cfg.Threshold {
		return
	}
	w.active, w.id, w.startedAt, w.lastPoll, w.lastElap = true, id, start, now, elapsed
	logIt := w.lastLog.IsZero() || now.Sub(w.lastLog) >= w.cfg.LogEvery
	if logIt {
		w.lastLog = now
	}
	w.mu.Lock()
	w.st.InProgress, w.st.CurrentTask, w.st.CurrentElapsed = true, id, elapsed
	if logIt {
		w.st.Logged++
	} else {
		w.st.Suppressed++
	}
	w.mu.Unlock()
	if logIt {
		w.log(id, elapsed)
	}
}

// end records the stall in progress with its last observed duration.
func (w *Watchdog) end() {
	w.active = false
	w.mu.Lock()
	w.st.Count++
	w.h.record(int64(w.lastElap), int64(DefaultHistogramMax))
	w.st.InProgress, w.st.CurrentTask, w.st.CurrentElapsed = false, 0, 0
	w.mu.Unlock()
}

func (w *Watchdog) log(id uint64, elapsed time.Duration) {
	var route string
	var goid uint64
	if w.cfg.Describe != nil {
		route, goid = w.cfg.Describe(id)
	}
	var stack string
	if goid != 0 {
		stack = StackOf(goid)
	}
	// The description is this task's only if the task still runs now: a stall that ended
	// in between would leave the next slice's route and stack.
	if now, _, ok := w.cfg.Probe(); !ok || now != id {
		route, goid, stack = "", 0, ""
	}
	w.cfg.Logger.Warn("baton: a task is holding the loop",
		slog.Uint64("task", id),
		slog.String("route", route),
		slog.Duration("elapsed", elapsed),
		slog.Duration("threshold", w.cfg.Threshold),
		slog.Uint64("goroutine", goid),
		slog.String("stack", stack))
}

// Stats returns the stall figures so far. It takes a mutex the watchdog holds only
// briefly. Any goroutine.
func (w *Watchdog) Stats() StallStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	st.Durations = w.h.summary()
	return st
}

// StallStats are a Watchdog's figures. Plain data.
type StallStats struct {
	Threshold  time.Duration // the watchdog's threshold
	Count      uint64        // stalls that ended
	Logged     uint64        // stalls logged
	Suppressed uint64        // stalls not logged because of the rate limit
	Durations  Summary       // final observed duration of each ended stall

	InProgress     bool          // a stall is going on now
	CurrentTask    uint64        // its task id
	CurrentElapsed time.Duration // its slice's time so far, at the last poll
}

// StackOf returns the stack of goroutine goid, cut out of a dump of all goroutines
// ("goroutine <goid> [..." up to the blank line after it), or "" when there is no such
// goroutine. The dump stops the world for a moment and allocates: use it for stats pages
// and stall reports, not per request. Any goroutine.
func StackOf(goid uint64) string {
	if goid == 0 {
		return ""
	}
	return findStack(dumpAll(), goid)
}

// StacksOf is StackOf for many goroutines from one dump: it returns the stack of each goid
// found (0 and missing ones are left out). Any goroutine.
func StacksOf(goids []uint64) map[uint64]string {
	out := make(map[uint64]string, len(goids))
	dump := dumpAll()
	for _, g := range goids {
		if g == 0 {
			continue
		}
		if st := findStack(dump, g); st != "" {
			out[g] = st
		}
	}
	return out
}

// dumpAll returns the stacks of all goroutines (at most stackBufMax bytes).
func dumpAll() []byte {
	buf := make([]byte, stackBufStart)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= stackBufMax {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Stack dump buffer sizes: 64 KiB holds a few hundred goroutines; the buffer doubles until
// the dump fits, up to 64 MiB (a dump cut there still holds most goroutines).
const (
	stackBufStart = 64 << 10
	stackBufMax   = 64 << 20
)

// findStack cuts goroutine goid's block out of a runtime.Stack(all) dump.
func findStack(dump []byte, goid uint64) string {
	needle := strconv.AppendUint([]byte("goroutine "), goid, 10)
	needle = append(needle, " ["...)
	for off := 0; off < len(dump); {
		i := bytes.Index(dump[off:], needle)
		if i < 0 {
			return ""
		}
		i += off
		if i == 0 || dump[i-1] == '\n' {
			end := bytes.Index(dump[i:], []byte("\n\n"))
			if end < 0 {
				end = len(dump) - i
			}
			return string(bytes.TrimRight(dump[i:i+end], "\n"))
		}
		off = i + len(needle)
	}
	return ""
}

// Current is the slot the loop publishes the running task's goroutine and route into
// whenever either changes (baton's loop: when a slice starts on another goroutine than the
// one before, and when a task starts on a pooled coroutine that served another route), so
// that a Watchdog (through Describe) can name a stalled task's route and find its stack
// while the loop is stuck in it. Set neither allocates nor blocks, and
// costs two plain loads when the slice runs on the same coroutine for the same route as the
// one before (pooled coroutines make that the common case). Safe for concurrent use.
//
// It is a sequence lock: Set makes the sequence odd, stores the fields and makes it even
// again; Describe retries while a Set is in progress. Concurrent Sets serialise on a CAS,
// which never waits with the single loop writer. The task id is not part of the slot: the
// watchdog learns it from its probe and describes only a slice that is still running after
// Describe (the loop cannot have moved on while it is stuck).
type Current struct {
	seq   atomic.Uint64
	goid  atomic.Uint64
	route atomic.Pointer[string]
}

// Set publishes the slice starting now: its goroutine id and its route (a pointer that
// stays valid and unchanged, such as Route.KeyRef; nil for none). id is the task's id; it
// is accepted for symmetry with Describe and not stored. Any goroutine.
func (c *Current) Set(id, goid uint64, route *string) {
	_ = id
	if c.goid.Load() == goid && c.route.Load() == route && c.seq.Load()&1 == 0 {
		return // same coroutine, same route: nothing to publish
	}
	var s uint64
	for {
		s = c.seq.Load()
		if s&1 == 0 && c.seq.CompareAndSwap(s, s+1) {
			break
		}
		runtime.Gosched()
	}
	c.goid.Store(goid)
	c.route.Store(route)
	c.seq.Store(s + 2)
}

// Describe returns the route and goroutine id of the slice published last. It fits
// WatchdogConfig.Describe, whose caller checks with its probe that task id is still the
// one running. Any goroutine.
func (c *Current) Describe(id uint64) (route string, goid uint64) {
	_ = id
	for range describeTries {
		s := c.seq.Load()
		if s&1 != 0 {
			runtime.Gosched()
			continue
		}
		g, r := c.goid.Load(), c.route.Load()
		if c.seq.Load() != s {
			continue
		}
		if r != nil {
			route = *r
		}
		return route, g
	}
	return "", 0
}

// describeTries bounds Describe's retries: a Set takes nanoseconds, so more than a few
// retries means the writer was descheduled mid-Set; give up rather than spin.
const describeTries = 100
