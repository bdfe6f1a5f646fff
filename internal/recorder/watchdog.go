package recorder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/accounting"
)

// WatchdogConfig configures a Watchdog. Zero fields take the defaults named below;
// validate reports fields that are invalid rather than correcting them.
type WatchdogConfig struct {
	// Threshold is how long a slice may run before it is a stall (default
	// defaultStallThreshold; at least MinStallThreshold).
	Threshold time.Duration

	// Interval is the poll period (default Threshold/defaultStallPollDivisor, and at least
	// a millisecond; at most Threshold). A stall is noticed at most Interval late; its
	// recorded length is exact when the loop reports the end (Watchdog.SliceEnded) and
	// otherwise at most Interval short.
	Interval time.Duration

	// LogEvery rate-limits log lines: a stall that starts less than LogEvery after the last
	// logged one is counted but not logged (default defaultStallLogEvery). The next logged
	// line says how many were not (suppressed=N).
	LogEvery time.Duration

	// Logger receives one Warn record per logged stall and one Info record when a logged
	// stall ends (default slog.Default()).
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

	// ThreadCPU returns the CPU time consumed so far by the loop's OS thread
	// (LoopThread.CPU fits), or ok=false when it is not known. Optional. The watchdog reads
	// it at each poll that sees a slice running, and a stall's log lines compare its
	// advance with the wall time since the watchdog first saw the slice (up to the stall's
	// detection for the line then, up to the last poll that saw it for the line at its
	// end), to tell a task that holds the loop (the thread computed: cause=task) from one
	// blocked in the kernel (cause=blocked) and from a thread the machine did not run
	// (cause=starved). It is meaningful only for a loop locked to its thread. Called from
	// the watchdog's goroutine.
	ThreadCPU func() (time.Duration, bool)

	// ThreadState returns the loop thread's scheduling state, as threadStateOf does
	// (LoopThread.State fits), or ok=false when unknown. Optional; read at the polls of a
	// stall whose thread hardly computed, to tell cause=starved ('R': runnable, waiting for a
	// CPU) from cause=blocked (sleeping in the kernel). Without it such a stall's cause is
	// off_cpu. Called from the watchdog's goroutine.
	ThreadState func() (state byte, ok bool)

	// ReportsEnds promises that the loop calls Watchdog.SliceEnded at the end of every slice
	// at least Threshold long. A poll that sees a stall over before its report then waits
	// one more poll for it (the loop reports just after the slice ends), so that even the
	// first stall is recorded with its exact length. Without it the watchdog waits only
	// once it has seen a report.
	ReportsEnds bool
}

// MinStallThreshold is the shortest WatchdogConfig.Threshold: the watchdog polls at most
// once a millisecond (each poll wakes a goroutine), so a shorter threshold could not be
// honoured.
const MinStallThreshold = minStallPoll

// validate reports the first invalid field, naming it; nil when cfg is usable (zero
// fields take their defaults). Any goroutine.
func (c WatchdogConfig) validate() error {
	if c.Probe == nil {
		return errors.New("recorder: WatchdogConfig.Probe is required")
	}
	if c.Threshold < 0 || (c.Threshold > 0 && c.Threshold < MinStallThreshold) {
		return fmt.Errorf("recorder: WatchdogConfig.Threshold (%v) must be 0 (default %v) or at least %v",
			c.Threshold, defaultStallThreshold, MinStallThreshold)
	}
	threshold := c.Threshold
	if threshold == 0 {
		threshold = defaultStallThreshold
	}
	if c.Interval < 0 || (c.Interval > 0 && c.Interval < minStallPoll) {
		return fmt.Errorf("recorder: WatchdogConfig.Interval (%v) must be 0 (default Threshold/%d) or at least %v",
			c.Interval, defaultStallPollDivisor, minStallPoll)
	}
	if c.Interval > threshold {
		return fmt.Errorf("recorder: WatchdogConfig.Interval (%v) must be at most WatchdogConfig.Threshold (%v)",
			c.Interval, threshold)
	}
	if c.LogEvery < 0 {
		return fmt.Errorf("recorder: WatchdogConfig.LogEvery (%v) must not be negative", c.LogEvery)
	}
	return nil
}

