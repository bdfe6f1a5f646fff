package offload

import (
	"context"
	"time"
)

// Caller is what a handler gives the pool: its context and, through one hook, what the
// pool needs to run a call for it. *loop.Ctx and *loop.Task implement it for code on the
// loop; NewGoCaller gives one for code in ordinary goroutines.
type Caller interface {
	// Context is cancelled when the client goes away, the handler's deadline passes or the
	// server stops. The offloaded function's context derives from it.
	Context() context.Context
	// OffloadHook returns what the caller lends the pool for one call. Do, Copy, CopySeq
	// and Gate.Enter call it once per call, on the caller's own task or goroutine.
	OffloadHook() Hook
}

// Hook is what a caller lends the pool for one call: the pool that serves it, the route
// key it is accounted under, and the way to park it. A plain value; Caller.OffloadHook
// returns a fresh one (or the same one) for every call.
type Hook struct {
	// Pool is the pool that serves the caller (the server's pool). It must not be nil.
	Pool *Pool
	// Key names the route for lane prediction and per-key caps, e.g. "GET /users/{id}"
	// (method and pattern, never the raw path).
	Key string
	// Suspend prepares one park of the caller. It returns resume, safe for concurrent use,
	// callable from any goroutine, at most once meaningfully (later calls are no-ops); and
	// park, which the caller calls once on its own task/goroutine: it blocks that task
	// (single-thread: parks the coroutine; multi-thread: blocks the goroutine) until resume
	// has been called or the caller is cancelled, returning nil or the cancellation error.
	// why says what the caller waits for (for accounting). It must not be nil.
	//
	// The pool tolerates a park that returns nil without its own resume (a spurious
	// wake): it checks the call's state and suspends again. So an implementation may
	// reuse one resume and park for every suspension, as GoCaller does.
	Suspend func(why Wait) (resume func(), park func() error)
	// Base, if not nil, replaces Caller.Context() as the parent of the offloaded function's
	// context, for a caller whose own context costs an allocation to make (a loop task makes
	// it on first use). Base must carry the same values as Caller.Context() and be done
	// whenever it is done for a reason other than the caller's own cancellation (the server
	// stopping), and the caller must not be cancelled yet when it hands out Base. The
	// caller's cancellation reaches the function through Pool.CancelCaller, which the
	// caller calls when it is cancelled, or at the latest when its park returns the error:
	// the function's context is cancelled then with Err context.Canceled and that error as
	// its context.Cause. Nil: Caller.Context() is the parent.
	Base context.Context
}

// hook returns c's hook, panicking with a clear message when it is incomplete (a bug in
// the Caller's implementation, not a runtime condition).
func hook(c Caller) Hook {
	h := c.OffloadHook()
	if h.Pool == nil {
		panic("offload: Caller.OffloadHook returned a Hook with a nil Pool")
	}
	if h.Suspend == nil {
		panic("offload: Caller.OffloadHook returned a Hook with a nil Suspend")
	}
	return h
}

// Wait says what a parked caller waits for.
type Wait uint8

const (
	// WaitToken: queued for a pool or lane token, or for a gate.
	WaitToken Wait = iota
	// WaitResult: its function is running in the pool.
	WaitResult
)

// Option changes one call of Do, Copy or CopySeq.
type Option struct {
	timeout time.Duration
}

type options struct {
	timeout time.Duration
}

func collect(opts []Option) (o options) {
	for _, op := range opts {
		if op.timeout > 0 {
			o.timeout = op.timeout
		}
	}
	return o
}

// Timeout bounds one call, queueing included: the function's context gets a deadline d
// from now, and when it passes Do returns context.DeadlineExceeded at once (a function
// that ignores its context keeps its token until it returns). It overrides
// Config.DefaultTimeout for this call; d <= 0 leaves the default. Any goroutine.
func Timeout(d time.Duration) Option { return Option{timeout: d} }

// result is the typed half of a call.
type result[T any] struct {
	call
	fn  func(ctx context.Context) (T, error)
	v   T
	err error
}

func (r *result[T]) exec(ctx context.Context) { r.v, r.err = r.fn(ctx) }

// Do runs fn in c's pool with a context derived from c.Context() and parks c until fn
// returns, then returns fn's results.
//
// The call waits for a token of the lane its route is predicted to need (FIFO, parked
// with Suspend(WaitToken); ErrQueueFull when the lane's queue is full), and, while its
// route holds its share of the lane (Config.MaxKeyShare), in its route's own queue; then it
// runs on a worker while c is parked with Suspend(WaitResult). If fn panics, Do returns a
// *PanicError wrapping ErrPanicked with the stack. If c is cancelled (its park returns an
// error) Do returns that error at once and cancels fn's context; the token stays taken
// until fn really returns, and fn's results are then dropped. With Timeout, the same
// happens when the call's deadline passes (context.DeadlineExceeded). After Close, Do
// returns ErrClosed; called from inside an offloaded function it returns ErrNested.
//
// Call it from c's own task or goroutine (the one that may park). fn runs on another
// goroutine: it must not use c (nor anything loop-confined) and must never wait for the
// loop; see docs/deadlocks.md.
func Do[T any](c Caller, fn func(ctx context.Context) (T, error), opts ...Option) (T, error) {
	var zero T
	h := hook(c)
	p := h.Pool
	r := &result[T]{fn: fn}
	r.job = r
	if err := p.begin(c, &h, &r.call, collect(opts)); err != nil {
		return zero, err
	}
	if err := p.wait(c, &h, &r.call); err != nil {
		return zero, err
	}
	if r.perr != nil {
		return zero, r.perr
	}
	return r.v, r.err
}
