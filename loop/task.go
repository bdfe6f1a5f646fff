package loop

import (
	"context"
	"errors"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/scheduler"
	"github.com/batonrt/baton/offload"
)

// ErrTimeout is returned by the waits given a bound (Future.Await, Cond.Wait,
// RawConn.Wait) when it passes first.
var ErrTimeout = errors.New("loop: wait timed out")

// Task is the handle of the running task: a request's (embedded in Ctx) or a background
// task's (from Loop.Go or Loop.Every). Call its methods only from the task it belongs
// to, and not after that task's function has returned.
//
// In single-thread mode a task is a coroutine on the loop and parks without blocking the
// thread. In multi-thread mode (Config.MultiThread) a request's task is an ordinary
// goroutine and the same methods block that goroutine instead; background tasks always run
// on the loop.
type Task struct {
	srv  *Server
	ops  taskOps         // how this task parks: loopTask or *gtask
	t    *scheduler.Task // a task on the loop
	g    *gtask          // a multi-thread request handler
	c    *Ctx            // the request, for a request's task; nil for a background task
	name string          // a background task's name; requests use their route

	ctx       context.Context // created on first use (loop) or at start (goroutine)
	cancelCtx context.CancelCauseFunc
	err       error    // loop task: why it was cancelled, nil while it is not
	off       *offPark // loop task: its offloaded calls' park, made once

	cpu      time.Duration // loop-thread CPU over its slices (Config.CPUClock)
	cpuStart time.Duration

	suspendFn func(offload.Wait) (func(), func() error) // t.suspend, made once: no allocation per offloaded call

	ends []*endHook // OnEnd hooks, run on the loop when the task ends; loop-confined
}

// endHook is one OnEnd registration; cancel clears fn.
type endHook struct{ fn func() }

// taskOps is the seam between the two ways a task runs. loopTask parks a coroutine on the
// loop through the scheduler; *gtask blocks a goroutine (multi-thread request handlers).
// Everything a Task does that depends on the mode goes through it.
type taskOps interface {
	// park waits with reason r until wake is signalled, d passes (d > 0: then it returns
	// ErrTimeout) or the task is cancelled (its cause).
	park(t *Task, r scheduler.Reason, d time.Duration, wake *signal) error
	sleep(t *Task, d time.Duration) error
	yield(t *Task)
	id(t *Task) uint64
	err(t *Task) error
	suspend(t *Task, reason scheduler.Reason) (resume func(), park func() error)
}

// Sleep pauses the task for d while others run. It returns nil after d, or the task's
// cancellation error (context.Canceled when the client went away) as soon as the task is
// cancelled. Sleep(0) (any d <= 0) yields: every other ready task and the loop's pending
// I/O run before this task continues, and it returns the task's cancellation error, if
// any, once they have (a cancelled task yields too). Call it between steps of long CPU
// work, and stop on an error. In multi-thread mode it yields the goroutine's processor.
func (t *Task) Sleep(d time.Duration) error { return t.ops.sleep(t, d) }

// ID returns the task's id, unique within the server's lifetime.
func (t *Task) ID() uint64 { return t.ops.id(t) }

// OnLoop runs fn on the task's loop and returns once it has run: at once for a task that
// runs on the loop (every task in single-thread mode, and background tasks in both), and
// through the loop's door, waiting for it, from a multi-thread request handler. fn may
// touch the loop's confined state (a ratelimit.Limiter, a room); it must not park. It
// returns without running fn when the loop stopped first. Call it from the task.
func (t *Task) OnLoop(fn func()) {
	if t.g == nil {
		fn()
		return
	}
	t.srv.mode.onLoop(t.c, fn)
}

// OnEnd arranges for fn to run on the loop when the task ends: its function has returned
// (or was unwound at the final stop) and before its Context is cancelled. It is how a
// feature keeps a set of tasks (a room's members) without the engine knowing it: fn runs
// once, in registration order with the task's other hooks, and must not park. cancel
// removes the hook (fn then never runs); ok is false, and nothing is registered, when the
// task is not running (not started, or ended). Loop-confined: a task of this loop, from
// the loop (a multi-thread handler's task included: its end is recorded on the loop).
func (t *Task) OnEnd(fn func()) (cancel func(), ok bool) {
	if t.t == nil && t.g == nil {
		return func() {}, false
	}
	h := &endHook{fn: fn}
	t.ends = append(t.ends, h)
	return func() {
		h.fn = nil
		for i, x := range t.ends {
			if x == h {
				t.ends = append(t.ends[:i], t.ends[i+1:]...)
				break
			}
		}
	}, true
}

