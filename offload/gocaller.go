package offload

import (
	"context"
	"sync/atomic"
)

// GoCaller is a Caller for code that runs in an ordinary goroutine (the multi-thread mode,
// background jobs, tests): its park blocks the goroutine until resumed or until its
// context is done. Its methods are safe for concurrent use, but only one Do, Enter, Copy
// or CopySeq at a time may use one GoCaller (a second one gets ErrNested).
type GoCaller struct {
	ctx  context.Context
	hook Hook // built once: OffloadHook costs no allocation
}

// NewGoCaller returns a Caller for the calling goroutine with context ctx, pool p and
// route key key. Any goroutine.
func NewGoCaller(ctx context.Context, p *Pool, key string) *GoCaller {
	g := &GoCaller{ctx: ctx}
	g.hook = Hook{Pool: p, Key: key, Suspend: g.suspend}
	return g
}

// Context returns the caller's context. Any goroutine.
func (g *GoCaller) Context() context.Context { return g.ctx }

// OffloadHook returns the pool, the key and a Suspend whose park blocks the calling
// goroutine until resume is called (it returns nil) or the context is done (it returns
// context.Cause); resume may be called from any goroutine, any number of times. Any
// goroutine.
func (g *GoCaller) OffloadHook() Hook { return g.hook }

func (g *GoCaller) suspend(Wait) (resume func(), park func() error) {
	k := &goPark{ctx: g.ctx, ch: make(chan struct{})}
	return k.resume, k.park
}

type goPark struct {
	ctx   context.Context
	ch    chan struct{}
	fired atomic.Bool
}

func (k *goPark) resume() {
	if k.fired.CompareAndSwap(false, true) {
		close(k.ch)
	}
}

func (k *goPark) park() error {
	select {
	case <-k.ch:
		return nil
	case <-k.ctx.Done():
		return context.Cause(k.ctx)
	}
}
