package offload

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"
	"time"
)

// Errors returned by the pool and gates. Compare with errors.Is.
var (
	// ErrQueueFull: the call's lane already has Config.MaxWaiting calls waiting for a token,
	// or its route is at its Config.MaxKeyShare cap with Config.MaxWaiting calls waiting
	// for it; or Gate.Enter found the gate full and its queue at maxQueue. The handler
	// should answer 503 with Retry-After.
	ErrQueueFull = errors.New("offload: queue full")
	// ErrPanicked is wrapped by the *PanicError that Do returns when the function panics.
	ErrPanicked = errors.New("offload: function panicked")
	// ErrClosed: the pool was closed (Close) before the call could start.
	ErrClosed = errors.New("offload: pool closed")
	// ErrNested: Do, Enter, Copy or CopySeq was called from inside an offloaded function
	// (with a Caller whose Context carries the pool marker, or with a Caller that is already
	// waiting in the pool). Waiting on the pool from the pool can deadlock: see
	// docs/deadlocks.md.
	ErrNested = errors.New("offload: nested offload from an offloaded function")
)

// errGoexit is the error of a call whose function called runtime.Goexit.
var errGoexit = fmt.Errorf("%w: runtime.Goexit called in an offloaded function", ErrPanicked)

// PanicError is the error Do returns when the offloaded function panicked. It wraps
// ErrPanicked; Error includes the panic value and the worker's stack.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the stack of the panicking worker goroutine (debug.Stack)
}

// Error returns "offload: function panicked: VALUE" followed by the stack. Any goroutine.
func (e *PanicError) Error() string {
	return fmt.Sprintf("%s: %v\n\n%s", ErrPanicked.Error(), e.Value, e.Stack)
}

// Unwrap returns ErrPanicked. Any goroutine.
func (e *PanicError) Unwrap() error { return ErrPanicked }

// lane is a class of tokens: fast or slow (Stats.Lanes and KeyStats.lane name them).
type lane uint8

const (
	laneFast lane = iota // routes not known to be slow (unknown routes start here)
	laneSlow             // routes predicted or configured to be slow
	numLanes             // the length of Stats.Lanes
)

// String returns "fast" or "slow". Any goroutine.
func (l lane) String() string {
	switch l {
	case laneFast:
		return "fast"
	case laneSlow:
		return "slow"
	}
	return fmt.Sprintf("lane(%d)", uint8(l))
}

// Pool runs blocking functions on at most Tokens reused goroutines. Create it with New and
// stop it with Close. All methods are safe for concurrent use.
type Pool struct {
	// Immutable after New.
	tokens      int
	lanesOn     bool
	maxWaiting  int
	idleTimeout time.Duration
	promote     time.Duration
	defTimeout  time.Duration                           // Config.DefaultTimeout
	keyShare    float64                                 // Config.MaxKeyShare, default applied
	now         func() time.Time                        // time.Now; tests substitute a fake clock
	afterFunc   func(d time.Duration, f func()) stopper // time.AfterFunc; tests substitute

	mu         sync.Mutex
	closed     bool
	doneClosed bool
	lanes      [numLanes]laneState
	idle       []*worker // LIFO: the most recently idle worker is reused first
	workers    int
	running    callList // in start order
	midArm     *midArm  // the mid-flight timer's current arming, nil if none
	midTimer   stopper
	inflight   map[Caller]*call       // Callers waiting in this pool (nested detection)
	heldKeys   map[*keyEntry]struct{} // keys with calls waiting at their cap
	seq        uint64                 // admissions, for FIFO order across queues
	nested     uint64
	pred       predictor
	quit       chan struct{} // closed by Close: idle workers exit
	done       chan struct{} // closed when closed and no worker is left
}

type laneState struct {
	tokens, inUse int
	keyCap        int      // tokens one key may hold (Config.MaxKeyShare)
	q             callList // waiting for a token, FIFO
	held          int      // calls waiting in their key's queue at the cap
	cappedWaits   uint64   // calls that waited at their key's cap
	started       uint64
	completed     uint64
	rejected      uint64
	cancelled     uint64
	timedOut      uint64
	panicked      uint64
	migratedIn    uint64
	wait, run     hist
}

