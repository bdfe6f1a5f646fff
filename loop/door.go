package loop

import (
	"context"
	"sync"

	"github.com/panjf2000/gnet/v2"
	gerrors "github.com/panjf2000/gnet/v2/pkg/errors"

	"github.com/batonrt/baton/scheduler"
)

// door is the single way for other goroutines to get a function run on the loop. Posted
// functions queue under a mutex; the first post of a batch asks gnet to run the batch with
// one Execute (a lock-free queue push plus an eventfd write), and later posts ride along
// until the batch starts. Safe for concurrent use.
type door struct {
	mu        sync.Mutex
	queue     []func() // guarded by mu
	el        gnet.EventLoop
	scheduled bool          // guarded by mu: an Execute is pending
	closed    bool          // guarded by mu
	gone      chan struct{} // closed by close: posted functions will no longer run
	run       gnet.RunnableFunc

	spare []func() // loop-owned: the drained batch, reused to avoid allocation

	// Wakers posted with postWake, woken after the batch's functions: an offloaded call's
	// resume posts one without allocating a function for it.
	wakes      []scheduler.Waker // guarded by mu
	spareWakes []scheduler.Waker // loop-owned, like spare
}

func (d *door) init(run gnet.RunnableFunc) {
	d.run = run
	d.gone = make(chan struct{})
}

// post queues fn. It reports false if the door is closed (the loop has stopped or is
// stopping), in which case fn will never run.
func (d *door) post(fn func()) bool {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false
	}
	d.queue = append(d.queue, fn)
	return d.kickUnlock()
}

// postWake queues wk.Wake() to run on the loop, like post, without allocating. It reports
// false if the door is closed.
func (d *door) postWake(wk scheduler.Waker) bool {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false
	}
	d.wakes = append(d.wakes, wk)
	return d.kickUnlock()
}

// kickUnlock asks gnet to run the queued batch unless that is asked already, and unlocks
// d.mu, which the caller holds.
func (d *door) kickUnlock() bool {
	kick := d.el != nil && !d.scheduled
	if kick {
		d.scheduled = true
	}
	el := d.el
	d.mu.Unlock()
	if kick {
		if err := el.Execute(context.Background(), d.run); err != nil {
			// The engine is shutting down; the queued functions will be dropped.
			return false
		}
	}
	return true
}

// open sets the loop handle once the loop is reachable and runs anything posted so far.
func (d *door) open(el gnet.EventLoop) {
	d.mu.Lock()
	d.el = el
	kick := (len(d.queue) > 0 || len(d.wakes) > 0) && !d.scheduled
	if kick {
		d.scheduled = true
	}
	d.mu.Unlock()
	if kick {
		_ = el.Execute(context.Background(), d.run)
	}
}

// close refuses every later post and drops what is queued. Idempotent.
func (d *door) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	d.queue, d.wakes = nil, nil
	close(d.gone)
}

// take swaps out the queued batch: its functions and its wakers. Loop-confined.
func (d *door) take() ([]func(), []scheduler.Waker) {
	d.mu.Lock()
	batch, wakes := d.queue, d.wakes
	d.queue, d.wakes = d.spare[:0], d.spareWakes[:0]
	d.scheduled = false
	d.mu.Unlock()
	return batch, wakes
}

// recycle hands a drained batch back for reuse. Loop-confined.
func (d *door) recycle(batch []func(), wakes []scheduler.Waker) {
	clear(batch)
	clear(wakes)
	d.spare, d.spareWakes = batch[:0], wakes[:0]
}

var errEngineShutdown = gerrors.ErrEngineShutdown
