package scheduler

import (
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"time"

	"github.com/batonrt/baton/internal/clock"
	"github.com/batonrt/baton/internal/publish"
)

// DefaultMaxIdle is the default bound of the idle coroutine pool.
//
// Each idle coroutine is a parked goroutine holding at least an 8 KiB stack, so 1024 of
// them keep about 8 MiB after a burst (more while stacks that handlers grew have not been
// shrunk by the GC). In exchange, a server that regularly has up to ~1k handlers in flight
// never creates a coroutine in steady state: creating one (a goroutine, a stack and the
// iter.Pull closures) costs several allocations and many times the price of a switch into
// a pooled one, which allocates nothing (figures in docs/design.md, "scheduler").
const DefaultMaxIdle = 1024

// DefaultSlowSlice is the default Config.SlowSlice (as in tokio-metrics).
const DefaultSlowSlice = 50 * time.Microsecond

// Config configures a Scheduler.
type Config struct {
	// Post hands fn to the loop goroutine to run there later. It must be safe for
	// concurrent use; the loop supplies it (it is the single door from other goroutines)
	// and calls Scheduler.Run after every batch of posted functions. The scheduler uses it
	// only from its timer goroutine, to wake the loop when a timer is due. Required (see
	// Validate).
	Post func(fn func())

	// Hooks are optional callbacks at every switch, for accounting. nil fields are not
	// called.
	Hooks Hooks

	// OnPanic is called on the loop (inside the task's coroutine, so stack is the
	// panicking stack) when a task's function panics; the task is Done afterwards and its
	// coroutine is reused. For a panic in an AfterFunc callback or an Every tick, t is nil
	// or the Every task respectively. When the function called runtime.Goexit, v is
	// ErrGoexit (see there and LockedOSThread). It must not panic or park. Default: log
	// with log/slog at error level, including the stack.
	OnPanic func(t *Task, v any, stack []byte)

	// LockedOSThread tells the scheduler that the loop goroutine is locked to its OS thread
	// (runtime.LockOSThread); the scheduler cannot find out by itself. It matters only
	// when a task calls runtime.Goexit. The coroutine that ran that task is then in the
	// middle of the Goexit and must finish it on some goroutine other than the loop
	// (iter.Pull re-raises the Goexit on whichever goroutine resumes it). Unlocked, the
	// scheduler resumes it once from a goroutine of its own, which the Goexit then ends.
	// Locked, that is not possible (the runtime throws a fatal error when a coroutine
	// created on a locked goroutine is resumed on another thread), so the coroutine stays
	// parked forever: one goroutine and its stack leaked per Goexit, counted in
	// Counters.LeakedCoroutines. Setting it wrongly to false on a locked loop makes a
	// Goexit in a task crash the process.
	LockedOSThread bool

	// MaxIdle bounds the pool of idle coroutines kept for reuse (see DefaultMaxIdle for the
	// default and why). Extra coroutines are stopped when their task ends. Negative: keep
	// none.
	MaxIdle int

	// SlowSlice is the threshold above which a slice counts in Stats.SlowSlices.
	// 0: DefaultSlowSlice. Negative is invalid.
	SlowSlice time.Duration

	// NoAccounting turns off the per-switch clock reads (to measure their cost): Stats then
	// counts only Rounds and Scheduler.Running reports no elapsed time. Timers still read
	// the clock.
	NoAccounting bool

	// OSClock makes every clock reading (see Scheduler.Now) come from the OS's monotonic
	// clock. By default, on amd64 where the kernel itself keeps time with the CPU's
	// time-stamp counter, most readings come from the counter instead, calibrated against
	// the OS clock and re-anchored to it every millisecond: cheaper than an OS reading
	// (the scheduler reads the clock at every switch); its accuracy is stated in package
	// internal/clock, its cost measured in docs/accounting.md.
	OSClock bool

	// NewAlarm makes the alarm that wakes the loop when the earliest timer is due; fire
	// is the function the alarm calls when it goes off (on a goroutine of its own: fire
	// posts to the loop through Post). It is called once, on the loop, when the first
	// timer is armed. nil: a runtime timer (time.AfterFunc), which fires up to about a
	// millisecond late when the process is idle (see Alarm).
	NewAlarm func(fire func()) Alarm

	// TimerSlack bounds how often the alarm wakes the loop: it goes off at the earliest
	// deadline, but not sooner than TimerSlack after it last went off (or RunTimers last
	// fired timers; RunTimers itself fires at most once per half slack). Timers due closer
	// together than that share one wake-up of the loop rather than having one each, none
	// is made later than TimerSlack on that account, and a lone timer is not delayed at
	// all: it trades lateness for wake-ups only where wake-ups are dense. The timers
	// themselves never fire early. 0: the alarm is set for the earliest deadline itself.
	// Negative is invalid.
	TimerSlack time.Duration
}

