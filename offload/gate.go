package offload

import (
	"context"
	"sync"
	"time"

	"github.com/batonrt/baton/accounting"
)

// Gate is a named semaphore for a hot endpoint, independent of pool tokens: at most n
// holders at once. TryEnter never waits, so a handler that finds the gate full answers
// busy (429, or 503 with Retry-After) without taking or waiting for a pool token; Enter
// waits in a bounded FIFO queue, parked. Every successful TryEnter or Enter must be
// followed by exactly one Leave. All methods are safe for concurrent use.
type Gate struct {
	name     string
	n        int
	maxQueue int
	now      func() time.Time

	mu        sync.Mutex
	inUse     int
	q         gateList
	entered   uint64
	rejected  uint64
	queueFull uint64
	cancelled uint64
	nested    uint64
	busy      time.Duration // integral of inUse over time, for the mean hold time
	left      uint64
	lastAt    time.Time
	wait      hist
}

// gateWaiter is one Enter waiting in the queue. Guarded by Gate.mu.
type gateWaiter struct {
	granted    bool
	resume     func()
	enq        time.Time
	prev, next *gateWaiter
}

type gateList struct {
	head, tail *gateWaiter
	n          int
}

func (l *gateList) push(w *gateWaiter) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.n++
}

func (l *gateList) remove(w *gateWaiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.n--
}

// NewGate returns a gate named name (for stats) that admits n holders at once (n < 1
// counts as 1) and lets at most maxQueue callers wait in Enter (maxQueue <= 0: none, Enter
// fails at once like TryEnter). Any goroutine.
func NewGate(name string, n, maxQueue int) *Gate {
	g := &Gate{name: name, n: max(n, 1), maxQueue: max(maxQueue, 0), now: time.Now}
	g.lastAt = g.now()
	return g
}

// account adds the hold time since the last change to busy. g.mu must be held.
func (g *Gate) accountLocked() {
	now := g.now()
	g.busy += time.Duration(g.inUse) * now.Sub(g.lastAt)
	g.lastAt = now
}

// TryEnter takes a place in the gate and reports true, or reports false at once if the
// gate is full (or callers are queued in Enter: they come first). It never waits and costs
// no pool token. Any goroutine, the loop included.
func (g *Gate) TryEnter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inUse < g.n && g.q.n == 0 {
		g.accountLocked()
		g.inUse++
		g.entered++
		return true
	}
	g.rejected++
	return false
}

// Enter takes a place in the gate, parking c (its hook's Suspend(WaitToken)) in FIFO order
// while the gate is full. It returns ErrQueueFull at once when maxQueue callers already
// wait, c's cancellation error if c is cancelled while waiting (the place is then not
// taken), and ErrNested when called from an offloaded function or while c waits in its
// hook's pool (the hook's Pool may be nil here: a gate needs no pool). On nil, call Leave
// when done. Call it from c's own task or goroutine.
func (g *Gate) Enter(c Caller) error {
	ctx := c.Context()
	h := c.OffloadHook()
	if h.Suspend == nil {
		panic("offload: Caller.OffloadHook returned a Hook with a nil Suspend")
	}
	if inPool(ctx) || h.Pool.waiting(c) {
		g.mu.Lock()
		g.nested++
		g.mu.Unlock()
		return ErrNested
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	g.mu.Lock()
	if g.inUse < g.n && g.q.n == 0 {
		g.accountLocked()
		g.inUse++
		g.entered++
		g.wait.record(0)
		g.mu.Unlock()
		return nil
	}
	if g.q.n >= g.maxQueue {
		g.queueFull++
		g.mu.Unlock()
		return ErrQueueFull
	}
	w := &gateWaiter{enq: g.now()}
	g.q.push(w)
	g.mu.Unlock()
	for {
		resume, park := h.Suspend(WaitToken)
		g.mu.Lock()
		granted := w.granted
		if !granted {
			w.resume = resume
		}
		g.mu.Unlock()
		if granted {
			resume() // granted meanwhile: make this park return at once
		}
		err := park()
		g.mu.Lock()
		w.resume = nil
		if w.granted {
			var next func()
			if err != nil {
				next = g.leaveLocked() // cancelled as the place came: pass it on
			}
			g.mu.Unlock()
			if next != nil {
				next()
			}
			return err
		}
		if err != nil {
			g.q.remove(w)
			g.cancelled++
			g.mu.Unlock()
			return err
		}
		g.mu.Unlock() // woken without a place (spurious): park again
	}
}

// Leave gives the place back: the first queued Enter gets it, or the gate has one more
// free place. It panics if nobody holds a place. Any goroutine.
func (g *Gate) Leave() {
	g.mu.Lock()
	if g.inUse == 0 {
		g.mu.Unlock()
		panic("offload: Gate.Leave without a matching TryEnter or Enter on gate " + g.name)
	}
	next := g.leaveLocked()
	g.mu.Unlock()
	if next != nil {
		next()
	}
}

// leaveLocked releases one place, handing it to the first waiter if any; it returns that
// waiter's resume (to call once g.mu is released), or nil.
func (g *Gate) leaveLocked() (resume func()) {
	g.left++
	if w := g.q.head; w != nil {
		g.q.remove(w)
		w.granted = true
		g.entered++
		g.wait.record(g.now().Sub(w.enq))
		resume, w.resume = w.resume, nil
		return resume
	}
	g.accountLocked()
	g.inUse--
	return nil
}

// GateStats is a snapshot of a gate, from Gate.Stats. Counters are totals since NewGate.
type GateStats struct {
	Name      string
	Size      int // n
	MaxQueue  int
	InUse     int
	Waiting   int
	Entered   uint64             // places taken, by TryEnter or Enter
	Rejected  uint64             // TryEnter calls that found the gate full
	QueueFull uint64             // Enter calls refused with ErrQueueFull
	Cancelled uint64             // Enter calls whose caller was cancelled while queued
	Nested    uint64             // Enter calls refused with ErrNested
	Wait      accounting.Summary // time Enter waited (zero when a place was free)
	MeanHold  time.Duration      // mean time a place was held (Little's law: busy time / places left)
}

// Stats returns a snapshot of the gate. Any goroutine.
func (g *Gate) Stats() GateStats {
	g.mu.Lock()
	g.accountLocked()
	st := GateStats{
		Name: g.name, Size: g.n, MaxQueue: g.maxQueue, InUse: g.inUse, Waiting: g.q.n,
		Entered: g.entered, Rejected: g.rejected, QueueFull: g.queueFull,
		Cancelled: g.cancelled, Nested: g.nested,
	}
	if g.left > 0 {
		st.MeanHold = g.busy / time.Duration(g.left)
	}
	snap := g.wait.snapshot()
	g.mu.Unlock()
	st.Wait = snap.summary()
	return st
}