// Stall causes, the cause attribute of a stall's log line.
const (
	// causeTask: the loop thread computed for much of the stall: the task's code held
	// the loop (a long computation without Yield).
	causeTask = "task"
	// causeBlocked: the thread hardly computed and was asleep in the kernel: the task
	// made a blocking call (a system call, a lock, a sleep) on the loop.
	causeBlocked = "blocked"
	// causeStarved: the thread hardly computed although it was runnable (or the task's
	// goroutine was waiting for a Go processor): the machine did not run the loop (too few
	// cores, a noisy neighbour, a CPU quota). Not the handler's doing.
	causeStarved = "starved"
	// causeOffCPU: the thread hardly computed; without WatchdogConfig.ThreadState
	// starved and blocked cannot be told apart.
	causeOffCPU = "off_cpu"
	// causeUnknown: the thread's CPU time was not measured (no ThreadCPU, or the
	// watchdog saw the slice first when it was already a stall: its log line has no
	// window, though the line at the stall's end has one if the watchdog polled again
	// while it lasted).
	causeUnknown = "unknown"
)

// causeNeedsCPU is the cause_needs attribute of a stall whose cause is unknown because the
// loop thread's CPU time is not measured (no WatchdogConfig.ThreadCPU): what it would take
// to tell a task holding the loop from a thread the machine did not run.
const causeNeedsCPU = "the loop thread's CPU time, read only for a loop locked to its OS thread " +
	"(loop.Config.LockOSThread, BATON_LOCK_OS_THREAD=true, on Linux): with it the cause is task " +
	"(the task computed), starved (the machine did not run the thread) or blocked (a blocking call)"

// causeNeeds returns the cause_needs attribute for a stall of cause, "" when cause is known.
func (w *Watchdog) causeNeeds(cause string) string {
	switch {
	case cause == causeUnknown && w.cfg.ThreadCPU == nil:
		return causeNeedsCPU
	case cause == causeUnknown:
		return "a poll that saw the slice before it became a stall (the watchdog was late; the line at the stall's end has the cause if it polled again)"
	case cause == causeOffCPU:
		return "the loop thread's scheduling state (WatchdogConfig.ThreadState, Linux) to tell starved from blocked"
	}
	return ""
}

// Cause thresholds: the thread computed if its CPU time advanced by at least
// 1/computedDivisor of the wall time (a busy thread sharing a core with a few others still
// does); below that, a thread asleep in the kernel counts as blocked only if it computed
// less than 1/blockedDivisor of the time.
const (
	computedDivisor = 8
	blockedDivisor  = 2
)

// stallCause classifies a stall from the loop thread's CPU time used over window of wall
// time, the thread's state (when stateOK) and the task goroutine's status in a stack dump
// ("" when not dumped).
func stallCause(used, window time.Duration, measured bool, state byte, stateOK bool, gstatus string) string {
	switch {
	case !measured || window <= 0:
		return causeUnknown
	case used*blockedDivisor >= window:
		return causeTask
	case !stateOK:
		if used*computedDivisor >= window {
			return causeTask
		}
		return causeOffCPU
	case state == 'R':
		if used*computedDivisor >= window {
			return causeTask
		}
		return causeStarved
	case gstatus == "runnable":
		// The thread sleeps because its goroutine waits for a Go processor (a locked thread
		// sleeps while its goroutine is off it). A goroutine that was computing also shows
		// as runnable in a dump, which stops the world, so this tells only for a thread
		// found asleep.
		return causeStarved
	default:
		return causeBlocked
	}
}

// Watchdog notices slices that hold the loop past a threshold, from its own goroutine: it
// polls Probe every Interval, logs each stall once (task id, route, time so far, cause and
// the task's goroutine stack, rate-limited), and when the stall ends (the probe shows
// another slice, or none) records its length: the one the loop reports through
// SliceEnded, or else the last observed. A logged stall's end is logged too, with that
// length. Safe for concurrent use.
//
// Capturing the stack dumps every goroutine (runtime.Stack with all=true), which stops the
// world for a moment; it happens only for a stall that is logged.
type Watchdog struct {
	cfg  WatchdogConfig
	now  func() time.Time // time.Now; a test's fake clock
	stop chan struct{}
	done chan struct{}
	once sync.Once
	lim  *LogLimiter
	end  endSlot // the loop's reports of long slices' ends

	// The watchdog goroutine's own state.
	active    bool      // a stall is in progress
	ending    bool      // a stall ended at endSeen; its length is recorded at the next poll
	id        uint64    // task of the stall in progress (or ending)
	startedAt time.Time // its slice's start, as seen by the watchdog
	lastPoll  time.Time // last poll that saw it
	lastElap  time.Duration
	endSeen   time.Time // the poll that saw it over
	logged    bool      // it was logged
	route     string    // its route, as described when it was logged
	gstatus   string    // its goroutine's status in the dump, when it was logged
	obs       threadObs // the loop thread over it so far

	seenOK  bool // the thread CPU reading at the first poll that saw the current slice
	seenID  uint64
	seenAt  time.Time
	seenCPU time.Duration

	mu sync.Mutex // guards st and h
	st accounting.StallStats
	h  store
}