// Hooks are callbacks at every switch, for accounting. All are called on the loop (or in
// the task that caused the switch) and must not block, park, panic or allocate.
type Hooks struct {
	// OnReady: t became ready (Spawn, a wake, Cancel of a parked task, Yield).
	OnReady func(t *Task)
	// OnRun: a slice of t starts (t.LastSlice() reports its queue delay).
	OnRun func(t *Task)
	// OnStop: a slice of t ended; st is Parked (r says why), Ready (Yield) or Done (its
	// function returned or panicked; t is recycled right after the hook, so copy what you
	// need). r is meaningful only when st is Parked. t.LastSlice() reports the slice length.
	OnStop func(t *Task, st State, r Reason)

	// OnCoroutine: a slice of t starts on another coroutine (goroutine) than the slice
	// before it, or on a coroutine that has not run yet (t.Goroutine() is then 0). It is
	// OnRun for an observer that follows which goroutine holds the loop (a stall
	// detector's slot): consecutive slices on one coroutine belong to one task, or to a
	// task and the next one it serves, which that observer catches as the new task
	// starts. Pooled coroutines make it rare under load, and it costs no call when nil.
	OnCoroutine func(t *Task)

	// OnSlices receives the loop-wide slice figures in batches, with accounting on: the
	// queue wait (ready to running, ns) of each slice in waits, and the totals of their
	// lengths in st. It is called when sliceBatch slices have run and by FlushSlices; waits
	// is reused afterwards. Batching spares a call per slice.
	OnSlices func(waits []int64, st SliceTotals)
}

// SliceTotals sums the lengths of a run of slices. Plain data.
type SliceTotals struct {
	Count     uint64        // slices
	Total     time.Duration // their total length
	Max       time.Duration // the longest
	Slow      uint64        // slices longer than Config.SlowSlice
	SlowTotal time.Duration // their total length
}

// sliceBatch is how many slices' figures the scheduler gathers before Hooks.OnSlices: 2 KiB
// of waits, and one call per 256 slices instead of one per slice.
const sliceBatch = 256

// Scheduler runs tasks on the loop goroutine. Create it with New; call Close when done.
type Scheduler struct {
	// What every round trip touches (a wake, Run, the slice's start and end) comes first,
	// on as few cache lines as it fits: the loop runs other code between slices (parsing,
	// handlers, gnet), which evicts what the scheduler does not keep together.
	cur          *Task // running task
	acct         bool
	inRun        bool
	closed       bool
	rhead, rtail *Task // ready queue (FIFO)
	nready       int
	heap         []*timer
	spLo, spSpan uintptr // confirmed frame addresses: [spLo, spLo+spSpan] (spLo 0: none)
	hooks        Hooks
	slowSlice    int64
	switches     uint64

	// Slice figures for Hooks.OnSlices, since the last call (accounting on only); the
	// queue waits themselves are in waits, at the end.
	nwaits int
	slices SliceTotals
	lastG  uint64 // goroutine of the latest slice, for Hooks.OnCoroutine

	// Watchdog seam, read by Running from any goroutine. At a slice start the loop stores
	// runID (only when it changes) and then runStart = start+1; at the slice end it stores
	// runStart = 0. pubID is the loop's copy of the last runID stored. They are published
	// with plain stores where the CPU keeps stores in order (see internal/publish): a
	// sync/atomic store is a locked instruction, several times the price of a plain one,
	// and there are three per slice (figures in docs/accounting.md, "Cost").
	runID    publish.Int64 // a uint64
	runStart publish.Int64
	pubID    uint64

	clk  clock.Clock // the loop's clock, counting from base
	base time.Time   // epoch of the scheduler's clock (monotonic)

	post    func(func())
	onPanic func(*Task, any, []byte)
	maxIdle int
	locked  bool // Config.LockedOSThread
	nextID  uint64

	lhead, ltail *Task // live tasks, oldest first
	nlive        int
	free         *Task // idle pool (Task structs, each with its coroutine)
	nfree        int

	tseq     uint64
	alarm    Alarm // nil until the first timer is armed
	newAlarm func(fire func()) Alarm
	slack    int64 // Config.TimerSlack
	armed    bool  // alarm will fire (or its post is in flight)
	armedAt  int64 // when the alarm was armed to go off
	firedAt  int64 // when the alarm last went off (its post ran) or RunTimers fired, for TimerSlack
	fireFn   func()
	timerCB  func()

	loopGID uint64 // goroutine id of the loop (0 until the first Run)

	// The goroutines that count as the loop, for OnLoop (goid.go): the loop's own and its
	// coroutines'. Written once per coroutine, read only by OnLoop.
	gidsMu sync.Mutex
	gids   map[uint64]struct{} // guarded by gidsMu

	spawned, completed, panics, coroutines uint64
	goexits, leaked                        uint64

	waits [sliceBatch]int64 // queue wait of each slice since the last Hooks.OnSlices
}

