package offload

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrt/baton/internal/scheduler"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitUntil polls cond until it holds or a generous deadline passes (tests assert orders
// and counts, never durations).
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// newPool returns a pool closed at the end of the test (after everything else).
func newPool(tb testing.TB, cfg Config) *Pool {
	tb.Helper()
	p := New(cfg)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return p
}

// whyLog records the Wait of every Suspend of one caller.
type whyLog struct {
	mu   sync.Mutex
	whys []Wait
}

func (w *whyLog) add(why Wait) {
	w.mu.Lock()
	w.whys = append(w.whys, why)
	w.mu.Unlock()
}

func (w *whyLog) get() []Wait {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Wait(nil), w.whys...)
}

// goCaller is the goroutine-based test Caller: GoCaller plus a record of its parks.
type goCaller struct {
	*GoCaller
	log *whyLog
}

func (g *goCaller) OffloadHook() Hook {
	h := g.GoCaller.OffloadHook()
	inner := h.Suspend
	h.Suspend = func(why Wait) (func(), func() error) {
		g.log.add(why)
		return inner(why)
	}
	return h
}

// handle is one running test handler.
type handle struct {
	done   chan struct{}
	log    whyLog
	cancel func(err error) // cancels the handler's caller
	caller Caller
}

func (h *handle) wait(tb testing.TB) {
	tb.Helper()
	select {
	case <-h.done:
	case <-time.After(20 * time.Second):
		tb.Fatal("handler did not finish")
	}
}

func (h *handle) finished() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// harness starts handlers that use a Caller of one kind.
type harness interface {
	// start runs fn as a handler with a Caller for key on pool p.
	start(p *Pool, key string, fn func(c Caller)) *handle
	// onCaller reports whether the calling code runs as the handler (for writers).
	name() string
}

// goHarness runs each handler in its own goroutine (multi-thread mode).
type goHarness struct{}

func (goHarness) name() string { return "goroutine" }

func (goHarness) start(p *Pool, key string, fn func(c Caller)) *handle {
	ctx, cancel := context.WithCancelCause(context.Background())
	h := &handle{done: make(chan struct{}), cancel: cancel}
	c := &goCaller{GoCaller: NewGoCaller(ctx, p, key), log: &h.log}
	h.caller = c
	go func() {
		defer close(h.done)
		defer cancel(nil)
		fn(c)
	}()
	return h
}

// testLoop is a loop goroutine owning a scheduler (as in the scheduler's tests): posted
// functions are queued under a mutex, and after every batch the loop calls Run.
type testLoop struct {
	s    *scheduler.Scheduler
	mu   sync.Mutex
	q    []func()
	sig  chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func newLoop(tb testing.TB) *testLoop {
	tb.Helper()
	l := &testLoop{sig: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	l.s = scheduler.New(scheduler.Config{Post: l.post})
	go l.run()
	tb.Cleanup(l.close)
	return l
}

func (l *testLoop) post(fn func()) {
	l.mu.Lock()
	l.q = append(l.q, fn)
	l.mu.Unlock()
	select {
	case l.sig <- struct{}{}:
	default:
	}
}

func (l *testLoop) run() {
	defer close(l.done)
	more := false
	for {
		if !more {
			select {
			case <-l.sig:
			case <-l.quit:
				return
			}
		}
		l.mu.Lock()
		q := l.q
		l.q = nil
		l.mu.Unlock()
		for _, fn := range q {
			fn()
		}
		more = l.s.Run()
	}
}

// do runs fn on the loop and waits until it has run.
func (l *testLoop) do(fn func()) {
	ch := make(chan struct{})
	l.post(func() { fn(); close(ch) })
	<-ch
}

func (l *testLoop) close() {
	l.once.Do(func() {
		l.do(l.s.Close)
		close(l.quit)
		<-l.done
	})
}

// loopCaller is a handler task on the test loop: its park parks the task, and resume
// posts a wake of exactly that park through the loop's door. Everything but resume is
// loop-confined.
type loopCaller struct {
	l      *testLoop
	t      *scheduler.Task
	ctx    context.Context
	cancel context.CancelCauseFunc
	key    string
	pool   *Pool
	log    *whyLog
}

func (c *loopCaller) Context() context.Context { return c.ctx }
func (c *loopCaller) OffloadHook() Hook {
	return Hook{Pool: c.pool, Key: c.key, Suspend: c.suspend}
}

func (c *loopCaller) suspend(why Wait) (func(), func() error) {
	c.log.add(why)
	wk := c.t.Waker()
	var fired atomic.Bool
	resume := func() {
		if fired.CompareAndSwap(false, true) {
			c.l.post(func() { wk.Wake() })
		}
	}
	reason := scheduler.ReasonOffload
	if why == WaitToken {
		reason = scheduler.ReasonQueue
	}
	t := c.t
	return resume, func() error { return t.Park(reason) }
}

// loopHarness runs each handler as a task on one test loop (single-thread mode).
type loopHarness struct{ l *testLoop }

func (loopHarness) name() string { return "loop" }

func (lh loopHarness) start(p *Pool, key string, fn func(c Caller)) *handle {
	l := lh.l
	h := &handle{done: make(chan struct{})}
	ctx, cancel := context.WithCancelCause(context.Background())
	c := &loopCaller{l: l, ctx: ctx, cancel: cancel, key: key, pool: p, log: &h.log}
	h.caller = c
	var ref scheduler.Ref
	h.cancel = func(err error) {
		l.do(func() {
			c.cancel(err)
			if t := ref.Task(); t != nil {
				l.s.Cancel(t, err)
			}
		})
	}
	l.do(func() {
		t := l.s.Spawn(func(t *scheduler.Task) {
			defer close(h.done)
			defer c.cancel(nil)
			fn(c)
		}, nil)
		c.t = t
		ref = t.Ref()
	})
	return h
}

// bothModes runs test f once with goroutine handlers and once with loop tasks.
func bothModes(t *testing.T, f func(t *testing.T, hs harness)) {
	t.Run("goroutine", func(t *testing.T) { f(t, goHarness{}) })
	t.Run("loop", func(t *testing.T) { f(t, loopHarness{l: newLoop(t)}) })
}

// fakeClock is a settable clock for the predictor tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}