// Close stops the pool: calls not started yet (new ones and queued ones) get ErrClosed,
// and Close waits until every running function has returned and every worker goroutine
// has exited, or until ctx is done. In the latter case it cancels the contexts of the
// functions still running and returns ctx's error; their workers exit when they return.
// With no function running it returns nil once the idle workers have exited, even when
// ctx is already done (Server.Close closes the pool with one). Idempotent. Any goroutine except the loop: it blocks (call it from the server's
// shutdown path).
func (p *Pool) Close(ctx context.Context) error {
	var rs resumes
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.quit)
		if p.midArm != nil {
			p.midTimer.Stop()
			p.midArm = nil
		}
		for i := range p.lanes {
			q := &p.lanes[i].q
			for cl := q.head; cl != nil; {
				next := cl.next
				if !cl.detached {
					q.remove(cl)
					cl.state = stDone
					cl.closedOut = true
					rs.take(cl)
				}
				cl = next
			}
		}
		for e := range p.heldKeys {
			for l := range e.held {
				for cl := e.held[l].head; cl != nil; {
					next := cl.next
					p.unholdLocked(cl)
					cl.state = stDone
					cl.closedOut = true
					rs.take(cl)
					cl = next
				}
			}
		}
		p.maybeDoneLocked()
	}
	p.mu.Unlock()
	rs.run()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done(): // also picked at random when done was closed as well
	}
	var cancels []*call
	p.mu.Lock()
	for cl := p.running.head; cl != nil; cl = cl.next {
		cancels = append(cancels, cl)
	}
	p.mu.Unlock()
	if len(cancels) == 0 {
		// No function runs, so none can start (the pool is closed): the workers left are
		// idle ones leaving on quit, or ones between a finished call and their exit, which
		// take no longer than a lock. ctx ending meanwhile is no failure to report.
		<-p.done
		return nil
	}
	for _, cl := range cancels {
		cl.cancel()
	}
	return ctx.Err()
}

// maybeDoneLocked closes done once the pool is closed and no worker is left.
func (p *Pool) maybeDoneLocked() {
	if p.closed && p.workers == 0 && !p.doneClosed {
		p.doneClosed = true
		close(p.done)
	}
}

// callState is where a call is; guarded by Pool.mu.
type callState uint8

const (
	stQueued  callState = iota // waiting for a token
	stRunning                  // holds a token; its function runs on a worker
	stDone                     // finished, or left the queue (cancelled, closed, timed out)
)

// job is the typed part of a call: it runs the function and keeps its result.
type job interface{ exec(ctx context.Context) }

// call is one offloaded function from admission to completion.
type call struct {
	p        *Pool
	job      job
	wctx     workCtx            // the function's context (workctx.go)
	stdStop  context.CancelFunc // the context.WithTimeout parent's cancel, for a call with a deadline
	stopAF   func() bool        // stops the per-call deadline watcher, if any
	key      *keyEntry
	keyStr   string
	detached bool   // no caller waits (CopySeq cleanup)
	seq      uint64 // admission order

	// Guarded by p.mu.
	state      callState
	lane       lane
	held       bool // queued in its key's held list (at the cap), not in the lane's queue
	wasHeld    bool // has been held at least once (for CappedWaits)
	abandoned  bool // the caller left (cancelled, timed out); the result is dropped
	timedOut   bool
	closedOut  bool
	skipped    bool   // dropped from the queue because its context was done
	resume     func() // resume of the caller's current park, nil if none registered
	midOn      bool   // mid-flight learning watches this call (its route was fast at start)
	enq, start time.Time
	prev, next *call

	// Written by the worker before it takes p.mu to finish the call; read by the caller
	// after it saw stDone under p.mu.
	perr error
}

type markerKey struct{}

// inPool reports whether ctx is (or derives from) the context of an offloaded function,
// that is whether code holding ctx runs in a pool worker and must not wait for a pool or
// a gate. Any goroutine.
func inPool(ctx context.Context) bool { return ctx.Value(markerKey{}) != nil }

