package loop

// HoldDrain keeps a graceful shutdown from finishing until release is called: a Loop.Go
// task that flushes a write-behind buffer, or finishes a batch it has started, calls it
// when it starts (or when it sees Draining) and releases when its work is safely done.
// The drain then waits for it as it waits for requests in flight and rooms; the Shutdown
// context's deadline still forces the stop. release is idempotent (only its first call
// counts); a task should defer it, so a panic or an early return cannot hold the drain
// until the deadline.
//
// Loop-confined: call HoldDrain and release on the loop (a background task, a handler in
// single-thread mode, a room's tick, a function passed to Loop.Post). Holding before the
// drain begins is allowed and is how a task that must always finish its work says so; a
// hold counts from the call on (a Go task that had not started when the drain ended does
// not run: take the hold from Post or a handler when it must).
func (l *Loop) HoldDrain() (release func()) {
	s := l.srv
	s.drain.holds++
	released := false
	return func() {
		if released {
			return
		}
		released = true
		s.drain.holds--
		s.checkDrained()
	}
}
