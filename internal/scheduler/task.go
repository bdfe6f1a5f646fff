package scheduler

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"time"
)

// State is where a task is in its life. See the package documentation for the transitions.
type State uint8

const (
	// Ready: in the ready queue, waiting for Run (after Spawn, Yield or a wake).
	Ready State = iota
	// Running: holding the loop right now.
	Running
	// Parked: suspended until Wake, Cancel, a timer or a Future/Event wakes it.
	Parked
	// Done: its function returned or panicked; the *Task is about to be recycled.
	Done
	numStates
)

// stateNames is the one table of state names: every other package that names a state
// (accounting, the loop's pages) uses State.String.
var stateNames = [numStates]string{Ready: "ready", Running: "running", Parked: "parked", Done: "done"}

// String returns "ready", "running", "parked" or "done" (State(n) for an invalid value).
// Any goroutine.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Reason says why a task parked; parked time is accounted per reason. The values are the
// indexes of Stats.Parked; the loop copies each into its field of accounting's
// ParkedByReason (its names test checks that every reason has one).
type Reason uint8

const (
	// ReasonOther: a Park with no more specific reason.
	ReasonOther Reason = iota
	// ReasonSleep: Sleep (and the wait between Every ticks).
	ReasonSleep
	// ReasonWait: waiting for another task (Future.Await, Event.Wait).
	ReasonWait
	// ReasonOffload: waiting for work running off the loop.
	ReasonOffload
	// ReasonWrite: waiting for output backpressure to clear.
	ReasonWrite
	// ReasonQueue: waiting in an admission queue.
	ReasonQueue
	// NumReasons is the number of reasons (the length of Stats.Parked).
	NumReasons
)

// reasonNames is the one table of park reason names: Reason.String returns them, and they
// are TaskSample.ParkReason's values and the keys of accounting's parked_by_reason_seconds
// (the loop checks it). Sized by NumReasons, so a new reason without a
// name does not compile.
var reasonNames = [NumReasons]string{
	ReasonOther: "other", ReasonSleep: "sleep", ReasonWait: "wait",
	ReasonOffload: "offload", ReasonWrite: "write", ReasonQueue: "queue",
}

// String returns the reason's lower-case name ("sleep", "wait", ...), as used in JSON by
// accounting (Reason(n) for an invalid value). Any goroutine.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Stats are a task's raw scheduling counters. They are updated at every switch with the
// monotonic clock (one read per switch edge), without allocating or locking. With
// Config.NoAccounting only Rounds is counted.
type Stats struct {
	Rounds        uint64                    // slices run (times the task was resumed)
	OnLoop        time.Duration             // total wall time of its slices (time it held the loop)
	MaxSlice      time.Duration             // longest slice
	SlowSlices    uint64                    // slices longer than Config.SlowSlice
	SlowTime      time.Duration             // total time of those slices
	QueueDelay    time.Duration             // total time spent Ready (ready -> running), first run included; a Sleep is Ready from its deadline, so a late timer counts here
	FirstRunDelay time.Duration             // Spawn -> start of the first slice
	Parked        [NumReasons]time.Duration // total time Parked, by reason
	Spawned       time.Time                 // when Spawn was called (carries a monotonic reading)
}

// ParkedTotal returns the sum of Parked over all reasons. Any goroutine.
func (st *Stats) ParkedTotal() time.Duration {
	var d time.Duration
	for _, p := range st.Parked {
		d += p
	}
	return d
}