// callList is an intrusive FIFO of calls (a lane queue or the running list).
type callList struct {
	head, tail *call
	n          int
}

func (l *callList) push(c *call) {
	c.prev, c.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

// insert puts c before the first call admitted after it, so that a call returning to a
// queue keeps its place in admission order. Returning calls are old, so the walk from the
// head is short.
func (l *callList) insert(c *call) {
	at := l.head
	for at != nil && at.seq < c.seq {
		at = at.next
	}
	if at == nil {
		l.push(c)
		return
	}
	c.prev, c.next = at.prev, at
	if at.prev != nil {
		at.prev.next = c
	} else {
		l.head = c
	}
	at.prev = c
	l.n++
}

func (l *callList) remove(c *call) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
	l.n--
}

func (l *callList) pop() *call {
	c := l.head
	if c != nil {
		l.remove(c)
	}
	return c
}

// resumes gathers resume functions to call once p.mu is released. It does not point into
// itself, so a resumes on the stack stays there: the common case (a few resumes) costs no
// allocation.
type resumes struct {
	small [4]func()
	n     int
	more  []func()
}

// take moves cl's registered resume (if any) into rs.
func (rs *resumes) take(cl *call) {
	if r := cl.resume; r != nil {
		cl.resume = nil
		rs.add(r)
	}
}

func (rs *resumes) add(r func()) {
	if rs.n < len(rs.small) {
		rs.small[rs.n] = r
		rs.n++
		return
	}
	rs.more = append(rs.more, r)
}

func (rs *resumes) run() {
	for _, r := range rs.small[:rs.n] {
		r()
	}
	for _, r := range rs.more {
		r()
	}
}

// hashable reports whether c can be a map key (its dynamic type is comparable).
func hashable(c Caller) bool { return reflect.TypeOf(c).Comparable() }

// admitLocked registers cl for caller c (nil for a detached call) and either starts it at
// once or queues it: in its key's held queue if the key holds its cap of the lane, else in
// the lane's FIFO. p.mu must be held. It returns the error that ends the call early.
func (p *Pool) admitLocked(c Caller, cl *call, rs *resumes) error {
	if p.closed {
		return ErrClosed
	}
	now := p.now()
	e := p.pred.get(cl.keyStr, now)
	cl.key = e
	e.calls++
	slow := p.pred.slowLocked(p, e, now, rs)
	lane := laneFast
	if slow && p.lanesOn {
		lane = laneSlow
	}
	p.seq++
	cl.seq = p.seq
	cl.lane = lane
	cl.enq = now
	ls := &p.lanes[lane]
	switch {
	case p.cappedLocked(cl):
		if e.held[lane].n >= p.maxWaiting {
			ls.rejected++
			return ErrQueueFull
		}
		cl.state = stQueued
		p.holdLocked(cl)
	case ls.inUse < ls.tokens && ls.q.n == 0:
		ls.inUse++
		p.startLocked(cl, now, rs, nil)
	case ls.q.n >= p.maxWaiting && !cl.detached:
		ls.rejected++
		return ErrQueueFull
	default:
		cl.state = stQueued
		ls.q.push(cl)
	}
	if c != nil && hashable(c) {
		p.inflight[c] = cl
	}
	return nil
}

// cappedLocked reports whether cl's key holds its cap of cl's lane, so that cl must wait in
// the key's held queue. Detached calls (cleanup) are never capped, and a cap of the whole
// lane is no cap (MaxKeyShare 1).
func (p *Pool) cappedLocked(cl *call) bool {
	ls := &p.lanes[cl.lane]
	return !cl.detached && ls.keyCap < ls.tokens && cl.key.inUse[cl.lane] >= ls.keyCap
}