// StartWatchdog starts a watchdog goroutine; stop it with Stop. It panics if cfg.validate
// fails (a programming error). Any goroutine.
func StartWatchdog(cfg WatchdogConfig) *Watchdog {
	w := newWatchdog(cfg)
	go w.run()
	return w
}

func newWatchdog(cfg WatchdogConfig) *Watchdog {
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = defaultStallThreshold
	}
	if cfg.Interval == 0 {
		cfg.Interval = min(max(cfg.Threshold/defaultStallPollDivisor, minStallPoll), cfg.Threshold)
	}
	if cfg.LogEvery == 0 {
		cfg.LogEvery = defaultStallLogEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watchdog{
		cfg:  cfg,
		now:  time.Now,
		stop: make(chan struct{}),
		done: make(chan struct{}),
		lim:  NewLogLimiter(1, cfg.LogEvery),
		h:    newStore(Config{}.withDefaults(time.Time{}).layout()),
	}
	w.st.Threshold = cfg.Threshold
	return w
}

// Threshold returns the stall threshold in force (the default when none was given). Any
// goroutine.
func (w *Watchdog) Threshold() time.Duration { return w.cfg.Threshold }

// SliceEnded reports that a slice of task taskID that ran for length has just ended, so
// that a stall is recorded with its true length rather than with the watchdog's last
// observation. The loop calls it at the end of every slice at least Threshold long (a
// comparison per slice; the call is for stalls only); shorter ones are ignored. It neither
// blocks nor allocates. Any goroutine, one at a time (the loop).
func (w *Watchdog) SliceEnded(taskID uint64, length time.Duration) {
	if length < w.cfg.Threshold {
		return
	}
	w.end.store(taskID, length)
}

// Stop stops the watchdog and waits for its goroutine to exit. A stall in progress is not
// counted; one that ended is. Safe to call more than once. Any goroutine.
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
			if w.ending {
				w.finish(false)
			}
			return
		case <-t.C:
			w.poll()
		}
	}
}

// sameSlice reports whether a slice of task id that started at start is the one of task
// seenID already running at seen: a later slice of the same task starts after that poll.
func sameSlice(id uint64, start time.Time, seenID uint64, seen time.Time) bool {
	return id == seenID && !start.After(seen)
}

// poll runs one probe. Called only from the watchdog goroutine (or a test standing in
// for it).
func (w *Watchdog) poll() {
	id, elapsed, ok := w.cfg.Probe()
	now := w.now() // after the probe: start below is at or after the true start
	start := now.Add(-elapsed)
	var cpu time.Duration
	cpuOK := false
	if ok && w.cfg.ThreadCPU != nil {
		cpu, cpuOK = w.cfg.ThreadCPU()
	}
	if w.ending {
		w.finish(false)
	}
	if w.active {
		if ok && sameSlice(id, start, w.id, w.lastPoll) {
			w.lastPoll, w.lastElap = now, elapsed
			if cpuOK && w.seenOK && sameSlice(id, start, w.seenID, w.seenAt) {
				w.observe(cpu-w.seenCPU, now.Sub(w.seenAt))
			}
			w.mu.Lock()
			w.st.CurrentElapsed = elapsed
			w.mu.Unlock()
			return
		}
		w.active, w.endSeen = false, now
		w.mu.Lock()
		w.st.InProgress, w.st.CurrentTask, w.st.CurrentElapsed = false, 0, 0
		w.mu.Unlock()
		w.finish(true)
	}

	// The CPU window runs from the first poll that saw this slice.
	var used, window time.Duration
	measured := false
	if cpuOK && w.seenOK && sameSlice(id, start, w.seenID, w.seenAt) {
		used, window, measured = cpu-w.seenCPU, now.Sub(w.seenAt), true
	} else {
		w.seenOK, w.seenID, w.seenAt, w.seenCPU = cpuOK, id, now, cpu
	}
	if !ok || elapsed < w.cfg.Threshold {
		return
	}

	if w.ending {
		w.finish(false) // another stall starts before the last one's length came
	}
	w.active, w.id, w.startedAt, w.lastPoll, w.lastElap = true, id, start, now, elapsed
	w.route, w.gstatus, w.obs = "", "", threadObs{}
	logIt, suppressed := w.lim.Allow(now)
	w.logged = logIt
	w.mu.Lock()
	w.st.InProgress, w.st.CurrentTask, w.st.CurrentElapsed = true, id, elapsed
	if logIt {
		w.st.Logged++
	} else {
		w.st.Suppressed++
	}
	w.mu.Unlock()
	if measured {
		w.observe(used, window)
	}
	if logIt {
		w.log(id, now, elapsed, suppressed)
	}
}

