package loop

import (
	"sync"
	"time"

	"github.com/batonrt/baton/internal/scheduler"
)

// Waiter is what may wait on a Future or a Cond: a *Ctx or a *Task.
type Waiter interface {
	task() *Task
}

// task returns the task itself; it lets Future and Cond accept both *Task and *Ctx.
func (t *Task) task() *Task { return t }

// signal is a one-shot condition that loop tasks and goroutines wait on. Setting it wakes
// goroutines through a channel and loop tasks through the door, so it may be set from any
// goroutine. Safe for concurrent use.
type signal struct {
	srv    *Server
	mu     sync.Mutex
	set    bool              // guarded by mu
	ch     chan struct{}     // guarded by mu; made on first goroutine wait, closed when set
	wakers []scheduler.Waker // loop tasks parked on it; guarded by mu
}

// fire sets the signal, reporting whether this call set it. store, if not nil, runs under
// the lock just before, so waiters that see the signal set see what it stored.
func (g *signal) fire(store func()) bool {
	g.mu.Lock()
	if g.set {
		g.mu.Unlock()
		return false
	}
	if store != nil {
		store()
	}
	g.set = true
	if g.ch != nil {
		close(g.ch)
	}
	wakers := g.wakers
	g.wakers = nil
	g.mu.Unlock()
	if len(wakers) > 0 {
		// Wakers are loop-confined: wake them on the loop, from wherever fire was called.
		_ = g.srv.door.post(func() {
			for _, wk := range wakers {
				wk.Wake()
			}
		})
	}
	return true
}

func (g *signal) isSet() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.set
}

// registerWaker adds wk to the wakers unless the signal is set, which it reports.
func (g *signal) registerWaker(wk scheduler.Waker) (set bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.set {
		return true
	}
	g.wakers = append(g.wakers, wk)
	return false
}

// channel returns a channel closed when the signal is set.
func (g *signal) channel() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
		if g.set {
			close(g.ch)
		}
	}
	return g.ch
}

// Future is a value that one task, posted function or goroutine resolves and tasks await
// without blocking the loop: a matchmaking request parks until a match is made.
//
// A Future is safe for concurrent use in both modes: Resolve may be called from any
// goroutine (waiters on the loop are woken through the door, as Loop.Post would), and
// any task, request handler or goroutine-backed handler, may Await it.
type Future[T any] struct {
	sig signal
	v   T     // written once before sig is set; read-only afterwards
	err error // likewise
}

// NewFuture returns an unresolved Future for tasks of s. Safe for concurrent use.
func NewFuture[T any](l *Loop) *Future[T] {
	s := l.srv
	return &Future[T]{sig: signal{srv: s}}
}

// Resolve sets the result and wakes every waiter. Only the first call counts; it reports
// whether this call was it. Safe for concurrent use.
func (f *Future[T]) Resolve(v T, err error) bool {
	return f.sig.fire(func() { f.v, f.err = v, err })
}

// Await waits until f is resolved and returns the result, or returns the task's
// cancellation error first (context.Canceled when the client went away), or, with d > 0,
// ErrTimeout once d has passed (a long poll's bound); d <= 0 waits without a bound. A task
// on the loop parks; a multi-thread handler blocks its goroutine. Call it from w's own
// task.
func (f *Future[T]) Await(w Waiter, d time.Duration) (T, error) {
	t := w.task()
	if err := t.ops.park(t, scheduler.ReasonWait, d, &f.sig); err != nil {
		var zero T
		return zero, err
	}
	f.sig.mu.Lock() // pairs with Resolve's write under mu
	v, err := f.v, f.err
	f.sig.mu.Unlock()
	return v, err
}

// Done reports whether f has been resolved. Safe for concurrent use.
func (f *Future[T]) Done() bool { return f.sig.isSet() }