// Validate reports the first invalid field of cfg, by name: Post is required, SlowSlice
// and TimerSlack must not be negative (SlowSlice 0 means DefaultSlowSlice). A negative
// MaxIdle is valid (keep no idle coroutine). Any goroutine.
func (cfg Config) Validate() error {
	if cfg.Post == nil {
		return errors.New("scheduler: Config.Post is required")
	}
	if cfg.SlowSlice < 0 {
		return fmt.Errorf("scheduler: Config.SlowSlice (%v) must not be negative (0 means DefaultSlowSlice)", cfg.SlowSlice)
	}
	if cfg.TimerSlack < 0 {
		return fmt.Errorf("scheduler: Config.TimerSlack (%v) must not be negative", cfg.TimerSlack)
	}
	return nil
}

// New returns a scheduler. It panics with Validate's error if cfg is invalid. Any
// goroutine (the first goroutine to call Run becomes the loop).
func New(cfg Config) *Scheduler {
	if err := cfg.Validate(); err != nil {
		panic(err.Error())
	}
	s := &Scheduler{
		post:      cfg.Post,
		hooks:     cfg.Hooks,
		onPanic:   cfg.OnPanic,
		maxIdle:   cfg.MaxIdle,
		locked:    cfg.LockedOSThread,
		slowSlice: int64(cfg.SlowSlice),
		acct:      !cfg.NoAccounting,
		base:      time.Now(),
		newAlarm:  cfg.NewAlarm,
		slack:     int64(cfg.TimerSlack),
	}
	s.clk = clock.New(s.base, cfg.OSClock)
	if s.onPanic == nil {
		s.onPanic = logPanic
	}
	if s.maxIdle == 0 {
		s.maxIdle = DefaultMaxIdle
	} else if s.maxIdle < 0 {
		s.maxIdle = 0
	}
	if s.slowSlice == 0 {
		s.slowSlice = int64(DefaultSlowSlice)
	}
	s.fireFn = s.onTimerPosted
	s.timerCB = s.onTimerFired
	return s
}

func logPanic(t *Task, v any, stack []byte) {
	if t == nil {
		slog.Error("scheduler: timer callback panicked", "panic", v, "stack", string(stack))
		return
	}
	slog.Error("scheduler: task panicked", "task", t.ID(), "label", t.Label(), "panic", v, "stack", string(stack))
}

// clock returns the monotonic time since the scheduler's epoch, in ns.
func (s *Scheduler) clock() int64 { return s.clk.Now() }

// Now returns the scheduler's clock: monotonic nanoseconds since Epoch, the clock every
// figure in Stats and every timer is measured with (see Config.OSClock for where it
// comes from). Loop-confined (the clock's calibration is loop state): other goroutines
// use time.Since(Epoch()), which agrees with it to within a microsecond.
func (s *Scheduler) Now() int64 { return s.clk.Now() }

// Epoch returns the origin of the scheduler's monotonic clock: Running's elapsed times and
// Stats are measured against it. Any goroutine.
func (s *Scheduler) Epoch() time.Time { return s.base }

// Spawn creates a task that will run fn(t) and puts it, Ready, at the back of the ready
// queue; arg is available as t.Arg() (pass a method value stored once and a pointer arg to
// avoid allocating a closure per task). It panics after Close. Loop-confined.
func (s *Scheduler) Spawn(fn func(t *Task), arg any) *Task {
	t := s.newTask(fn, arg)
	s.pushReady(t)
	if h := s.hooks.OnReady; h != nil {
		h(t)
	}
	return t
}

// newTask makes a Ready task that is in no queue yet, reading the clock for its spawn
// time if accounting.
func (s *Scheduler) newTask(fn func(t *Task), arg any) *Task {
	now := int64(0)
	if s.acct {
		now = s.clock()
	}
	return s.newTaskAt(fn, arg, now)
}

// newTaskAt is newTask with the spawn time (clock reading) given.
func (s *Scheduler) newTaskAt(fn func(t *Task), arg any, now int64) *Task {
	if s.closed {
		panic("scheduler: Spawn after Close")
	}
	if fn == nil {
		panic("scheduler: Spawn with a nil function")
	}
	t := s.free
	if t != nil {
		s.free = t.rnext
		t.rnext = nil
		s.nfree--
	} else {
		t = &Task{s: s}
		t.sleep.idx = -1
		t.sleep.task = t
	}
	s.initTask(t, fn, arg, now)
	return t
}

// initTask makes t, a struct out of every list (new, from the idle pool, or a task that
// chain reuses), a Ready task spawned at now that runs fn(arg), in no queue yet. The
// scheduler is open and fn is not nil.
func (s *Scheduler) initTask(t *Task, fn func(t *Task), arg any, now int64) {
	s.nextID++
	t.id = s.nextID
	t.fn, t.arg = fn, arg
	t.state = Ready
	t.started, t.killed, t.timed = false, false, false
	t.st, t.parked = Stats{}, 0
	t.lastWait, t.lastRun, t.sliceEnd = 0, 0, 0

	t.lprev = s.ltail
	if s.ltail != nil {
		s.ltail.lnext = t
	} else {
		s.lhead = t
	}
	s.ltail = t
	s.nlive++
	s.spawned++

	t.spawnAt, t.readyAt = now, now
}