// Cancel cancels the task with cause: its parks (Sleep, Await, offloaded calls) return
// cause at once and its Context is cancelled with it, so it can return and run its
// deferred functions. The first cause sticks; cancelling an ended task does nothing. A
// feature that owns tasks (a room stopping its members) uses it. Loop-confined.
func (t *Task) Cancel(cause error) {
	if t.t == nil && t.g == nil {
		return
	}
	t.cancel(cause)
}

// Totals returns the task's figures so far: time running (on the loop, or a multi-thread
// handler's stretches between blocking calls), time waiting to run, and time parked. Zero
// with Config.NoAccounting. Cheaper than Stats: no allocation. Loop-confined.
func (t *Task) Totals() (onLoop, queue, parked time.Duration) {
	switch {
	case t.t != nil:
		return t.t.Totals()
	case t.g != nil:
		st := t.g.stats(t)
		return st.OnLoop, st.QueueDelay, st.ParkedTotal()
	}
	return 0, 0, 0
}

// Contain runs fn on the task, containing a panic the way the loop contains a background
// task's: logged with its stack (rate-limited) and counted in the server's panics, and
// Contain returns true. A feature that runs application callbacks on its own task (a
// room's tick) keeps going after one panics. At the final stop the task's unwinding is
// not contained. From the task itself.
func (t *Task) Contain(fn func()) (panicked bool) {
	s := t.srv
	defer func() {
		if v := recover(); v != nil {
			if s.life.load() >= stateStopping {
				panic(v) // the scheduler is unwinding the task: let it
			}
			panicked = true
			s.onTaskPanic(t.t, v, debug.Stack())
		}
	}()
	fn()
	return false
}

// Err returns why the task was cancelled (context.Canceled when its client disconnected,
// context.DeadlineExceeded when its handler deadline passed, context.Canceled too when its
// TaskHandle stopped it), or nil.
func (t *Task) Err() error { return t.ops.err(t) }

// Context returns a context cancelled when the task is cancelled (its client disconnected,
// its deadline passed, it was stopped, or the server stopped) and, for a request, when its
// handler returns. A request's context carries its values (Ctx.SetValue) and is the one a
// middleware set with Ctx.SetContext, so context-based libraries (tracing, slog handlers)
// and offloaded functions see them. Pass it to code run off the loop (offloaded calls); Sleep and Await
// already return early.
func (t *Task) Context() context.Context {
	if t.ctx == nil {
		t.ctx, t.cancelCtx = context.WithCancelCause(t.srv.baseCtx)
		if t.err != nil {
			t.cancelCtx(t.err)
		}
		if t.c != nil {
			for _, v := range t.c.values { // the request's values, set before the context was made
				t.ctx = context.WithValue(t.ctx, v.key, v.val)
			}
		}
	}
	return t.ctx
}

// Stats returns the task's figures so far, as the stats pages show them: rounds (times
// scheduled), time on the loop, queue delay (the admission queue included), parked time by
// reason, CPU when measured, age, and for a request its route, method, path and status.
// In multi-thread mode a request's "slice" is a stretch between blocking calls of its
// goroutine, and OnLoop the wall time of those stretches.
func (t *Task) Stats() accounting.TaskSample {
	var smp accounting.TaskSample
	now := t.srv.nanotimeAny()
	if t.c != nil {
		t.srv.sample(t.c, &smp, now)
	} else {
		t.srv.sampleBackground(t.t, &smp, now)
	}
	return smp
}

func (t *Task) offloadKey() string {
	if t.c != nil {
		return t.c.pattern
	}
	return t.name
}