// observe updates the stall's view of the loop thread: used CPU time over window since the
// first poll that saw the slice, and the thread's state when it hardly computed.
func (w *Watchdog) observe(used, window time.Duration) {
	w.obs.used, w.obs.window, w.obs.measured = used, window, true
	w.obs.stateOK = false
	if used*blockedDivisor < window && w.cfg.ThreadState != nil {
		w.obs.state, w.obs.stateOK = w.cfg.ThreadState()
	}
}

// threadObs is what the watchdog saw of the loop thread over a stall: CPU time used over
// a window of wall time (when measured), and its state when it was read.
type threadObs struct {
	used, window time.Duration
	measured     bool
	state        byte
	stateOK      bool
}

func (o threadObs) cause(gstatus string) string {
	return stallCause(o.used, o.window, o.measured, o.state, o.stateOK, gstatus)
}

// stallEndSlack is the disagreement allowed between the loop's report of a slice's length
// and the watchdog's view of its start and end: the two read different clocks (the
// scheduler's, the watchdog's time.Now) at slightly different moments.
const stallEndSlack = time.Millisecond

// finish records the stall that ended (at endSeen) with its length: the loop's report when
// it matches, else the last observed elapsed time. When wait is set and the loop reports
// ends but this one's report has not come yet (the probe can see the slice over just
// before the loop's report), it leaves the stall pending for the next poll instead.
func (w *Watchdog) finish(wait bool) {
	length, exact := w.lastElap, false
	rid, rlen, reported, used := w.end.load()
	if reported && rid == w.id && rlen >= w.lastElap-stallEndSlack && rlen <= w.endSeen.Sub(w.startedAt)+stallEndSlack {
		length, exact = rlen, true
	} else if wait && (used || w.cfg.ReportsEnds) {
		w.ending = true
		return
	}
	w.ending = false
	cause := w.obs.cause(w.gstatus)
	w.mu.Lock()
	w.st.Count++
	if cause == causeStarved {
		w.st.Starved++
	}
	w.h.record(int64(length))
	w.mu.Unlock()
	if w.logged {
		attrs := []slog.Attr{
			slog.Uint64("task", w.id),
			slog.String("route", w.route),
			slog.Duration("length", length),
			slog.Bool("exact", exact), // false: the last observed length, at most Interval short
			slog.String("cause", cause),
			slog.Duration("thread_cpu", w.obs.used),
			slog.Duration("window", w.obs.window),
		}
		if needs := w.causeNeeds(cause); needs != "" {
			attrs = append(attrs, slog.String("cause_needs", needs))
		}
		w.cfg.Logger.LogAttrs(context.Background(), slog.LevelInfo, "baton: a stalled task gave the loop back", attrs...)
	}
}

// Stack placeholders for a log line whose stack could not be taken.
const (
	stackEndedBeforeDescribe = "(the slice ended before it could be described)"
	stackEndedBeforeDump     = "(the slice ended before the dump)"
	stackUnknown             = "(no goroutine id for the task)"
)

