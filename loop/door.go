package loop

import (
	"sync"

	gerrors "github.com/panjf2000/gnet/v2/pkg/errors"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/internal/scheduler"
)

// door is the single way for other goroutines to get a function run on the loop. Posted
// functions queue under a mutex; the first post of a batch wakes the loop by writing one
// byte to the control socket (our end of the socket pair whose other end is registered
// with gnet as the control connection, engine.go), and later posts ride along until the
// batch starts. The loop reads the byte through epoll like any connection's input, and
// the control connection's OnTraffic runs the batch (runDoor). Unlike gnet's
// EventLoop.Execute, which wraps its runnable in a new closure and pushes a new node on a
// lock-free queue at every call, a wake allocates nothing. Safe for concurrent use.
type door struct {
	mu        sync.Mutex
	queue     []func()       // guarded by mu
	fd        int            // guarded by mu: the control socket's peer end, -1 until open and after close
	scheduled bool           // guarded by mu: a byte is on its way to the loop for the pending batch
	closed    bool           // guarded by mu
	gone      chan struct{}  // closed by close: posted functions will no longer run
	writers   sync.WaitGroup // wakes being written outside mu; close waits for them

	spare []func() // loop-owned: the drained batch, reused to avoid allocation

	// Wakers posted with postWake, woken after the batch's functions: an offloaded call's
	// resume posts one without allocating a function for it.
	wakes      []scheduler.Waker // guarded by mu
	spareWakes []scheduler.Waker // loop-owned, like spare
}

func (d *door) init() {
	d.fd = -1
	d.gone = make(chan struct{})
}

// post queues fn. It reports false if the door is closed (the loop has stopped or is
// stopping) or the loop can no longer be woken, in which case fn will never run.
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
// false if the door is closed or the loop can no longer be woken.
func (d *door) postWake(wk scheduler.Waker) bool {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false
	}
	d.wakes = append(d.wakes, wk)
	return d.kickUnlock()
}

// kick wakes the loop for a turn (the batch, then the pump) unless a wake is on its way
// already, so that a pump request and a batch share one byte. It reports false if the door
// is not open yet or closed, or the loop cannot be woken. Any goroutine.
func (d *door) kick() bool {
	d.mu.Lock()
	if d.closed || d.fd < 0 {
		d.mu.Unlock()
		return false
	}
	return d.kickUnlock()
}

// kickUnlock wakes the loop for the pending batch unless a wake is on its way already or
// the door is not open yet (open wakes it then), and unlocks d.mu, which the caller holds.
// It reports false if the loop cannot be woken (it has stopped: gnet closed its end).
// Then what was queued stays queued until close drops it, which follows: the loop's exit
// closes the door (finalStop, or ListenAndServe after gnet returned). A post that rode
// along meanwhile reported true; its function is dropped too, as one queued just before
// close is, and waiters learn it from gone.
//
// The write happens outside d.mu, so that posters do not queue behind a system call; the
// descriptor must still not be closed, and its number reused by another file, between
// reading d.fd and writing to it: writers count themselves in d.writers under d.mu, and
// close waits for them after marking the door closed, before the server closes the
// descriptor.
func (d *door) kickUnlock() bool {
	if d.scheduled || d.fd < 0 {
		d.mu.Unlock()
		return true
	}
	d.scheduled = true
	fd := d.fd
	d.writers.Add(1)
	d.mu.Unlock()
	ok := wakeLoop(fd)
	d.writers.Done()
	if !ok { // later posts try again (and fail) rather than ride along on a wake that never came
		d.mu.Lock()
		d.scheduled = false
		d.mu.Unlock()
	}
	return ok
}

// wakeLoop writes one byte to the control socket's peer end fd (nonblocking). It reports
// false if the loop has stopped (EPIPE: gnet closed its end as the loop exited).
//
// EAGAIN counts as success: the socket's buffer is full, so bytes are already waiting to
// be read. The control connection stays readable until they are (epoll is level-triggered
// here) and every read of it runs the door's batch; at least one read comes after this
// write attempt, hence after the entry just queued, so a run takes it. (It cannot happen
// in practice: the door writes one byte per batch, and the loop reads them all each turn.)
func wakeLoop(fd int) bool {
	for {
		_, err := unix.Write(fd, pumpByte[:])
		switch err {
		case nil, unix.EAGAIN:
			return true
		case unix.EINTR:
			continue
		}
		return false
	}
}

// open records the control socket's peer end once the loop is reachable, and wakes the
// loop for anything posted so far. Loop-confined (OnOpen of the control connection).
func (d *door) open(fd int) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.fd = fd
	if len(d.queue) > 0 || len(d.wakes) > 0 {
		d.kickUnlock() // the loop is running this very call: the write cannot fail
		return
	}
	d.mu.Unlock()
}

// close refuses every later post and drops what is queued. When it returns (every call,
// not only the first) the door writes to the control socket no more, so the server may
// close it. Idempotent.
func (d *door) close() {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		d.fd = -1
		d.queue, d.wakes = nil, nil
		close(d.gone)
	}
	d.mu.Unlock()
	d.writers.Wait() // writes already past the check (a few microseconds at most)
}

// take swaps out the queued batch: its functions and its wakers. Posts after it start a
// new batch and wake the loop again. Loop-confined.
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
