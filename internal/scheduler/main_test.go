package scheduler

import (
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// leakOpts are the options of every goleak check: they ignore the coroutine that
// TestGoexitOnLockedLoopLeaksTheCoroutine leaks on purpose.
var leakOpts = []goleak.Option{goleak.IgnoreAnyFunction("github.com/batonrt/baton/internal/scheduler.(*Task).goexit")}

// TestMain checks that no test leaks a goroutine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakOpts...) }

// newSync returns a scheduler driven by the calling goroutine (the test is the loop). Posts
// are counted and dropped: Run fires due timers itself.
func newSync(tb testing.TB, cfg Config) *Scheduler {
	tb.Helper()
	if cfg.Post == nil {
		cfg.Post = func(func()) {}
	}
	s := New(cfg)
	tb.Cleanup(s.Close)
	return s
}

// testLoop is a loop goroutine that owns a scheduler: posted functions are queued under a
// mutex, and after every batch the loop calls Run (again at once while it reports more).
type testLoop struct {
	s     *Scheduler
	mu    sync.Mutex
	q     []func()
	posts int
	sig   chan struct{}
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newLoop(tb testing.TB, cfg Config) *testLoop {
	tb.Helper()
	l := &testLoop{sig: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	cfg.Post = l.post
	l.s = New(cfg)
	go l.run()
	tb.Cleanup(l.close)
	return l
}

func (l *testLoop) post(fn func()) {
	l.mu.Lock()
	l.q = append(l.q, fn)
	l.posts++
	l.mu.Unlock()
	select {
	case l.sig <- struct{}{}:
	default:
	}
}

func (l *testLoop) postCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.posts
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

// close closes the scheduler on the loop and stops the loop goroutine.
func (l *testLoop) close() {
	l.once.Do(func() {
		l.do(l.s.Close)
		close(l.quit)
		<-l.done
	})
}