// holdLocked puts the queued call cl in its key's held queue for its lane.
func (p *Pool) holdLocked(cl *call) {
	e := cl.key
	if e.heldN() == 0 {
		p.heldKeys[e] = struct{}{}
	}
	e.held[cl.lane].insert(cl)
	cl.held = true
	ls := &p.lanes[cl.lane]
	ls.held++
	if !cl.wasHeld { // counted once per call, however often it is held
		cl.wasHeld = true
		e.cappedWaits++
		ls.cappedWaits++
	}
}

// unholdLocked takes cl out of its key's held queue.
func (p *Pool) unholdLocked(cl *call) {
	e := cl.key
	e.held[cl.lane].remove(cl)
	cl.held = false
	p.lanes[cl.lane].held--
	if e.heldN() == 0 {
		delete(p.heldKeys, e)
	}
}

// dequeueLocked takes the queued call cl out of whichever queue holds it.
func (p *Pool) dequeueLocked(cl *call) {
	if cl.held {
		p.unholdLocked(cl)
	} else {
		p.lanes[cl.lane].q.remove(cl)
	}
}

// startLocked makes cl running (its token is already counted in inUse) and hands it to a
// worker: w itself if w is not nil (the caller then runs it), else an idle or new worker.
// The caller's WaitToken park, if registered, is resumed so that it parks again for the
// result.
func (p *Pool) startLocked(cl *call, now time.Time, rs *resumes, w *worker) {
	ls := &p.lanes[cl.lane]
	cl.state = stRunning
	cl.start = now
	ls.started++
	cl.key.inUse[cl.lane]++
	ls.wait.record(now.Sub(cl.enq))
	p.running.push(cl)
	if e := cl.key; e != nil && !e.slow && !e.dead {
		cl.midOn = true
		if p.midArm == nil {
			p.armMidLocked(now, now)
		}
	}
	rs.take(cl)
	if w == nil {
		p.dispatchLocked(cl)
	}
}

// dispatchLocked gives cl to an idle worker or starts a new one.
func (p *Pool) dispatchLocked(cl *call) {
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		w.ch <- cl // buffered and empty while the worker is idle: never blocks
		return
	}
	p.workers++
	w := &worker{p: p, ch: make(chan *call, 1)}
	go w.loop(cl)
}

// pumpLocked starts queued calls of lane l while it has free tokens.
func (p *Pool) pumpLocked(l lane, now time.Time, rs *resumes) {
	ls := &p.lanes[l]
	for ls.inUse < ls.tokens {
		cl := p.popLocked(l, rs)
		if cl == nil {
			return
		}
		ls.inUse++
		p.startLocked(cl, now, rs, nil)
	}
}

// popLocked returns the first waiter of lane l whose context is not done yet and whose key
// is below its cap. Waiters whose caller went away meanwhile (not yet noticed by the
// caller) are dropped on the way and their callers resumed: a token never goes to a
// function that would only return its context's error. Waiters whose key reached its cap
// since they queued move to the key's held queue, so they never block the calls behind
// them.
func (p *Pool) popLocked(l lane, rs *resumes) *call {
	ls := &p.lanes[l]
	for {
		cl := ls.q.pop()
		switch {
		case cl == nil || cl.detached:
			return cl
		case cl.wctx.Err() != nil:
			cl.state = stDone
			cl.skipped = true
			if !cl.timedOut {
				ls.cancelled++
			}
			rs.take(cl)
		case p.cappedLocked(cl):
			p.holdLocked(cl)
		default:
			return cl
		}
	}
}

// releaseHeldLocked is called when key e dropped below its cap in lane l: its oldest held
// call returns to the lane's queue at its place in admission order.
func (p *Pool) releaseHeldLocked(e *keyEntry, l lane) {
	cl := e.held[l].head
	if cl == nil {
		return
	}
	p.unholdLocked(cl)
	p.lanes[l].q.insert(cl)
}

// abandonLocked is called when the caller of cl leaves before the result: a queued call
// leaves its queue, a running one is marked so that its result is dropped (its token is
// released only when the function returns).
func (p *Pool) abandonLocked(cl *call) {
	switch cl.state {
	case stQueued:
		p.dequeueLocked(cl)
		cl.state = stDone
		if !cl.timedOut {
			p.lanes[cl.lane].cancelled++
		}
	case stRunning:
		if !cl.abandoned && !cl.timedOut {
			p.lanes[cl.lane].cancelled++
		}
		cl.abandoned = true
	}
}