// SpawnNow creates a task like Spawn and runs its first slice at once, ahead of the tasks
// already ready, instead of queueing it. The loop uses it for a request just parsed: it
// answers at once, and a task that keeps yielding gets one slice per loop turn rather than
// one per request that arrives meanwhile. The task is not returned: it may have finished
// (and been recycled) by the time SpawnNow returns, so fn gets it as its argument.
//
// Loop only, like Run: it panics if called from inside a task or from within Run.
func (s *Scheduler) SpawnNow(fn func(t *Task), arg any) {
	s.checkSpawnNow("SpawnNow")
	now := int64(0)
	if s.acct {
		now = s.clock()
	}
	// No helper shared with SpawnNowAt: the task's first slice runs inside this call, and
	// every frame below the switch costs a mispredicted return when the coroutine switches
	// back (its calls have replaced the CPU's predicted return addresses).
	t := s.newTaskAt(fn, arg, now)
	if h := s.hooks.OnReady; h != nil {
		h(t)
	}
	s.inRun = true
	s.startSlice(t, now) // not s.resume: see there
	t.resume()
	s.endSlice(t)
	s.inRun = false
}

// SpawnNowAt is SpawnNow for a loop that keeps its own clock readings, which saves two
// clock reads per task (nanoseconds since Epoch). The task counts as ready
// since ready: its queue delay and first-run delay run from there. Its first slice counts
// as started at start, a reading the caller took before the call, with nothing but this
// task's own set-up since: the loop passes the end of the slice it ran last in the same
// callback, so the parsing and routing of a request count as that request's time on the
// loop. It returns the clock reading at the end of the slice, for the next call (0 with
// Config.NoAccounting, which ignores ready and start).
//
// Loop only, like SpawnNow.
func (s *Scheduler) SpawnNowAt(fn func(t *Task), arg any, ready, start int64) (end int64) {
	s.checkSpawnNow("SpawnNowAt")
	if !s.acct {
		ready, start = 0, 0
	}
	t := s.newTaskAt(fn, arg, ready) // not a call to a shared helper: see SpawnNow
	if h := s.hooks.OnReady; h != nil {
		h(t)
	}
	s.inRun = true
	s.startSlice(t, max(start, ready)) // not s.resume: see there
	t.resume()
	end = s.endSlice(t)
	s.inRun = false
	return end
}

// checkSpawnNow panics unless op may run a task now: on the loop, outside tasks and Run.
func (s *Scheduler) checkSpawnNow(op string) {
	if s.cur != nil {
		panic(fmt.Sprintf("scheduler: %s called from inside task %d: only the loop goroutine may run tasks", op, s.cur.id))
	}
	if s.inRun {
		panic("scheduler: " + op + " called from within Run (from a hook or an AfterFunc callback)")
	}
	s.checkLoop()
}

// Go starts a background task (not tied to a request): Spawn(fn, nil). The *Task is
// recycled when fn returns: to stop the task later, keep its Ref and use CancelRef.
// Loop-confined.
func (s *Scheduler) Go(fn func(t *Task)) *Task { return s.Spawn(fn, nil) }

// Run runs the ready tasks in FIFO order, each until it parks, yields or returns. It first
// fires due timers, then runs at most the tasks that were ready at that point: tasks that
// yield or are woken meanwhile go to the back of the queue and run at the next call, so the
// loop can poll I/O between batches. It reports whether tasks remain ready or a timer fell
// due while the slices ran: the loop must then call Run again soon, after polling I/O,
// because such a timer is left to that call, not to the alarm (Run arms the alarm once,
// after the slices, for the earliest timer still to come). After Close it does nothing.
//
// Loop only: it panics if called from inside a task, re-entrantly, or from a goroutine other
// than the first one that called it.
func (s *Scheduler) Run() (more bool) { return s.run(0, false) }

// RunAt is Run given now, a reading of the scheduler's clock (Now, or a Waker.WakeAt
// reading) that the caller took on the loop since the last slice ran, so that Run reads
// the clock for neither timers nor accounting before the first slice: the loop passes the
// reading its turn began with when nothing but wakes ran since. Ready tasks' queue delay
// is measured to now and the first slice starts at now, so a reading older than the work
// done since moves that work into the first slice's figures; timers due after now fire at
// a later Run. Loop only, like Run.
func (s *Scheduler) RunAt(now int64) (more bool) { return s.run(now, true) }

