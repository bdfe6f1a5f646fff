package loop

import "github.com/batonrt/baton/scheduler"

// Waiter is what may wait on a Future or Event: a *Ctx or a *Task.
type Waiter interface {
	task() *scheduler.Task
}

// Future is a value that one task (or a posted function) resolves and others await, on the
// loop, without blocking the thread: a matchmaking request parks until a match is made.
// Loop-confined; to resolve one from another goroutine, Post a function that does.
type Future[T any] struct{ f *scheduler.Future[T] }

// NewFuture returns an unresolved Future on s's loop. Loop-confined.
func NewFuture[T any](s *Server) *Future[T] {
	return &Future[T]{f: scheduler.NewFuture[T](s.sched)}
}

// Resolve sets the result and wakes every waiter. Only the first call counts; it reports
// whether this call was it.
func (f *Future[T]) Resolve(v T, err error) bool { return f.f.Resolve(v, err) }

// Await parks w's task until f is resolved and returns the result, or returns the task's
// cancellation error first (context.Canceled when the client went away).
func (f *Future[T]) Await(w Waiter) (T, error) { return f.f.Await(w.task()) }

// Done reports whether f has been resolved.
func (f *Future[T]) Done() bool { return f.f.Done() }

// Event is a one-shot signal on the loop: tasks Wait until someone calls Set.
// Loop-confined.
type Event struct{ e *scheduler.Event }

// NewEvent returns an unset Event on s's loop. Loop-confined.
func NewEvent(s *Server) *Event { return &Event{e: scheduler.NewEvent(s.sched)} }

// Set marks the event and wakes every waiter; later calls do nothing.
func (e *Event) Set() { e.e.Set() }

// IsSet reports whether Set was called.
func (e *Event) IsSet() bool { return e.e.IsSet() }

// Wait parks w's task until the event is set, or returns its cancellation error.
func (e *Event) Wait(w Waiter) error { return e.e.Wait(w.task()) }