// stopper is a timer that can be stopped (*time.Timer).
type stopper interface{ Stop() bool }

func realAfterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// Mid-flight learning uses one timer per pool, not one per call: the running list is in
// start order, so the timer only needs to fire for the oldest watched call; when it fires
// it promotes every watched call started at or before that one and re-arms for the next.
// An idle timer is left to fire (it finds nothing and stops) rather than stopped, so that
// back-to-back calls do not create and stop a timer each.

// midArm is one arming of the pool's mid-flight timer, for the calls started at or before
// due.
type midArm struct {
	p   *Pool
	due time.Time
}

// armMidLocked arms the mid-flight timer for calls started at or before due.
func (p *Pool) armMidLocked(due, now time.Time) {
	a := &midArm{p: p, due: due}
	p.midArm = a
	p.midTimer = p.afterFunc(max(0, due.Add(p.promote).Sub(now)), a.fire)
}

// fire runs on a timer goroutine PromoteAfter after the call it was armed for started:
// the routes of the watched calls started since at least PromoteAfter are slow, and move
// to the slow lane now.
func (a *midArm) fire() {
	p := a.p
	var rs resumes
	p.mu.Lock()
	if p.midArm != a {
		p.mu.Unlock()
		return // re-armed or stopped meanwhile
	}
	p.midArm = nil
	now := p.now()
	for cl := p.running.head; cl != nil; cl = cl.next {
		if !cl.midOn {
			continue
		}
		if cl.start.After(a.due) {
			p.armMidLocked(cl.start, now)
			break
		}
		cl.midOn = false
		p.pred.promoteLocked(p, cl.key, now, now.Sub(cl.start), &rs)
	}
	p.mu.Unlock()
	rs.run()
}

// onDeadline runs (context.AfterFunc) when the call's context is done: if the call's own
// deadline passed, the caller is resumed and its Do returns context.DeadlineExceeded at
// once, as for a cancelled caller.
func (cl *call) onDeadline() {
	if !errors.Is(cl.wctx.Err(), context.DeadlineExceeded) {
		return // the caller was cancelled: its park returns on its own
	}
	p := cl.p
	var rs resumes
	p.mu.Lock()
	if cl.state != stDone && !cl.abandoned && !cl.timedOut {
		cl.timedOut = true
		p.lanes[cl.lane].timedOut++
		rs.take(cl)
	}
	p.mu.Unlock()
	rs.run()
}

// worker is one pool goroutine. It runs calls one after another; between calls it waits
// idle for up to IdleTimeout.
type worker struct {
	p  *Pool
	ch chan *call
}

func (w *worker) loop(cl *call) {
	p := w.p
	var idle *time.Timer
	defer func() {
		if idle != nil {
			idle.Stop()
		}
	}()
	for cl != nil {
		w.exec(cl)
		next, stay := p.finish(cl, w, false)
		if next != nil {
			cl = next
			continue
		}
		if !stay {
			return
		}
		cl = w.idle(&idle)
	}
}

// idle waits for the next call; it returns nil when the worker should exit.
func (w *worker) idle(tp **time.Timer) *call {
	p := w.p
	if *tp == nil {
		*tp = time.NewTimer(p.idleTimeout)
	} else {
		(*tp).Reset(p.idleTimeout)
	}
	select {
	case cl := <-w.ch:
		(*tp).Stop()
		return cl
	case <-(*tp).C:
	case <-p.quit:
	}
	p.mu.Lock()
	for i, x := range p.idle {
		if x == w {
			copy(p.idle[i:], p.idle[i+1:])
			p.idle[len(p.idle)-1] = nil
			p.idle = p.idle[:len(p.idle)-1]
			p.workers--
			p.maybeDoneLocked()
			p.mu.Unlock()
			return nil
		}
	}
	p.mu.Unlock()
	return <-w.ch // a dispatch took us off the idle list and sent a call
}