// run is Run, given the reading now when haveNow. Run and RunAt are inlined into their
// callers, so that run is the only frame of the scheduler on the loop's stack while a task
// runs (see resume).
func (s *Scheduler) run(now int64, haveNow bool) (more bool) {
	if s.cur != nil {
		panic(fmt.Sprintf("scheduler: Run called from inside task %d: only the loop goroutine may run tasks", s.cur.id))
	}
	if s.inRun {
		panic("scheduler: Run called re-entrantly (from a hook or an AfterFunc callback)")
	}
	s.checkLoop()
	if s.closed {
		return false
	}
	s.inRun = true
	if len(s.heap) > 0 {
		if !haveNow {
			now, haveNow = s.clock(), true
		}
		if s.fireDue(now) {
			now = s.clock() // callbacks ran: the reading is stale
		}
		if s.armed && s.armedAt <= now {
			s.armed = false // its post is due or in flight; do not depend on it
		}
	}
	n := s.nready
	if n > 0 && s.acct && !haveNow {
		now, haveNow = s.clock(), true
	}
	ran := n > 0
	for ; n > 0; n-- {
		t := s.rhead
		s.rhead = t.rnext
		if s.rhead == nil {
			s.rtail = nil
		}
		t.rnext = nil
		s.nready--
		// startSlice, inlined by hand (the compiler does not): the call costs every slice
		// Run runs. Not s.resume: see there. TestRunInlinesStartSlice keeps the two in step.
		if t.resume == nil {
			t.resume, t.stop = iter.Pull(t.body)
			s.coroutines++
		}
		t.state = Running
		s.cur = t
		t.st.Rounds++
		if s.acct {
			wait := now - t.readyAt
			t.lastWait = wait
			t.st.QueueDelay += time.Duration(wait)
			if !t.started {
				t.st.FirstRunDelay = time.Duration(now - t.spawnAt)
			}
			t.sliceStart = now
			s.waits[s.nwaits] = wait
			if s.pubID != t.id {
				s.pubID = t.id
				s.runID.Store(int64(t.id))
			}
			s.runStart.Store(now + 1) // stored after runID; nonzero while a slice runs
		}
		t.started = true
		if h := s.hooks.OnRun; h != nil {
			h(t)
		}
		if t.gid != s.lastG || t.gid == 0 {
			s.lastG = t.gid
			if h := s.hooks.OnCoroutine; h != nil {
				h(t)
			}
		}
		t.resume()
		now = s.endSlice(t)
	}
	s.inRun = false
	more = s.nready > 0
	// The alarm is armed once, after the slices: the timers they added (a room's next
	// tick, a Sleep) are in the heap by now, so the wake-up is set once per Run rather
	// than once per timer that became the earliest. A timer that fell due while the
	// slices ran is left to the next Run, which the caller makes soon (more), rather than
	// to the alarm: that costs the loop one turn, not a wake-up through the alarm's
	// goroutine.
	if len(s.heap) > 0 && !s.closed {
		if !haveNow || ran && !s.acct {
			now = s.clock() // with accounting on, the last slice's end is a fresh reading
		}
		if s.heap[0].when <= now {
			more = true
		} else {
			s.arm(now)
		}
	}
	return more
}

// resume runs one slice of t, which is Ready and out of the queue. now is the current clock
// reading (if accounting); it returns the reading at the end of the slice. When t's
// function returns having called Task.Chain, the slice may go on with further tasks on the
// same coroutine (see chain): resume then accounts for the last of them.
//
// Run, SpawnNow and SpawnNowAt do not call it: they make its three calls themselves. Every
// frame on the loop's stack below the switch into the task (t.resume) costs a mispredicted
// return when the task switches back, because the task's own calls have replaced the
// CPU's predicted return addresses; calls made before or after the switch cost no such
// misprediction. resume is one frame more, for Close only.
func (s *Scheduler) resume(t *Task, now int64) int64 {
	s.startSlice(t, now)
	t.resume() // switch into the task until it parks, yields or returns
	return s.endSlice(t)
}

// startSlice makes t, Ready and out of the queue, the running task and accounts for the
// start of its slice at the clock reading now; it gives t a coroutine if it has none. The
// caller then switches into t (t.resume) and, once t switches back, calls endSlice. run
// has a copy inlined by hand.
func (s *Scheduler) startSlice(t *Task, now int64) {
	if t.resume == nil {
		t.resume, t.stop = iter.Pull(t.body)
		s.coroutines++
	}
	t.state = Running
	s.cur = t
	t.st.Rounds++
	if s.acct {
		wait := now - t.readyAt
		t.lastWait = wait
		t.st.QueueDelay += time.Duration(wait)
		if !t.started {
			t.st.FirstRunDelay = time.Duration(now - t.spawnAt)
		}
		t.sliceStart = now
		s.waits[s.nwaits] = wait
		if s.pubID != t.id {
			s.pubID = t.id
			s.runID.Store(int64(t.id))
		}
		s.runStart.Store(now + 1) // stored after runID; nonzero while a slice runs
	}
	t.started = true
	if h := s.hooks.OnRun; h != nil {
		h(t)
	}
	if t.gid != s.lastG || t.gid == 0 {
		s.lastG = t.gid
		if h := s.hooks.OnCoroutine; h != nil {
			h(t)
		}
	}
}

