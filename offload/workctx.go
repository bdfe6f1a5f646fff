package offload

import (
	"context"
	"sync"
	"time"
)

// workCtx is the context an offloaded function receives. It lives inside the call (which
// the typed result embeds), so a call costs no allocation for its context: unlike
// context.WithCancel it does not register with its parent. Instead:
//
//   - Err asks the parent when the call itself is not cancelled yet, so a cancelled caller
//     is seen at once by a function that polls Err.
//   - Done makes its channel on first use and only then watches the parent (one
//     context.AfterFunc); a function that never selects on Done costs nothing for it.
//   - Value answers the pool marker and defers every other key to the parent; Deadline is
//     the parent's (a call with a timeout gets a context.WithTimeout parent).
//
// context.Cause(ctx) behaves as for a context.WithCancel child: the parent's cause when
// the parent was cancelled (context.Cause finds the parent's cancel state through Value),
// the cause given to cancelCause (see cancelCtxKey), else ctx.Err(). One difference: if the call was cancelled on its own (its function
// returned, its caller left) and the parent is cancelled later, Cause then reports the
// parent's cause where a WithCancel child would keep context.Canceled. context.AfterFunc
// and derived contexts work on it as on any custom context (the standard library watches
// Done in a goroutine).
//
// A workCtx is never reused: a goroutine the function leaked may keep it.
type workCtx struct {
	parent context.Context
	p      *Pool

	mu    sync.Mutex
	done  chan struct{}   // made by the first Done
	err   error           // set once, by cancel or from the parent
	watch func() bool     // stops the AfterFunc on parent that Done registered, if any
	cause context.Context // cancelled with the cause given to cancelCause, if any
}

// cancelCtxKey is the key under which context.Cause looks for the nearest cancellation
// state (unexported in package context), learnt once by asking Cause about a context
// that records the key it is asked for. A workCtx cancelled with a cause answers that key
// with the state of a context cancelled with the same cause, so context.Cause reports it.
// Should Cause ever stop asking Value, the key stays nil and Cause reports Err.
var cancelCtxKey = func() any {
	s := &keySpy{Context: context.Background()}
	_ = context.Cause(s)
	return s.key
}()

type keySpy struct {
	context.Context
	key any
}

func (s *keySpy) Err() error { return context.Canceled }

func (s *keySpy) Value(k any) any {
	if s.key == nil {
		s.key = k
	}
	return nil
}

// closedCh is the Done channel of a context that was cancelled before Done was first asked.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// init sets the parent; the zero workCtx is otherwise ready.
func (w *workCtx) init(parent context.Context, p *Pool) {
	w.parent, w.p = parent, p
}

// Deadline returns the parent's deadline. Any goroutine.
func (w *workCtx) Deadline() (time.Time, bool) { return w.parent.Deadline() }

// Done returns a channel closed when the call is cancelled or its parent is done. Any
// goroutine.
func (w *workCtx) Done() <-chan struct{} {
	w.mu.Lock()
	if w.done != nil {
		d := w.done
		w.mu.Unlock()
		return d
	}
	if w.err == nil {
		w.err = w.parent.Err()
	}
	if w.err != nil {
		w.done = closedCh
		w.mu.Unlock()
		return closedCh
	}
	w.done = make(chan struct{})
	d := w.done
	watch := w.parent.Done() != nil
	w.mu.Unlock()
	if watch {
		stop := context.AfterFunc(w.parent, w.fromParent)
		w.mu.Lock()
		if w.err != nil { // cancelled meanwhile: the watch is not needed
			w.mu.Unlock()
			stop()
			return d
		}
		w.watch = stop
		w.mu.Unlock()
	}
	return d
}

// fromParent runs (context.AfterFunc) when the parent is done.
func (w *workCtx) fromParent() { w.cancel(w.parent.Err()) }

// Err returns nil while neither the call nor its parent is cancelled, else why. Any
// goroutine.
func (w *workCtx) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		if err := w.parent.Err(); err != nil {
			w.err = err
			if w.done != nil && w.done != closedCh {
				close(w.done)
			}
		}
	}
	return w.err
}

// Value returns the pool for the marker key and defers to the parent otherwise. Any
// goroutine.
func (w *workCtx) Value(k any) any {
	if k == (markerKey{}) {
		return w.p
	}
	if k == cancelCtxKey && cancelCtxKey != nil {
		w.mu.Lock()
		c := w.cause
		w.mu.Unlock()
		if c != nil {
			return c.Value(k)
		}
	}
	return w.parent.Value(k)
}

// cancelCause cancels the context with context.Canceled and the given cause (what
// context.Cause reports), unless it or its parent is cancelled already (then the parent's
// error and cause stand, as for a context.WithCancel child). Any goroutine.
func (w *workCtx) cancelCause(cause error) {
	if w.Err() != nil {
		return
	}
	if cause == nil || cause == context.Canceled {
		w.cancel(context.Canceled)
		return
	}
	// Cancelled before it is published: the state Cause reads never changes afterwards.
	cc, cf := context.WithCancelCause(context.Background())
	cf(cause)
	w.cancelWith(context.Canceled, cc)
}

// cancel cancels the context with err unless it is cancelled already. Idempotent; any
// goroutine.
func (w *workCtx) cancel(err error) { w.cancelWith(err, nil) }

// cancelWith cancels the context with err and, if cause is not nil, the cause that cause
// was cancelled with, unless it is cancelled already.
func (w *workCtx) cancelWith(err error, cause context.Context) {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return
	}
	w.err, w.cause = err, cause
	if w.done != nil {
		close(w.done) // never closedCh: that is set only with err
	}
	stop := w.watch
	w.watch = nil
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}