// exec runs cl's function, turning a panic into cl.perr. If the function calls
// runtime.Goexit, exec finishes the call with errGoexit and the worker goroutine exits
// (Goexit cannot be stopped); exec then never returns.
func (w *worker) exec(cl *call) {
	normal := false
	defer func() {
		if normal {
			return
		}
		if v := recover(); v != nil {
			cl.perr = &PanicError{Value: v, Stack: debug.Stack()}
			return
		}
		cl.perr = errGoexit
		w.p.finish(cl, w, true)
	}()
	cl.job.exec(&cl.wctx)
	normal = true
}

// finish records cl's completion, releases its token (handing it to the lane's next
// waiter, which w then runs, unless exiting) and resumes cl's caller. It reports the next
// call for w, or whether w should stay (idle) rather than exit.
func (p *Pool) finish(cl *call, w *worker, exiting bool) (next *call, stay bool) {
	var rs resumes
	p.mu.Lock()
	now := p.now()
	ls := &p.lanes[cl.lane]
	d := now.Sub(cl.start)
	ls.run.record(d)
	ls.completed++
	if cl.perr != nil {
		ls.panicked++
	}
	cl.midOn = false
	p.running.remove(cl)
	cl.state = stDone
	cl.key.inUse[cl.lane]--
	if cl.key.inUse[cl.lane] < ls.keyCap {
		p.releaseHeldLocked(cl.key, cl.lane)
	}
	rs.take(cl)
	// A function cut short by cancellation ran at least d: a lower bound, used only if it
	// raises the estimate.
	censored := cl.abandoned || cl.wctx.Err() != nil
	p.pred.observeLocked(p, cl.key, now, d, censored, &rs)
	if h := p.popLocked(cl.lane, &rs); h != nil {
		if exiting {
			p.startLocked(h, now, &rs, nil)
		} else {
			p.startLocked(h, now, &rs, w)
			next = h
		}
	} else {
		ls.inUse--
	}
	switch {
	case next != nil:
	case exiting || p.closed:
		p.workers--
		p.maybeDoneLocked()
	default:
		p.idle = append(p.idle, w)
		stay = true
	}
	p.mu.Unlock()
	if cl.stopAF != nil {
		cl.stopAF()
	}
	cl.cancel()
	rs.run()
	return next, stay
}

// begin prepares and admits a call of fn for caller c with hook h: nested detection, the
// function's context, admission. On error the call is over.
func (p *Pool) begin(c Caller, h *Hook, cl *call, o options) error {
	parent := h.Base
	if parent == nil {
		parent = c.Context()
	}
	if inPool(parent) {
		p.mu.Lock()
		p.nested++
		p.mu.Unlock()
		return ErrNested
	}
	if parent.Err() != nil {
		return context.Cause(parent)
	}
	cl.p = p
	cl.keyStr = h.Key
	timeout := o.timeout
	if timeout <= 0 {
		timeout = p.defTimeout
	}
	ctx := parent
	if timeout > 0 {
		ctx, cl.stdStop = context.WithTimeout(parent, timeout)
	}
	cl.wctx.init(ctx, p)
	if timeout > 0 {
		// Registered before admission: finish reads stopAF once the call is admitted.
		cl.stopAF = context.AfterFunc(ctx, cl.onDeadline)
	}
	var rs resumes
	p.mu.Lock()
	if hashable(c) {
		if _, dup := p.inflight[c]; dup {
			p.nested++
			p.mu.Unlock()
			cl.cancel()
			return ErrNested
		}
	}
	err := p.admitLocked(c, cl, &rs)
	p.mu.Unlock()
	rs.run()
	if err != nil {
		cl.cancel()
		return err
	}
	return nil
}