// Task is one cooperative task. Its function receives it and uses it to park.
//
// A task must not block its goroutine (channel operations, time.Sleep, mutexes held
// elsewhere, blocking syscalls): that stalls the whole loop. It parks instead. A panic is
// recovered and reported to Config.OnPanic. So is runtime.Goexit (reported as ErrGoexit):
// the task ends, the loop goes on, and the goroutine that ran the task's coroutine exits
// (or, with Config.LockedOSThread, stays parked forever; see there).
//
// A *Task is recycled when its function returns: do not use it afterwards (keep a Ref or
// a Waker instead). All methods are loop-confined unless noted.
type Task struct {
	s       *Scheduler
	id      uint64
	fn      func(*Task)
	arg     any
	label   string
	err     error // sticky cancellation error (first Cancel wins)
	wakeErr error // what the pending park returns: nil (woken) or the cancel error
	state   State
	reason  Reason
	started bool // ran at least one slice
	killed  bool // Close is unwinding it
	// goexited: the task called runtime.Goexit and its coroutine switched back to the
	// loop from the middle of the Goexit's unwinding (see Task.goexit).
	goexited bool
	// timed: the task's sleep timer ends the current park with ErrTimeout (ParkTimeout and
	// the other timed waits), not with nil (Sleep).
	timed bool
	// ended: a chain (see Task.Chain) accounted for the task's end and found no task to
	// follow; resume only recycles the struct.
	ended bool

	chain    ChainFunc // set by Chain: what runs after the function returns
	chainArg any

	// The coroutine serving this task. It stays attached to the Task struct while the
	// struct sits in the idle pool, so one coroutine serves many tasks in turn.
	resume func() (struct{}, bool)
	stop   func()
	yield  func(struct{}) bool
	gid    uint64 // the coroutine's goroutine id

	parkSeq uint64 // counts park attempts over the struct's whole life (never reset)

	rnext        *Task // ready queue or idle pool
	lprev, lnext *Task // list of live tasks
	wl           *waitList
	wprev, wnext *Task // waiter list of a Future or Event

	sleep timer // the task's Sleep timer, embedded so Sleep does not allocate

	// Accounting, in ns since the scheduler's epoch.
	spawnAt, readyAt, parkedAt, sliceStart, sliceEnd int64
	lastWait, lastRun                                int64
	st                                               Stats
	parked                                           time.Duration // st.ParkedTotal(), kept for Totals
}

// ID returns the task's id, unique for the scheduler's lifetime (ids are never reused, even
// though Task structs are). Loop-confined.
func (t *Task) ID() uint64 { return t.id }

// Arg returns the arg passed to Spawn. Loop-confined.
func (t *Task) Arg() any { return t.arg }

// State returns the task's state. Loop-confined.
func (t *Task) State() State { return t.state }

// Reason returns why the task is parked; meaningful only while State is Parked.
// Loop-confined.
func (t *Task) Reason() Reason { return t.reason }

// Err returns the error of the first Cancel, or nil if the task was not cancelled.
// Loop-confined.
func (t *Task) Err() error { return t.err }

// SetLabel attaches a label (a route pattern, say) for accounting. Loop-confined.
func (t *Task) SetLabel(l string) { t.label = l }

// Label returns the label set by SetLabel ("" by default). Loop-confined.
func (t *Task) Label() string { return t.label }

// Scheduler returns the scheduler the task runs on. Loop-confined.
func (t *Task) Scheduler() *Scheduler { return t.s }

// Goroutine returns the id of the goroutine that runs the task's coroutine (as printed in
// goroutine dumps, "goroutine N [...]"), or 0 before the task first ran. It lets a stats
// page or a stall detector find the task's stack in a full dump. Loop-confined.
func (t *Task) Goroutine() uint64 {
	if !t.started {
		return 0
	}
	return t.gid
}

// LastSlice returns how long the task waited in the ready queue before its latest slice
// and how long its latest finished slice lasted. Inside Hooks.OnRun, wait is the current
// slice's queue delay; inside Hooks.OnStop, run is the slice that just ended. Zero with
// Config.NoAccounting. Loop-confined.
func (t *Task) LastSlice() (wait, run time.Duration) {
	return time.Duration(t.lastWait), time.Duration(t.lastRun)
}

// SliceEnd returns the clock reading (nanoseconds since Epoch) at the end of the task's
// latest finished slice: inside Hooks.OnStop, the slice that just ended. Zero before the
// first slice ended and with Config.NoAccounting. Loop-confined.
func (t *Task) SliceEnd() int64 { return t.sliceEnd }

// Rounds returns how many slices the task has started, the running one included: code
// inside the task that sees it change knows it gave the loop up in between. Counted with
// Config.NoAccounting too. Loop-confined.
func (t *Task) Rounds() uint64 { return t.st.Rounds }

// Totals returns the task's total time on the loop, in the ready queue and parked (all
// reasons) up to its latest switch, without the interval in progress. It is the cheap read
// of Stats for a hook, where nothing is in progress: inside Hooks.OnStop with state Done
// they are the task's final figures. Loop-confined.
func (t *Task) Totals() (onLoop, queueDelay, parked time.Duration) {
	return t.st.OnLoop, t.st.QueueDelay, t.parked
}