// log writes the Warn line of a stall first seen at poll time at: it describes the task
// while it still runs, dumps its goroutine's stack, and keeps what it learned before the
// slice ended if it ends in between (only the stack is lost then). It sets w.route and
// w.gstatus, the goroutine's status in the dump, which the cause can use.
func (w *Watchdog) log(id uint64, at time.Time, elapsed time.Duration, suppressed uint64) {
	var route string
	var goid uint64
	if w.cfg.Describe != nil {
		route, goid = w.cfg.Describe(id)
	}
	var stack, gstatus string
	// The description is this task's only if its slice still runs after Describe: the slot
	// holds the slice published last, and the loop cannot publish another while stuck.
	switch {
	case !w.stillRuns(id, at):
		route, goid, stack = "", 0, stackEndedBeforeDescribe
	case goid == 0:
		stack = stackUnknown
	default:
		stack = stackOf(goid)
		if w.stillRuns(id, at) {
			gstatus = goroutineStatus(stack)
		} else {
			stack = stackEndedBeforeDump // the goroutine may be running another task by now
		}
	}
	w.route, w.gstatus = route, gstatus
	obs := w.obs
	cause := obs.cause(gstatus)
	attrs := []slog.Attr{
		slog.Uint64("task", id),
		slog.String("route", route),
		slog.Duration("elapsed", elapsed),
		slog.Duration("threshold", w.cfg.Threshold),
		slog.String("cause", cause),
		slog.Duration("thread_cpu", obs.used),
		slog.Duration("window", obs.window),
	}
	if needs := w.causeNeeds(cause); needs != "" {
		attrs = append(attrs, slog.String("cause_needs", needs))
	}
	if obs.stateOK {
		attrs = append(attrs, slog.String("thread_state", string(obs.state)))
	}
	attrs = append(attrs,
		slog.Uint64("suppressed", suppressed),
		slog.Uint64("goroutine", goid),
		slog.String("stack", stack))
	w.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "baton: a task is holding the loop", attrs...)
}

// stillRuns reports whether the probe still shows the slice of task id that was running
// at at.
func (w *Watchdog) stillRuns(id uint64, at time.Time) bool {
	nid, elapsed, ok := w.cfg.Probe()
	return ok && sameSlice(nid, w.now().Add(-elapsed), id, at)
}

// goroutineStatus returns the status in a stack's header ("goroutine 7 [runnable]:" gives
// "runnable", "goroutine 7 [syscall, 2 minutes]:" gives "syscall"), or "".
func goroutineStatus(stack string) string {
	_, s, ok := strings.Cut(stack, " [")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(s, "],"); i >= 0 {
		return s[:i]
	}
	return ""
}

// Stats returns the stall figures so far. It takes a mutex the watchdog holds only
// briefly. Any goroutine.
func (w *Watchdog) Stats() accounting.StallStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	st.Durations = w.h.summary()
	return st
}

// endSlot holds the loop's last report of a long slice's end: a sequence lock over the
// task id and length, written by one goroutine at a time and read by the watchdog.
type endSlot struct {
	seq    atomic.Uint64 // odd while a store is in progress; 0: nothing reported yet
	id     atomic.Uint64
	length atomic.Int64
}

func (e *endSlot) store(id uint64, length time.Duration) {
	s := e.seq.Load()
	e.seq.Store(s + 1)
	e.id.Store(id)
	e.length.Store(int64(length))
	e.seq.Store(s + 2)
}

// load returns the last report (ok=false when there is none or a store is in progress)
// and whether anything was ever reported.
func (e *endSlot) load() (id uint64, length time.Duration, ok, used bool) {
	s := e.seq.Load()
	if s == 0 {
		return 0, 0, false, false
	}
	if s&1 != 0 {
		return 0, 0, false, true
	}
	id, length = e.id.Load(), time.Duration(e.length.Load())
	if e.seq.Load() != s {
		return 0, 0, false, true
	}
	return id, length, true, true
}

// stackOf returns the stack of goroutine goid, cut out of a dump of all goroutines
// ("goroutine <goid> [..." up to the blank line after it), or "" when there is no such
// goroutine. The dump stops the world for a moment and allocates: use it for stats pages
// and stall reports, not per request. Any goroutine.
func stackOf(goid uint64) string {
	if goid == 0 {
		return ""
	}
	return findStack(dumpAll(), goid)
}

// StacksOf is stackOf for many goroutines from one dump: it returns the stack of each goid
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
// stays valid and unchanged, such as a route's key; nil for none). id is the task's id; it
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