// wait parks c (through h.Suspend) until cl is done, or returns early when c is
// cancelled, the call's own deadline passes or the pool closes. It unregisters c from the
// in-flight set.
func (p *Pool) wait(c Caller, h *Hook, cl *call) error {
	for {
		p.mu.Lock()
		cl.resume = nil
		if err, over := p.overLocked(c, cl); over {
			running := cl.state == stRunning // read under mu: a worker's finish writes it
			p.mu.Unlock()
			if err != nil && !running {
				cl.cancel() // never ran, or left the queue
			}
			return err
		}
		why := WaitResult
		if cl.state == stQueued {
			why = WaitToken
		}
		p.mu.Unlock()

		resume, park := h.Suspend(why)

		p.mu.Lock()
		immediate := cl.state == stDone || cl.timedOut || cl.closedOut || cl.skipped ||
			(why == WaitToken) != (cl.state == stQueued)
		if !immediate {
			cl.resume = resume
		}
		p.mu.Unlock()
		if immediate {
			resume() // the state moved on meanwhile: make this park return at once
		}
		if err := park(); err != nil {
			p.mu.Lock()
			cl.resume = nil
			if cl.state == stDone && !cl.closedOut && !cl.timedOut && !cl.skipped {
				p.unregisterLocked(c, cl)
				p.mu.Unlock()
				return nil // the result arrived anyway
			}
			p.abandonLocked(cl)
			p.unregisterLocked(c, cl)
			p.mu.Unlock()
			cl.wctx.cancelCause(err) // err: why the caller was cancelled
			cl.cancel()
			return err
		}
	}
}

// overLocked reports whether the call is over for its caller and with what error.
func (p *Pool) overLocked(c Caller, cl *call) (error, bool) {
	switch {
	case cl.closedOut:
		p.unregisterLocked(c, cl)
		return ErrClosed, true
	case cl.skipped:
		p.unregisterLocked(c, cl)
		return context.Cause(&cl.wctx), true
	case cl.timedOut:
		p.abandonLocked(cl)
		p.unregisterLocked(c, cl)
		return context.DeadlineExceeded, true
	case cl.state == stDone:
		p.unregisterLocked(c, cl)
		return nil, true
	}
	return nil, false
}

// CancelCaller cancels the context of the function c is waiting for, if any, as if that
// context derived from a context of c's cancelled with cause: its Err becomes
// context.Canceled and context.Cause reports cause. A Caller whose hook gives Hook.Base
// calls it when it is cancelled, so that the function learns it at once rather than when
// the caller's park returns. Any goroutine.
func (p *Pool) CancelCaller(c Caller, cause error) {
	if p == nil || !hashable(c) {
		return
	}
	p.mu.Lock()
	cl := p.inflight[c]
	p.mu.Unlock()
	if cl != nil {
		cl.wctx.cancelCause(cause) // outside p.mu: it may allocate; cl is never reused
	}
}

// waiting reports whether c is waiting in the pool right now (p may be nil).
func (p *Pool) waiting(c Caller) bool {
	if p == nil || !hashable(c) {
		return false
	}
	p.mu.Lock()
	_, ok := p.inflight[c]
	p.mu.Unlock()
	return ok
}

func (p *Pool) unregisterLocked(c Caller, cl *call) {
	if c != nil && hashable(c) && p.inflight[c] == cl {
		delete(p.inflight, c)
	}
}

// detach runs fn in the pool with no caller waiting for it (CopySeq's cleanup). It is
// admitted to the lane of key past the queue bound; on a closed pool it runs on a plain
// goroutine.
func (p *Pool) detach(key string, fn func()) {
	cl := &call{p: p, job: detachedJob(fn), keyStr: key, detached: true}
	cl.wctx.init(context.Background(), p)
	var rs resumes
	p.mu.Lock()
	err := p.admitLocked(nil, cl, &rs)
	p.mu.Unlock()
	rs.run()
	if err != nil {
		cl.cancel()
		go fn()
	}
}

// cancel cancels the function's context (context.Canceled) and releases the call's timer,
// if it has a deadline. Idempotent; any goroutine.
func (cl *call) cancel() {
	cl.wctx.cancel(context.Canceled)
	if cl.stdStop != nil {
		cl.stdStop()
	}
}

type detachedJob func()

func (f detachedJob) exec(context.Context) { f() }