// OffloadHook lends the task to the offload package: offload.Do, offload.Copy and
// offload.Gate.Enter take a *Task or a *Ctx and park it through this hook (the server's
// pool, the route or task name as the lane key, and the task's park). Part of
// offload.Caller; besides the offload package, a feature that parks its task until another
// goroutine resumes it uses the hook's Suspend (loop/nethttp does, while a net/http
// handler runs). From the task.
func (t *Task) OffloadHook() offload.Hook {
	if t.suspendFn == nil {
		t.suspendFn = t.suspend
	}
	h := offload.Hook{Pool: t.srv.pool, Key: t.offloadKey(), Suspend: t.suspendFn}
	if t.g == nil && t.ctx == nil && t.err == nil {
		// The task's context is not made for the call: the function's context derives from
		// the server's, and cancel reaches it through the pool (offload.Hook.Base).
		h.Base = t.srv.baseCtx
	}
	return h
}

// suspend prepares one park for the offload package.
func (t *Task) suspend(why offload.Wait) (resume func(), park func() error) {
	reason := scheduler.ReasonOffload
	if why == offload.WaitToken {
		reason = scheduler.ReasonQueue
	}
	return t.ops.suspend(t, reason)
}

var (
	_ offload.Caller = (*Ctx)(nil)
	_ offload.Caller = (*Task)(nil)
)

// cancel records err, cancels the context if it exists and wakes the task if parked.
// Loop-confined.
func (t *Task) cancel(err error) {
	if t.g != nil {
		t.cancelCtx(err) // the context always exists for a goroutine; safe from the loop
		return
	}
	if t.err != nil {
		return
	}
	t.err = err
	if t.cancelCtx != nil {
		t.cancelCtx(err)
	}
	if t.off != nil { // it may wait in the pool with a context derived from Base
		if t.c != nil {
			t.srv.pool.CancelCaller(t.c, err)
		}
		t.srv.pool.CancelCaller(t, err)
	}
	if t.t != nil && t.srv.life.load() < stateStopping {
		t.srv.sched.Cancel(t.t, err)
	}
}

// release runs the OnEnd hooks and cancels the context at the end of the task.
func (t *Task) release() {
	if len(t.ends) > 0 {
		ends := t.ends
		t.ends = nil
		for _, h := range ends {
			if fn := h.fn; fn != nil {
				h.fn = nil
				fn()
			}
		}
	}
	if t.cancelCtx != nil {
		t.cancelCtx(context.Canceled)
	}
	t.ctx, t.cancelCtx, t.err, t.t, t.g = nil, nil, nil, nil, nil
	t.cpu, t.cpuStart = 0, 0
}

// idOrZero is the task id, or 0 for a request not started yet.
func (t *Task) idOrZero() uint64 {
	if t.t == nil && t.g == nil {
		return 0
	}
	return t.ID()
}

// offPark is the resume and park a loop task lends the offload pool, made once per Task (a
// request's Task is pooled with its Ctx) so that an offloaded call allocates none. One
// resume serves every park: it wakes the task's current offload park, so a late resume
// (from a call the task stopped waiting for) may wake a later one early, which the pool
// tolerates (see offload.Hook).
type offPark struct {
	mu       sync.Mutex
	wk       scheduler.Waker // guarded by mu: set on the loop, read by a pool worker's resume
	reason   scheduler.Reason
	resumeFn func()
	parkFn   func() error
}

// loopTask is taskOps for tasks on the loop: coroutines parked through the scheduler.
type loopTask struct{}

func (loopTask) park(t *Task, r scheduler.Reason, d time.Duration, wake *signal) error {
	bounded := d > 0
	for {
		if wake != nil && wake.registerWaker(t.t.Waker()) {
			return nil // already signalled
		}
		var err error
		if bounded {
			start := t.srv.nanotime()
			err = t.t.ParkTimeout(r, d)
			d -= time.Duration(t.srv.nanotime() - start)
		} else {
			err = t.t.Park(r)
		}
		switch {
		case errors.Is(err, scheduler.ErrTimeout):
			return ErrTimeout
		case err != nil:
			return err
		case wake == nil || wake.isSet():
			return nil
		case bounded && d <= 0: // woken without the signal and the bound is used up
			return ErrTimeout
		}
	}
}

func (loopTask) sleep(t *Task, d time.Duration) error {
	if d <= 0 {
		t.t.Yield() // even when cancelled: a loop of CPU work must not hold the loop
		return t.err
	}
	return t.t.Sleep(d)
}

func (loopTask) yield(t *Task)     { t.t.Yield() }
func (loopTask) id(t *Task) uint64 { return t.t.ID() }
func (loopTask) err(t *Task) error { return t.err }