// endSlice runs on the loop once t, started by startSlice, has switched back: it accounts
// for the end of the slice, moves t on by its new state (parked, back in the ready queue,
// or finished and recycled) and returns the clock reading at the end of the slice (0
// without accounting). After a chain (see chain) t is the chain's last task.
func (s *Scheduler) endSlice(t *Task) int64 {
	s.cur = nil
	if t.ended {
		// A chain ended with no task to follow: the last task's slice was accounted for
		// on its coroutine, before the chain looked for a successor.
		t.ended = false
		s.recycle(t)
		return t.sliceEnd
	}
	// stopSlice, inlined by hand (the compiler does not): keep the two in step.
	now := int64(0)
	s.switches++
	if s.acct {
		s.runStart.Store(0)
		now = s.clock()
		d := now - t.sliceStart
		t.lastRun, t.sliceEnd = d, now
		t.st.OnLoop += time.Duration(d)
		if time.Duration(d) > t.st.MaxSlice {
			t.st.MaxSlice = time.Duration(d)
		}
		sl := &s.slices // its Count is nwaits, set when flushed
		sl.Total += time.Duration(d)
		sl.Max = max(sl.Max, time.Duration(d))
		if d > s.slowSlice {
			t.st.SlowSlices++
			t.st.SlowTime += time.Duration(d)
			sl.Slow++
			sl.SlowTotal += time.Duration(d)
		}
		if s.nwaits++; s.nwaits == sliceBatch {
			s.FlushSlices()
		}
	}
	switch t.state {
	case Parked:
		t.parkedAt = now
		if h := s.hooks.OnStop; h != nil {
			h(t, Parked, t.reason)
		}
	case Ready:
		t.readyAt = now
		if !s.closed {
			s.pushReady(t)
		}
		if h := s.hooks.OnStop; h != nil {
			h(t, Ready, ReasonOther)
		}
		if h := s.hooks.OnReady; h != nil {
			h(t)
		}
	case Done:
		if t.goexited {
			s.dropCoroutine(t)
		}
		if h := s.hooks.OnStop; h != nil {
			h(t, Done, ReasonOther)
		}
		s.finish(t)
	default:
		panic(fmt.Sprintf("scheduler: task %d switched back to the loop in state %s", t.id, t.state))
	}
	return now
}

// stopSlice accounts for the end of t's slice, reading the clock (if accounting), and
// returns the reading (0 without accounting). endSlice has a copy inlined by hand.
func (s *Scheduler) stopSlice(t *Task) (now int64) {
	s.switches++
	if !s.acct {
		return 0
	}
	s.runStart.Store(0)
	now = s.clock()
	d := now - t.sliceStart
	t.lastRun, t.sliceEnd = d, now
	t.st.OnLoop += time.Duration(d)
	if time.Duration(d) > t.st.MaxSlice {
		t.st.MaxSlice = time.Duration(d)
	}
	sl := &s.slices // its Count is nwaits, set when flushed
	sl.Total += time.Duration(d)
	sl.Max = max(sl.Max, time.Duration(d))
	if d > s.slowSlice {
		t.st.SlowSlices++
		t.st.SlowTime += time.Duration(d)
		sl.Slow++
		sl.SlowTotal += time.Duration(d)
	}
	if s.nwaits++; s.nwaits == sliceBatch {
		s.FlushSlices()
	}
	return now
}

// chain runs on the coroutine of t, whose function has just returned after calling
// Task.Chain: it accounts for the end of t's slice as resume would (t is Done, OnStop is
// called and t leaves the live tasks), then asks the chain function for a task to follow.
// If it names one, t's struct (and coroutine) becomes that task, Ready since the reading
// the chain function gave and Running from the end of t's slice (or from that reading if
// later), and chain reports true: the coroutine calls the new task's function without a
// switch to the loop. Otherwise t is marked ended for resume to recycle once the
// coroutine has switched back.
func (s *Scheduler) chain(t *Task) bool {
	pick, arg := t.chain, t.chainArg
	t.chain, t.chainArg = nil, nil
	if s.closed || t.killed || t.goexited {
		return false
	}
	s.cur = nil
	end := s.stopSlice(t)
	if h := s.hooks.OnStop; h != nil {
		h(t, Done, ReasonOther)
	}
	s.unlink(t)
	fn, next, ready := pick(arg)
	if fn == nil || s.closed {
		t.ended = true
		return false
	}
	if !s.acct {
		ready, end = 0, 0
	}
	s.initTask(t, fn, next, ready)
	if h := s.hooks.OnReady; h != nil {
		h(t)
	}
	s.startSlice(t, max(end, ready))
	return true
}

// FlushSlices hands the slice figures gathered since the last call to Hooks.OnSlices (if
// any slice ran). The loop calls it before reading its loop-wide figures. Loop-confined.
func (s *Scheduler) FlushSlices() {
	if s.nwaits == 0 {
		return
	}
	if h := s.hooks.OnSlices; h != nil {
		st := s.slices
		st.Count = uint64(s.nwaits)
		h(s.waits[:s.nwaits], st)
	}
	s.nwaits, s.slices = 0, SliceTotals{}
}

func (s *Scheduler) pushReady(t *Task) {
	if s.rtail != nil {
		s.rtail.rnext = t
	} else {
		s.rhead = t
	}
	s.rtail = t
	s.nready++
}

// finish removes a Done task from the live list and recycles its struct and coroutine.
func (s *Scheduler) finish(t *Task) {
	s.unlink(t)
	s.recycle(t)
}

