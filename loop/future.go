package loop

import (
	"sync"

	"github.com/batonrt/baton/scheduler"
)

// Waiter is what may wait on a Future or Event: a *Ctx or a *Task.
type Waiter interface {
	task() *Task
}

// Future is a value that one task (or a posted function) resolves and others await without
// blocking the loop: a matchmaking request parks until a match is made.
//
// In single-thread mode a Future is loop-confined: resolve it from handlers, background
// tasks or posted functions (from another goroutine, Post a function that resolves it). In
// multi-thread mode it is safe for concurrent use.
type Future[T any] struct {
	f *scheduler.Future[T] // single-thread mode

	// Multi-thread mode.
	srv      *Server
	mu       sync.Mutex
	done     chan struct{}     // closed on Resolve
	v        T                 // guarded by mu until done is closed, read-only afterwards
	err      error             // likewise
	resolved bool              // guarded by mu
	wakers   []scheduler.Waker // loop tasks (Go, Every) parked on it; guarded by mu
}

// NewFuture returns an unresolved Future for tasks of s. In single-thread mode it is
// loop-confined; in multi-thread mode any goroutine may call it.
func NewFuture[T any](s *Server) *Future[T] {
	if s.cfg.MultiThread {
		return &Future[T]{srv: s, done: make(chan struct{})}
	}
	return &Future[T]{f: scheduler.NewFuture[T](s.sched)}
}

// Resolve sets the result and wakes every waiter. Only the first call counts; it reports
// whether this call was it.
func (f *Future[T]) Resolve(v T, err error) bool {
	if f.f != nil {
		return f.f.Resolve(v, err)
	}
	f.mu.Lock()
	if f.resolved {
		f.mu.Unlock()
		return false
	}
	f.v, f.err, f.resolved = v, err, true
	close(f.done)
	wakers := f.wakers
	f.wakers = nil
	f.mu.Unlock()
	for _, wk := range wakers {
		_ = f.srv.Post(func() { wk.Wake() })
	}
	return true
}

// Await waits until f is resolved and returns the result, or returns the task's
// cancellation error first (context.Canceled when the client went away). A task on the
// loop parks; a multi-thread handler blocks its goroutine.
func (f *Future[T]) Await(w Waiter) (T, error) {
	if f.f != nil {
		return f.f.Await(w.task().t)
	}
	t := w.task()
	if t.g != nil {
		if err := t.g.block(t.Context(), scheduler.ReasonWait, 0, f.done); err != nil {
			var zero T
			return zero, err
		}
		return f.v, f.err
	}
	// A background task on the loop waiting on a multi-thread Future.
	for {
		f.mu.Lock()
		if f.resolved {
			f.mu.Unlock()
			return f.v, f.err
		}
		f.wakers = append(f.wakers, t.t.Waker())
		f.mu.Unlock()
		if err := t.t.Park(scheduler.ReasonWait); err != nil {
			var zero T
			return zero, err
		}
	}
}

// Done reports whether f has been resolved.
func (f *Future[T]) Done() bool {
	if f.f != nil {
		return f.f.Done()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resolved
}

// Event is a one-shot signal: tasks Wait until someone calls Set. Loop-confined in
// single-thread mode, safe for concurrent use in multi-thread mode, like Future.
type Event struct{ f *Future[struct{}] }

// NewEvent returns an unset Event for tasks of s.
func NewEvent(s *Server) *Event { return &Event{f: NewFuture[struct{}](s)} }

// Set marks the event and wakes every waiter; later calls do nothing.
func (e *Event) Set() { e.f.Resolve(struct{}{}, nil) }

// IsSet reports whether Set was called.
func (e *Event) IsSet() bool { return e.f.Done() }

// Wait waits until the event is set, or returns the task's cancellation error.
func (e *Event) Wait(w Waiter) error {
	_, err := e.f.Await(w)
	return err
}