// Stats returns the task's counters, including the interval in progress: the running slice
// so far when called from inside the task, the current park or queue wait otherwise.
// Loop-confined.
func (t *Task) Stats() Stats {
	if !t.s.acct {
		return t.st
	}
	return t.StatsAt(t.s.clock())
}

// StatsAt is Stats with the clock reading now supplied by the caller (nanoseconds since
// Epoch, on the monotonic clock), for a caller that has just read the clock itself.
// Loop-confined.
func (t *Task) StatsAt(now int64) Stats {
	st := t.st
	s := t.s
	if !s.acct {
		return st
	}
	switch t.state {
	case Running:
		d := time.Duration(now - t.sliceStart)
		st.OnLoop += d
		st.MaxSlice = max(st.MaxSlice, d)
	case Parked:
		st.Parked[t.reason] += time.Duration(now - t.parkedAt)
	case Ready:
		st.QueueDelay += time.Duration(now - t.readyAt)
	}
	st.Spawned = s.base.Add(time.Duration(t.spawnAt))
	return st
}

// Park suspends the task until Wake or Cancel. It returns nil when woken by Wake (or a
// Waker), and the cancel error when woken by Cancel. If the task was already cancelled, it
// returns the cancel error at once without parking. Task only: it panics if called from
// anywhere but the task's own function.
func (t *Task) Park(r Reason) error {
	t.mustRun("Park")
	if r >= NumReasons {
		panic(fmt.Sprintf("scheduler: Park with invalid reason %d", r))
	}
	if err := t.beginPark(); err != nil {
		return err
	}
	// parkNow, inlined by hand (the compiler does not): every frame on the task's stack
	// below the switch costs a mispredicted return when the loop switches back into it
	// (the loop's calls have replaced the CPU's predicted return addresses). Keep the two
	// in step.
	t.reason = r
	t.state = Parked
	t.suspend()
	err := t.wakeErr
	t.wakeErr = nil
	return err
}

// ParkTimeout is Park with a deadline, for long-polls: it parks the task (accounted under
// r) until Wake or Cancel, or until d has passed. It returns nil when woken, the cancel
// error when cancelled (at once, without parking, if the task already was), and ErrTimeout
// when d passed first. With d <= 0 it does not park: it returns the cancel error if any,
// else ErrTimeout, like a poll that finds nothing. A wake that comes first stops the
// deadline, so it never ends a later park. It does not allocate: the deadline uses the
// task's own timer (the one Sleep uses). Task only.
func (t *Task) ParkTimeout(r Reason, d time.Duration) error {
	t.mustRun("ParkTimeout")
	if r >= NumReasons {
		panic(fmt.Sprintf("scheduler: ParkTimeout with invalid reason %d", r))
	}
	if err := t.beginPark(); err != nil {
		return err
	}
	if d <= 0 {
		return ErrTimeout
	}
	return t.parkUntil(r, t.s.deadline(d))
}

// ErrTimeout is what the timed waits (Task.ParkTimeout, Future.AwaitTimeout,
// Event.WaitTimeout) return when their time is up before they were woken.
var ErrTimeout = errors.New("scheduler: wait timed out")

// deadline returns the clock reading d from now, saturated rather than overflowing.
func (s *Scheduler) deadline(d time.Duration) int64 {
	now := s.clock()
	if int64(d) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(d)
}

// parkUntil parks the running task (beginPark done) with reason r until woken or until the
// clock reaches when; then it returns ErrTimeout.
func (t *Task) parkUntil(r Reason, when int64) error {
	t.sleep.when = when
	t.timed = true
	t.s.addTimer(&t.sleep, -1)
	err := t.parkNow(r)
	t.timed = false
	return err
}

// Sleep parks the task (ReasonSleep) until d has passed or the task is cancelled, and
// returns nil or the cancel error. If the task was already cancelled it returns the error at
// once. Wake also ends a Sleep early (it then returns nil). With d <= 0 it behaves like
// Yield and returns Err(). Task only.
func (t *Task) Sleep(d time.Duration) error {
	t.mustRun("Sleep")
	if d <= 0 {
		if t.err != nil {
			return t.err
		}
		t.Yield()
		return t.err
	}
	return t.sleepUntil(t.s.clock() + int64(d))
}

// sleepUntil parks until the scheduler clock reaches when.
func (t *Task) sleepUntil(when int64) error {
	if err := t.beginPark(); err != nil {
		return err
	}
	t.sleep.when = when
	t.s.addTimer(&t.sleep, -1)
	return t.parkNow(ReasonSleep)
}