// unlink removes a Done task from the live list, counts it completed and clears what
// refers to its function.
func (s *Scheduler) unlink(t *Task) {
	if t.lprev != nil {
		t.lprev.lnext = t.lnext
	} else {
		s.lhead = t.lnext
	}
	if t.lnext != nil {
		t.lnext.lprev = t.lprev
	} else {
		s.ltail = t.lprev
	}
	t.lprev, t.lnext = nil, nil
	s.nlive--
	s.completed++
	t.fn, t.arg, t.err, t.wakeErr, t.label = nil, nil, nil, nil, ""
}

// recycle puts an unlinked task's struct, with its coroutine, in the idle pool, or stops
// the coroutine when the pool is full.
func (s *Scheduler) recycle(t *Task) {
	if s.nfree >= s.maxIdle {
		t.stopCoroutine()
		return
	}
	t.rnext = s.free
	s.free = t
	s.nfree++
}

// dropCoroutine detaches from t the coroutine of a task that called runtime.Goexit (see
// Task.goexit) and lets the Goexit finish on a goroutine other than the loop: resumed
// from a throwaway goroutine, the coroutine runs the rest of the Goexit's deferred calls
// (none of the scheduler's touches the Task any more) and exits, and iter.Pull re-raises
// the Goexit on the throwaway goroutine, which ends it. On a loop locked to its thread the
// coroutine is left parked for good. The Task struct gets a new coroutine when reused.
func (s *Scheduler) dropCoroutine(t *Task) {
	next := t.resume
	t.resume, t.stop, t.yield, t.goexited = nil, nil, nil, false
	s.goexits++
	if s.locked {
		s.leaked++
		return
	}
	go next()
}

func (t *Task) stopCoroutine() {
	if t.stop != nil {
		t.stop()
		t.resume, t.stop, t.yield = nil, nil, nil
	}
}

// wake makes the parked task t ready; its park returns err. It unregisters every wake source
// the scheduler knows of (Sleep timer, Future/Event waiter list), so none of them can wake
// a later park. now < 0: read the clock.
func (s *Scheduler) wake(t *Task, err error, now int64) {
	if t.sleep.idx >= 0 {
		s.delTimer(&t.sleep)
	}
	if t.wl != nil {
		t.wl.remove(t)
	}
	t.wakeErr = err
	t.state = Ready
	if s.acct {
		if now < 0 {
			now = s.clock()
		}
		p := time.Duration(now - t.parkedAt)
		t.st.Parked[t.reason] += p
		t.parked += p
		t.readyAt = now
	}
	if !s.closed {
		s.pushReady(t)
	}
	if h := s.hooks.OnReady; h != nil {
		h(t)
	}
}

// Wake makes the parked task t ready; its Park (or Sleep) returns nil. It is a no-op if t is
// not parked. Future.Await and Event.Wait park again if woken before their condition holds.
// Loop-confined.
func (s *Scheduler) Wake(t *Task) {
	if t.state == Parked {
		s.wake(t, nil, -1)
	}
}

// Cancel cancels t with err (non-nil, else it panics). Cancellation is sticky: the first
// error is kept. If t is parked it is woken and its Park/Sleep/Await returns err; every later
// Park, Sleep or Await in t returns err at once without parking (Yield still yields). A
// parked task already woken by something else keeps that wake's result for its current park.
// No-op on a finished task. Loop-confined.
func (s *Scheduler) Cancel(t *Task, err error) {
	if err == nil {
		panic("scheduler: Cancel with a nil error")
	}
	if t.state == Done {
		return
	}
	if t.err == nil {
		t.err = err
	}
	if t.state == Parked {
		s.wake(t, t.err, -1)
	}
}

// CancelRef cancels the task r refers to with err, like Cancel, and reports whether that
// task was still alive (false for a task that has finished, whose struct may serve
// another task by now, and for the zero Ref). It is the safe way to stop a task from code
// that may outlive it: keep t.Ref() (right after Go, Every or Spawn), not the *Task.
//
// What stopping means: a parked task is woken and its park returns err; every later park
// returns err at once; the task's function is expected to return (its deferred functions
// then run), and a task that ignores the error keeps running until it returns. An Every
// task checks for cancellation before each tick: the tick in progress, if any (it may be
// the caller), finishes with its parks returning err, and no tick starts after it.
// err must not be nil. Loop-confined.
func (s *Scheduler) CancelRef(r Ref, err error) bool {
	if err == nil {
		panic("scheduler: CancelRef with a nil error")
	}
	t := r.Task()
	if t == nil {
		return false
	}
	s.Cancel(t, err)
	return true
}

