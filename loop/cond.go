package loop

import (
	"sync"
	"time"

	"github.com/batonrt/baton/internal/scheduler"
)

// Cond is a reusable broadcast signal: tasks Wait for the next Broadcast, which wakes every
// task waiting at that moment. It is what a long-poll for "the next tick" needs: a room's
// tick calls Broadcast after publishing its state, and handlers waiting for a state newer
// than the one they saw Wait again. Unlike a Future it needs no replacement after it
// fires, and a Broadcast with nobody waiting allocates nothing.
//
// Safe for concurrent use in both modes, like Future: Broadcast may be called from any
// goroutine (loop tasks are woken through the door, as Loop.Post would), and any task,
// request handler or goroutine-backed handler may Wait.
//
// A loop task that checks a condition and then Waits cannot miss a Broadcast in between
// (nothing else runs on the loop meanwhile). A goroutine (a multi-thread handler, or a
// Broadcast from a goroutine) can: read the state after Wait returns, and bound the wait
// (Wait's d) where a missed Broadcast must not cost more than d.
type Cond struct {
	srv    *Server
	mu     sync.Mutex
	cur    *signal // the generation the next Broadcast fires; guarded by mu
	waited bool    // a Wait took cur since it was made; guarded by mu
	n      uint64  // Broadcasts so far; guarded by mu
}

// NewCond returns a Cond for tasks of s. Safe for concurrent use.
func NewCond(l *Loop) *Cond { return &Cond{srv: l.srv, cur: &signal{srv: l.srv}} }

// Broadcast wakes every task waiting now; a later Wait waits for the next Broadcast. It
// does not allocate when nobody waits. Safe for concurrent use.
func (c *Cond) Broadcast() {
	c.mu.Lock()
	c.n++
	if !c.waited {
		c.mu.Unlock()
		return
	}
	g := c.cur
	c.cur, c.waited = &signal{srv: c.srv}, false
	c.mu.Unlock()
	g.fire(nil)
}

// broadcasts returns how many times Broadcast was called. Safe for concurrent use.
func (c *Cond) broadcasts() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Wait waits for the next Broadcast, or returns the task's cancellation error, or, with
// d > 0, ErrTimeout once d has passed; d <= 0 waits without a bound. Call it from w's own
// task.
func (c *Cond) Wait(w Waiter, d time.Duration) error {
	c.mu.Lock()
	g := c.cur
	c.waited = true
	c.mu.Unlock()
	t := w.task()
	return t.ops.park(t, scheduler.ReasonWait, d, g)
}