// Yield puts the task at the back of the ready queue and lets the loop run the others and
// poll I/O before the task continues (like asyncio.sleep(0)). A cancelled task still
// yields. Task only.
func (t *Task) Yield() {
	t.mustRun("Yield")
	if t.killed {
		panic(errUnwind)
	}
	t.state = Ready
	t.suspend()
}

// Waker returns a handle that wakes this task's current park if it is parked now, or else
// its next park, and nothing else: Waker.Wake is a no-op once that park is over or the task
// has finished. Get it right before the Park it is for and hand it to the waking side.
// Loop-confined.
func (t *Task) Waker() Waker {
	seq := t.parkSeq + 1
	if t.state == Parked {
		seq = t.parkSeq
	}
	return Waker{t: t, id: t.id, seq: seq}
}

// Ref returns a reference to the task that stays safe to hold after the task finished.
// Loop-confined.
func (t *Task) Ref() Ref { return Ref{t: t, id: t.id} }

// Waker wakes one specific park of one specific task (see Task.Waker). The zero Waker wakes
// nothing. Loop-confined.
type Waker struct {
	t   *Task
	id  uint64
	seq uint64
}

// Wake wakes the park the Waker was made for, if the task is still in it, and reports
// whether it did. Loop-confined.
func (w Waker) Wake() bool {
	t := w.t
	if t == nil || t.id != w.id || t.parkSeq != w.seq || t.state != Parked {
		return false
	}
	t.s.wake(t, nil, -1)
	return true
}

// WakeAt is Wake for a loop that already holds a clock reading (Scheduler.Now), such as
// the one it took at the start of its turn: the task counts as ready since now, which
// saves the clock read Wake takes when accounting is on. now must not be later than this
// call; a reading taken before the park began counts as the park's start (no time
// parked). Without accounting now is ignored. Loop-confined.
func (w Waker) WakeAt(now int64) bool {
	t := w.t
	if t == nil || t.id != w.id || t.parkSeq != w.seq || t.state != Parked {
		return false
	}
	now = max(now, t.parkedAt)
	t.s.wake(t, nil, now)
	return true
}

// Ref is a reference to a task that can be kept past the task's end. The zero Ref refers
// to no task. Loop-confined.
type Ref struct {
	t  *Task
	id uint64
}

// Task returns the task, or nil if it has finished (its struct may already serve another
// task). Loop-confined.
func (r Ref) Task() *Task {
	if r.t == nil || r.t.id != r.id || r.t.state == Done {
		return nil
	}
	return r.t
}

// ID returns the referenced task's id (0 for the zero Ref). Any goroutine.
func (r Ref) ID() uint64 { return r.id }

// mustRun panics unless t is the running task.
func (t *Task) mustRun(op string) {
	if t.s.cur != t {
		t.misuse(op)
	}
}

func (t *Task) misuse(op string) {
	if cur := t.s.cur; cur != nil {
		panic(fmt.Sprintf("scheduler: Task.%s on task %d called from task %d: only a task may park or yield itself", op, t.id, cur.id))
	}
	panic(fmt.Sprintf("scheduler: Task.%s on task %d called from outside the task (state %s): only the task's own function may park or yield it", op, t.id, t.state))
}

// beginPark counts a park attempt and reports whether the task may park.
func (t *Task) beginPark() error {
	t.parkSeq++
	if t.killed {
		panic(errUnwind)
	}
	return t.err
}

// parkNow suspends the running task as Parked with reason r and returns how it was woken.
func (t *Task) parkNow(r Reason) error {
	t.reason = r
	t.state = Parked
	t.suspend()
	err := t.wakeErr
	t.wakeErr = nil
	return err
}

// suspend switches from the task back to the loop.
func (t *Task) suspend() {
	if !t.yield(struct{}{}) || t.killed {
		panic(errUnwind)
	}
}

// body is the coroutine: it runs one task after another, switching back to the loop after
// each (state Done). It returns when the coroutine is stopped.
func (t *Task) body(yield func(struct{}) bool) {
	t.yield = yield
	t.gid = goroutineID()
	t.s.addGID(t.gid)
	defer t.s.dropGID(t.gid)
	for {
		t.call()
		t.state = Done
		if t.chain != nil && t.s.chain(t) {
			continue // t is the next task now, running: no switch to the loop
		}
		if !yield(struct{}{}) {
			return
		}
	}
}

