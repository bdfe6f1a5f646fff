package loop

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/scheduler"
)

// Task is the handle of the running task: a request's (embedded in Ctx) or a background
// task's (from Server.Go or Server.Every). Call its methods only from the task it belongs
// to, and not after that task's function has returned.
//
// In single-thread mode a task is a coroutine on the loop and parks without blocking the
// thread. In multi-thread mode (Config.MultiThread) a request's task is an ordinary
// goroutine and the same methods block that goroutine instead.
type Task struct {
	srv *Server
	t   *scheduler.Task // single-thread mode
	g   *gtask          // multi-thread mode

	ctx       context.Context // created on first use (single-thread) or at start (multi-thread)
	cancelCtx context.CancelCauseFunc
	err       error // single-thread: why the task was cancelled, nil while it is not
}

// Sleep pauses the task for d while others run. It returns nil after d, or the task's
// cancellation error (context.Canceled when the client went away) as soon as the task is
// cancelled.
func (t *Task) Sleep(d time.Duration) error {
	if t.g != nil {
		if d <= 0 {
			t.g.yield()
			return t.Err()
		}
		return t.g.block(t.Context(), scheduler.ReasonSleep, d, nil)
	}
	return t.t.Sleep(d)
}

// Yield lets every other ready task and the loop's pending I/O run before this task
// continues: call it between steps of long CPU work. In multi-thread mode it yields the
// goroutine's processor.
func (t *Task) Yield() {
	if t.g != nil {
		t.g.yield()
		return
	}
	t.t.Yield()
}

// ID returns the task's id, unique within the server's lifetime.
func (t *Task) ID() uint64 {
	if t.g != nil {
		return t.g.id
	}
	return t.t.ID()
}

// Stats returns the task's scheduling figures so far, including the running slice.
// In multi-thread mode a "slice" is a stretch between blocking calls of the handler's
// goroutine, and OnLoop is the wall time of those stretches.
func (t *Task) Stats() scheduler.Stats {
	if t.g != nil {
		return t.g.snapshot()
	}
	return t.t.Stats()
}

// Server returns the server the task runs on.
func (t *Task) Server() *Server { return t.srv }

// Err returns why the task was cancelled (context.Canceled when its client disconnected,
// context.DeadlineExceeded when its handler deadline passed), or nil.
func (t *Task) Err() error {
	if t.g != nil {
		if t.ctx.Err() == nil {
			return nil
		}
		return context.Cause(t.ctx)
	}
	return t.err
}

// Context returns a context cancelled when the task is cancelled (its client disconnected,
// its deadline passed or the server stopped) and, for a request, when its handler returns.
// Pass it to code run off the loop (offloaded calls); Sleep and Await already return early.
func (t *Task) Context() context.Context {
	if t.ctx == nil {
		t.ctx, t.cancelCtx = context.WithCancelCause(t.srv.baseCtx)
		if t.err != nil {
			t.cancelCtx(t.err)
		}
	}
	return t.ctx
}

// cancel records err, cancels the context if it exists and wakes the task if parked.
// Loop-confined.
func (t *Task) cancel(err error) {
	if t.g != nil {
		t.cancelCtx(err) // the context always exists in multi-thread mode; safe from the loop
		return
	}
	if t.err != nil {
		return
	}
	t.err = err
	if t.cancelCtx != nil {
		t.cancelCtx(err)
	}
	if t.t != nil && !t.srv.schedDone {
		t.srv.sched.Cancel(t.t, err)
	}
}

// release cancels the context at the end of the task.
func (t *Task) release() {
	if t.cancelCtx != nil {
		t.cancelCtx(context.Canceled)
	}
	t.ctx, t.cancelCtx, t.err, t.t, t.g = nil, nil, nil, nil, nil
}

// park blocks the task for at most d (d <= 0: until woken) with reason r. The task must be
// woken by wake, Cancel or the timeout.
func (t *Task) parkFor(r scheduler.Reason, d time.Duration) error {
	if t.g != nil {
		return t.g.block(t.Context(), r, d, nil)
	}
	wk := t.t.Waker()
	tm := t.srv.sched.AfterFunc(d, func() { wk.Wake() })
	err := t.t.Park(r)
	tm.Stop()
	return err
}

// task returns the scheduler task; it lets Future and Event accept both *Task and *Ctx.
func (t *Task) task() *Task { return t }

// gtask is a request handler running in its own goroutine (multi-thread mode). Its figures
// are written by that goroutine and read by others under mu.
type gtask struct {
	id    uint64
	mu    sync.Mutex
	stats scheduler.Stats // guarded by mu
	start time.Time       // when the current stretch began; guarded by mu
}

var gtaskIDs atomic.Uint64

func newGtask(spawned time.Time) *gtask {
	g := &gtask{id: 1<<63 | gtaskIDs.Add(1)} // top bit: never equal to a scheduler task id
	g.stats.Spawned = spawned
	return g
}

// begin marks the start of a stretch of running.
func (g *gtask) begin(now time.Time) {
	g.mu.Lock()
	if g.stats.Rounds == 0 {
		g.stats.FirstRunDelay = now.Sub(g.stats.Spawned)
		g.stats.QueueDelay += g.stats.FirstRunDelay
	}
	g.stats.Rounds++
	g.start = now
	g.mu.Unlock()
}

// end closes the current stretch.
func (g *gtask) end(now time.Time) {
	g.mu.Lock()
	g.addRun(now.Sub(g.start))
	g.start = time.Time{}
	g.mu.Unlock()
}

func (g *gtask) addRun(d time.Duration) {
	g.stats.OnLoop += d
	if d > g.stats.MaxSlice {
		g.stats.MaxSlice = d
	}
	if d > scheduler.DefaultSlowSlice {
		g.stats.SlowSlices++
		g.stats.SlowTime += d
	}
}

// block waits with reason r until d passes (d > 0), wake is closed (non-nil), or ctx ends.
func (g *gtask) block(ctx context.Context, r scheduler.Reason, d time.Duration, wake <-chan struct{}) error {
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
	case <-wake:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	after := time.Now()
	g.mu.Lock()
	g.stats.Parked[r] += after.Sub(now)
	g.mu.Unlock()
	g.begin(after)
	return err
}

func (g *gtask) yield() {
	g.end(time.Now())
	runtime.Gosched()
	g.begin(time.Now())
}

func (g *gtask) snapshot() scheduler.Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stats
	if !g.start.IsZero() {
		d := time.Since(g.start)
		st.OnLoop += d
		st.MaxSlice = max(st.MaxSlice, d)
	}
	return st
}
