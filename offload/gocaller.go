package offload

import (
	"context"
)

// GoCaller is a Caller for code that runs in an ordinary goroutine (the multi-thread mode,
// background jobs, tests): its park blocks the goroutine until resumed or until its
// context is done. Its methods are safe for concurrent use, but only one Do, Enter, Copy
// or CopySeq at a time may use one GoCaller (a second Do gets ErrNested).
type GoCaller struct {
	ctx  context.Context
	hook Hook          // built once: OffloadHook and Suspend cost no allocation
	wake chan struct{} // capacity 1: a resume that came before its park is kept
	// The method values, bound once.
	resumeFn func()
	parkFn   func() error
}

// NewGoCaller returns a Caller for the calling goroutine with context ctx, pool p and
// route key key. Any goroutine.
func NewGoCaller(ctx context.Context, p *Pool, key string) *GoCaller {
	g := &GoCaller{ctx: ctx, wake: make(chan struct{}, 1)}
	g.resumeFn, g.parkFn = g.resume, g.park
	g.hook = Hook{Pool: p, Key: key, Suspend: g.suspend}
	return g
}

// Context returns the caller's context. Any goroutine.
func (g *GoCaller) Context() context.Context { return g.ctx }

// OffloadHook returns the pool, the key and a Suspend whose park blocks the calling
// goroutine until resume is called (it returns nil) or the context is done (it returns
// context.Cause); resume may be called from any goroutine, any number of times. One park
// and resume serve every call of the GoCaller, so a resume left over from an earlier,
// cancelled wait can end a later park early (nil); the pool then checks its state and
// parks again (see Hook.Suspend). Any goroutine.
func (g *GoCaller) OffloadHook() Hook { return g.hook }

func (g *GoCaller) suspend(Wait) (resume func(), park func() error) {
	return g.resumeFn, g.parkFn
}

func (g *GoCaller) resume() {
	select {
	case g.wake <- struct{}{}:
	default: // a wake is pending already
	}
}

func (g *GoCaller) park() error {
	select {
	case <-g.wake:
		return nil
	case <-g.ctx.Done():
		return context.Cause(g.ctx)
	}
}