// call runs the task's function, recovering a panic inside the coroutine so that the
// coroutine stays usable, and hands a runtime.Goexit to goexit.
func (t *Task) call() {
	ok := false
	defer func() {
		if ok {
			return
		}
		t.chain, t.chainArg = nil, nil // a chain follows only a function that returned
		switch v := recover(); {
		case v == nil:
			// The goroutine is in runtime.Goexit (called by the function, or by one of its
			// deferred functions, possibly while a panic unwound it): every deferred
			// function of the task has run. One defer serves both cases, so a task that
			// returns pays for one.
			t.goexit()
		case v == any(errUnwind):
			// Close unwinding the task: silent.
		default:
			t.s.reportPanic(t, v, debug.Stack())
		}
	}()
	t.fn(t)
	ok = true
}

// goexit runs on the task's coroutine while runtime.Goexit unwinds it (the function neither
// returned nor panicked). Goexit cannot be stopped, and iter.Pull would re-raise it on the
// goroutine that resumes the coroutine next, which must not be the loop. So the task ends
// here as if it had panicked with ErrGoexit, and the coroutine switches back to the loop
// marked goexited, with its unwinding unfinished. The loop detaches the coroutine from the
// Task and finishes it from a throwaway goroutine (see Scheduler.dropCoroutine); if the
// loop is locked to its thread it never resumes it, and the coroutine stays parked here.
func (t *Task) goexit() {
	t.s.reportPanic(t, ErrGoexit, debug.Stack())
	t.state = Done
	t.goexited = true
	yield := t.yield
	// After this switch the Task belongs to the loop again (and may serve another task):
	// nothing below may touch it.
	yield(struct{}{})
}

// ChainFunc picks the task that follows a finished one on its coroutine (see Task.Chain).
// It receives the arg given to Chain and returns the next task's function and arg and the
// clock reading (nanoseconds since Epoch) since which that task counts as ready, or a nil
// function for none. It runs on the loop (on the finished task's coroutine, with no task
// running: Scheduler.Current is nil) and may do what loop-confined code may, except run
// tasks (SpawnNow, Run) or park; a panic in it reaches the caller of the SpawnNow or Run
// that ran the finished task, as a panic in the loop's own code would.
type ChainFunc func(arg any) (fn func(t *Task), next any, ready int64)

// Chain asks that, once t's function has returned, pick(arg) choose a task to run next on
// the same coroutine at once, without a switch back to the loop: a loop that serves a
// batch of short requests pays the coroutine switch once per batch rather than once per
// request. Call it as the last thing the function does; the latest call counts, and a
// function that panics or calls runtime.Goexit chains nothing.
//
// When the function returns, t ends as it would otherwise (its slice ends with a clock
// reading, Hooks.OnStop reports it Done, it leaves the live tasks and the *Task may not
// be used any more); then pick runs. The task it names is spawned as by SpawnNowAt: a new
// task (new id, its own Stats), Ready since the reading pick returned and Running from the
// end of t's slice (or from that reading, if later), so the time pick took counts as the
// new task's time on the loop. The new task runs on t's struct and coroutine, so its *Task
// may equal t. If it returns having called Chain in its turn, the chain goes on. The
// SpawnNow, SpawnNowAt or Run call that resumed t returns once a task of the chain parks
// or yields, or a function returns without a successor, with the clock reading at the end
// of that last slice.
//
// Task only.
func (t *Task) Chain(pick ChainFunc, arg any) {
	t.mustRun("Chain")
	t.chain, t.chainArg = pick, arg
}

// unwindError is the panic value Close uses to unwind parked tasks.
type unwindError struct{}

func (*unwindError) Error() string {
	return "scheduler: task unwound by Scheduler.Close (do not recover this panic)"
}

var errUnwind error = &unwindError{}

// ErrGoexit is the value Config.OnPanic receives (with the stack of the goroutine that
// called it) when a task's function called runtime.Goexit (directly or through testing's
// FailNow, Fatal, SkipNow), or one of its deferred functions did. The task ends as if it
// had panicked with it: its deferred functions have run, it is Done, and the loop goes on.
// A Goexit during a panic supersedes the panic: OnPanic then receives ErrGoexit only. For an Every task this ends the
// task (unlike a panic in a tick, which only ends that tick).
var ErrGoexit = errors.New("scheduler: task called runtime.Goexit")