// Close shuts the scheduler down: it stops the timers (pending AfterFunc callbacks never
// run), unwinds every live task — a parked or ready task resumes with its Park (or Yield)
// panicking with an internal value that the task wrapper recovers silently, so the deferred
// functions of handlers run; a task that never ran is dropped — and stops every idle
// coroutine. Afterwards no goroutine started by the scheduler remains, Run does nothing and
// Spawn panics. Idempotent.
//
// Unwinding tasks must not recover that panic and carry on parking: every Park, Sleep,
// Await and Yield of an unwound task panics again.
//
// Loop only: it panics if called from inside a task, a hook or an AfterFunc callback, or
// from a goroutine other than the loop once Run was called.
func (s *Scheduler) Close() {
	if s.cur != nil {
		panic(fmt.Sprintf("scheduler: Close called from inside task %d: only the loop goroutine may close", s.cur.id))
	}
	if s.inRun {
		panic("scheduler: Close called from inside Run (a hook or an AfterFunc callback): call it from the loop between Runs")
	}
	if s.closed {
		return
	}
	if s.loopGID != 0 {
		if g := goroutineID(); g != s.loopGID {
			panic(fmt.Sprintf("scheduler: Close called from goroutine %d, but the loop is goroutine %d", g, s.loopGID))
		}
	}
	s.closed = true
	if s.alarm != nil {
		s.alarm.Close()
	}
	for _, tm := range s.heap {
		tm.idx = -1
	}
	s.heap = nil
	for t := s.rhead; t != nil; {
		n := t.rnext
		t.rnext = nil
		t = n
	}
	s.rhead, s.rtail, s.nready = nil, nil, 0

	for t := s.lhead; t != nil; t = s.lhead {
		t.killed = true
		if t.state == Parked {
			s.wake(t, nil, -1)
		}
		if !t.started {
			t.state = Done
			if h := s.hooks.OnStop; h != nil {
				h(t, Done, ReasonOther)
			}
			s.finish(t)
			continue
		}
		now := int64(0)
		if s.acct {
			now = s.clock()
		}
		s.resume(t, now)
		if t.state != Done {
			panic(fmt.Sprintf("scheduler: task %d did not finish when unwound by Close", t.id))
		}
	}
	for t := s.free; t != nil; t = t.rnext {
		t.stopCoroutine()
	}
	s.free, s.nfree = nil, 0
}

// Len returns the number of live tasks (spawned, not yet Done) and of ready tasks.
// Loop-confined.
func (s *Scheduler) Len() (live, ready int) { return s.nlive, s.nready }

// Current returns the running task, or nil when no task is running. Loop-confined.
func (s *Scheduler) Current() *Task { return s.cur }

// Tasks iterates over the live tasks, oldest first. The loop body must not spawn or run
// tasks. Loop-confined.
func (s *Scheduler) Tasks() iter.Seq[*Task] {
	return func(yield func(*Task) bool) {
		for t := s.lhead; t != nil; t = t.lnext {
			if !yield(t) {
				return
			}
		}
	}
}

// Counters are scheduler-wide counts, for loop health figures.
type Counters struct {
	Live, Ready, Parked int // tasks now
	Idle                int // idle tasks in the pool, each with its coroutine (but for one whose task called Goexit)
	Timers              int // pending timers (Sleep and AfterFunc)
	Spawned, Completed  uint64
	Panics              uint64 // task functions that panicked (AfterFunc and Every ticks included), Goexits included
	Goexits             uint64 // tasks that called runtime.Goexit (see ErrGoexit)
	LeakedCoroutines    uint64 // coroutines left parked by a Goexit (see Config.LockedOSThread)
	Switches            uint64 // slices run
	Coroutines          uint64 // coroutines ever created (Spawned - Coroutines = reuses, roughly)
}

// Switches returns the number of slices run so far (Counters().Switches, cheaply).
// Loop-confined.
func (s *Scheduler) Switches() uint64 { return s.switches }

// Counters returns the scheduler-wide counts. Loop-confined.
func (s *Scheduler) Counters() Counters {
	parked := s.nlive - s.nready
	if s.cur != nil {
		parked--
	}
	return Counters{
		Live: s.nlive, Ready: s.nready, Parked: parked, Idle: s.nfree, Timers: len(s.heap),
		Spawned: s.spawned, Completed: s.completed, Panics: s.panics,
		Goexits: s.goexits, LeakedCoroutines: s.leaked,
		Switches: s.switches, Coroutines: s.coroutines,
	}
}

// Running reports the task holding the loop right now and how long its current slice has
// been running, or ok=false when no task runs. It is the seam for a stall detector: a
// watchdog goroutine polls it and reports a slice that runs too long (the loop itself cannot
// notice, it is busy running the slice). elapsed never overstates the slice. It costs two
// stores per slice on the loop (three when the running task changes), counted as
// accounting: with Config.NoAccounting it always reports ok=false. Any goroutine.
func (s *Scheduler) Running() (id uint64, elapsed time.Duration, ok bool) {
	start := s.runStart.Load()
	if start == 0 {
		return 0, 0, false
	}
	id = uint64(s.runID.Load()) // stored before runStart: it is this slice's task
	if s.runStart.Load() != start {
		return 0, 0, false // the loop switched meanwhile: not stalled
	}
	elapsed = max(time.Since(s.base)-time.Duration(start-1), 0)
	return id, elapsed, true
}

func (s *Scheduler) reportPanic(t *Task, v any, stack []byte) {
	s.panics++
	s.onPanic(t, v, stack)
}
