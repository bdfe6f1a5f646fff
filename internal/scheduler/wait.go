package scheduler

import "time"

// waitList is an intrusive list of parked tasks (a task waits on at most one list).
type waitList struct{ head, tail *Task }

func (l *waitList) push(t *Task) {
	t.wl = l
	t.wprev, t.wnext = l.tail, nil
	if l.tail != nil {
		l.tail.wnext = t
	} else {
		l.head = t
	}
	l.tail = t
}

func (l *waitList) remove(t *Task) {
	if t.wprev != nil {
		t.wprev.wnext = t.wnext
	} else {
		l.head = t.wnext
	}
	if t.wnext != nil {
		t.wnext.wprev = t.wprev
	} else {
		l.tail = t.wprev
	}
	t.wl, t.wprev, t.wnext = nil, nil, nil
}

// wakeAll wakes every waiter (in the order they started waiting).
func (l *waitList) wakeAll() {
	if l.head == nil {
		return
	}
	s := l.head.s
	now := int64(-1)
	if s.acct {
		now = s.clock()
	}
	for t := l.head; t != nil; t = l.head {
		s.wake(t, nil, now) // removes t from l
	}
}

// wait parks t (ReasonWait) on l until done() holds; it returns the cancel error if t is
// cancelled first.
func (l *waitList) wait(t *Task, done func() bool) error {
	for !done() {
		if err := t.beginPark(); err != nil {
			return err
		}
		l.push(t)
		if err := t.parkNow(ReasonWait); err != nil {
			return err
		}
	}
	return nil
}

// waitTimeout is wait with a deadline d from now: it returns ErrTimeout once d has passed
// with done() still false (at once if d <= 0). A plain Wake before that parks t again
// until the same deadline.
func (l *waitList) waitTimeout(t *Task, done func() bool, d time.Duration) error {
	if done() {
		return nil
	}
	if d <= 0 {
		if err := t.beginPark(); err != nil {
			return err
		}
		return ErrTimeout
	}
	when := t.s.deadline(d)
	for !done() {
		if err := t.beginPark(); err != nil {
			return err
		}
		l.push(t)
		if err := t.parkUntil(ReasonWait, when); err != nil {
			return err
		}
	}
	return nil
}

// Future is a value that one side resolves and tasks wait for, on the loop. It is
// loop-confined: to resolve it from another goroutine, Post a function that calls Resolve.
type Future[T any] struct {
	s       *Scheduler
	done    bool
	v       T
	err     error
	waiters waitList
}

// NewFuture returns an unresolved future. Loop-confined.
func NewFuture[T any](s *Scheduler) *Future[T] { return &Future[T]{s: s} }

// Resolve sets the result and wakes every waiter. The first call wins and returns true;
// later calls change nothing and return false. Loop-confined.
func (f *Future[T]) Resolve(v T, err error) bool {
	if f.done {
		return false
	}
	f.done, f.v, f.err = true, v, err
	f.waiters.wakeAll()
	return true
}

// Await returns the result, parking t (ReasonWait) until the future is resolved. If t is
// cancelled before that, it returns the zero value and the cancel error (a result already
// there is returned even to a cancelled task). Task only: t must be the calling task.
func (f *Future[T]) Await(t *Task) (T, error) {
	t.mustRun("Await")
	if f.s != nil && f.s != t.s {
		panic("scheduler: Future.Await from a task of another scheduler")
	}
	if err := f.waiters.wait(t, f.isDone); err != nil {
		var zero T
		return zero, err
	}
	return f.v, f.err
}

// AwaitTimeout is Await with a deadline: it returns the zero value and ErrTimeout if the
// future is not resolved within d (at once, without parking, if d <= 0), and the cancel
// error if t is cancelled first. A result already there is returned whatever d. Parked
// time counts as ReasonWait. Task only.
func (f *Future[T]) AwaitTimeout(t *Task, d time.Duration) (T, error) {
	t.mustRun("AwaitTimeout")
	if f.s != nil && f.s != t.s {
		panic("scheduler: Future.AwaitTimeout from a task of another scheduler")
	}
	if err := f.waiters.waitTimeout(t, f.isDone, d); err != nil {
		var zero T
		return zero, err
	}
	return f.v, f.err
}

func (f *Future[T]) isDone() bool { return f.done }

// Done reports whether the future is resolved. Loop-confined.
func (f *Future[T]) Done() bool { return f.done }

// Result returns the result and true if the future is resolved, without parking.
// Loop-confined.
func (f *Future[T]) Result() (v T, err error, ok bool) { return f.v, f.err, f.done }

// Event is a flag tasks can wait for, on the loop. Once set it stays set. It is
// loop-confined: to set it from another goroutine, Post a function that calls Set.
type Event struct {
	s       *Scheduler
	set     bool
	waiters waitList
}

// NewEvent returns an unset event. Loop-confined.
func NewEvent(s *Scheduler) *Event { return &Event{s: s} }

// Set sets the event and wakes every waiter. Setting a set event does nothing.
// Loop-confined.
func (e *Event) Set() {
	if e.set {
		return
	}
	e.set = true
	e.waiters.wakeAll()
}

// IsSet reports whether the event is set. Loop-confined.
func (e *Event) IsSet() bool { return e.set }

// Wait parks t (ReasonWait) until the event is set and returns nil, or returns the cancel
// error if t is cancelled first (nil if the event is already set). Task only.
func (e *Event) Wait(t *Task) error {
	t.mustRun("Wait")
	if e.s != nil && e.s != t.s {
		panic("scheduler: Event.Wait from a task of another scheduler")
	}
	return e.waiters.wait(t, e.isSet)
}

// WaitTimeout is Wait with a deadline: it returns nil once the event is set, ErrTimeout if
// it is not set within d (at once, without parking, if d <= 0), or the cancel error if t
// is cancelled first. Parked time counts as ReasonWait. Task only.
func (e *Event) WaitTimeout(t *Task, d time.Duration) error {
	t.mustRun("WaitTimeout")
	if e.s != nil && e.s != t.s {
		panic("scheduler: Event.WaitTimeout from a task of another scheduler")
	}
	return e.waiters.waitTimeout(t, e.isSet, d)
}

func (e *Event) isSet() bool { return e.set }