func (loopTask) suspend(t *Task, reason scheduler.Reason) (resume func(), park func() error) {
	o := t.off
	if o == nil {
		o = &offPark{}
		o.resumeFn, o.parkFn = t.resumeOffload, t.parkOffload
		t.off = o
	}
	o.mu.Lock()
	o.wk = t.t.Waker()
	o.mu.Unlock()
	o.reason = reason
	return o.resumeFn, o.parkFn
}

// resumeOffload is offPark.resumeFn: it wakes the task's current offload park through the
// door. Any goroutine.
func (t *Task) resumeOffload() {
	o := t.off
	o.mu.Lock()
	wk := o.wk
	o.mu.Unlock()
	_ = t.srv.door.postWake(wk)
}

// parkOffload is offPark.parkFn. Task only.
func (t *Task) parkOffload() error { return t.t.Park(t.off.reason) }

// gtask is taskOps for a request handler running in its own goroutine (multi-thread
// mode). Its figures are written by that goroutine and read by others under mu.
type gtask struct {
	gid   uint64
	mu    sync.Mutex
	st    scheduler.Stats // guarded by mu
	start time.Time       // when the current stretch began; guarded by mu
}

var gtaskIDs atomic.Uint64

func newGtask(spawned time.Time) *gtask {
	g := &gtask{gid: 1<<63 | gtaskIDs.Add(1)} // top bit: never equal to a scheduler task id
	g.st.Spawned = spawned
	return g
}

// begin marks the start of a stretch of running.
func (g *gtask) begin(now time.Time) {
	g.mu.Lock()
	if g.st.Rounds == 0 {
		g.st.FirstRunDelay = now.Sub(g.st.Spawned)
		g.st.QueueDelay += g.st.FirstRunDelay
	}
	g.st.Rounds++
	g.start = now
	g.mu.Unlock()
}

// end closes the current stretch.
func (g *gtask) end(now time.Time) {
	g.mu.Lock()
	d := now.Sub(g.start)
	g.st.OnLoop += d
	g.st.MaxSlice = max(g.st.MaxSlice, d)
	if d > scheduler.DefaultSlowSlice {
		g.st.SlowSlices++
		g.st.SlowTime += d
	}
	g.start = time.Time{}
	g.mu.Unlock()
}

// block waits with reason r until d passes (d > 0; then it returns timeoutErr), wake is
// closed (non-nil), or ctx ends.
func (g *gtask) block(ctx context.Context, r scheduler.Reason, d time.Duration, wake <-chan struct{}, timeoutErr error) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	now := time.Now()
	g.end(now)
	var timeout <-chan time.Time
	if d > 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		timeout = tm.C
	}
	var err error
	select {
	case <-timeout:
		err = timeoutErr
	case <-wake:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	after := time.Now()
	g.mu.Lock()
	g.st.Parked[r] += after.Sub(now)
	g.mu.Unlock()
	g.begin(after)
	return err
}

func (g *gtask) park(t *Task, r scheduler.Reason, d time.Duration, wake *signal) error {
	var ch <-chan struct{}
	if wake != nil {
		ch = wake.channel()
	}
	return g.block(t.Context(), r, d, ch, ErrTimeout)
}

func (g *gtask) sleep(t *Task, d time.Duration) error {
	if d <= 0 {
		g.yield(t)
		return t.Err()
	}
	return g.block(t.Context(), scheduler.ReasonSleep, d, nil, nil)
}

func (g *gtask) yield(*Task) {
	g.end(time.Now())
	runtime.Gosched()
	g.begin(time.Now())
}

func (g *gtask) id(*Task) uint64 { return g.gid }

func (g *gtask) stats(*Task) scheduler.Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st
	if !g.start.IsZero() {
		d := time.Since(g.start)
		st.OnLoop += d
		st.MaxSlice = max(st.MaxSlice, d)
	}
	return st
}

func (g *gtask) err(t *Task) error {
	if t.ctx.Err() == nil {
		return nil
	}
	return context.Cause(t.ctx)
}

func (g *gtask) suspend(t *Task, reason scheduler.Reason) (resume func(), park func() error) {
	ch := make(chan struct{})
	var once sync.Once
	ctx := t.Context()
	return func() { once.Do(func() { close(ch) }) },
		func() error { return g.block(ctx, reason, 0, ch, nil) }
}
