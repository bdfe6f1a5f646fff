package offload

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var errGone = errors.New("test: client gone")

func TestDoResult(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 2})
		var (
			v      int
			err    error
			marked bool
		)
		h := hs.start(p, "GET /a", func(c Caller) {
			v, err = Do(c, func(ctx context.Context) (int, error) {
				marked = inPool(ctx)
				return 42, nil
			})
		})
		h.wait(t)
		if v != 42 || err != nil || !marked {
			t.Fatalf("Do = %d, %v (marked %v); want 42, nil, true", v, err, marked)
		}
		want := errors.New("boom")
		h = hs.start(p, "GET /a", func(c Caller) {
			_, err = Do(c, func(ctx context.Context) (struct{}, error) { return struct{}{}, want })
		})
		h.wait(t)
		if err != want {
			t.Fatalf("Do error = %v; want %v", err, want)
		}
		st := p.Stats()
		if st.Lanes[laneFast].Completed != 2 || st.Lanes[laneFast].InUse != 0 || st.Workers > st.Tokens {
			t.Fatalf("stats after two calls: %+v", st.Lanes[laneFast])
		}
		if k, ok := st.key("GET /a"); !ok || k.Calls != 2 || k.Lane != "fast" {
			t.Fatalf("key stats = %+v, %v", k, ok)
		}
	})
}

// Waiting tasks get tokens in arrival order.
func TestFIFO(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 1})
		block := make(chan struct{})
		started := make(chan int, 16)
		run := func(i int) *handle {
			return hs.start(p, "GET /q", func(c Caller) {
				_, err := Do(c, func(ctx context.Context) (int, error) {
					started <- i
					if i == 0 {
						<-block
					}
					return i, nil
				})
				if err != nil {
					t.Errorf("call %d: %v", i, err)
				}
			})
		}
		hs0 := []*handle{run(0)}
		if got := <-started; got != 0 {
			t.Fatalf("first start = %d", got)
		}
		for i := 1; i <= 6; i++ {
			hs0 = append(hs0, run(i))
			waitUntil(t, fmt.Sprintf("%d waiting", i), func() bool { return p.Stats().Lanes[laneFast].Waiting == i })
		}
		close(block)
		for i := 1; i <= 6; i++ {
			if got := <-started; got != i {
				t.Fatalf("start #%d was call %d: not FIFO", i, got)
			}
		}
		for _, h := range hs0 {
			h.wait(t)
		}
		// Every queued caller parked first for a token, then for its result (or not at all
		// if the result was already there).
		for i, h := range hs0[1:] {
			w := h.log.get()
			if len(w) == 0 || w[0] != WaitToken || len(w) > 2 || (len(w) == 2 && w[1] != WaitResult) {
				t.Fatalf("call %d parked as %v; want [token result]", i+1, w)
			}
		}
		if w := hs0[0].log.get(); !slices.Equal(w, []Wait{WaitResult}) {
			t.Fatalf("first call parked as %v; want [result]", w)
		}
	})
}

// Cancelling the caller while its function runs: Do returns at once with the caller's
// error, the function's context is cancelled, and the token is held until the function
// really returns.
func TestCancelReachesFunction(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 2})
		running, sawCancel, hold := make(chan struct{}), make(chan error, 1), make(chan struct{})
		var err error
		h := hs.start(p, "GET /c", func(c Caller) {
			_, err = Do(c, func(ctx context.Context) (int, error) {
				close(running)
				<-ctx.Done()
				sawCancel <- ctx.Err()
				<-hold
				return 1, nil
			})
		})
		<-running
		h.cancel(errGone)
		h.wait(t) // Do returned while the function is still held
		if err != errGone {
			t.Fatalf("Do = %v; want %v", err, errGone)
		}
		if e := <-sawCancel; !errors.Is(e, context.Canceled) {
			t.Fatalf("function ctx err = %v", e)
		}
		if st := p.Stats().Lanes[laneFast]; st.InUse != 1 || st.Cancelled != 1 {
			t.Fatalf("after cancel: in use %d cancelled %d; want 1, 1 (token kept until return)", st.InUse, st.Cancelled)
		}
		close(hold)
		waitUntil(t, "token released", func() bool { return p.Stats().Lanes[laneFast].InUse == 0 })
		if st := p.Stats().Lanes[laneFast]; st.Completed != 1 {
			t.Fatalf("completed = %d", st.Completed)
		}
	})
}

func TestCancelWhileQueued(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 1})
		hold := make(chan struct{})
		first := hs.start(p, "k", func(c Caller) {
			Do(c, func(ctx context.Context) (int, error) { <-hold; return 0, nil })
		})
		waitUntil(t, "first running", func() bool { return p.Stats().Lanes[laneFast].InUse == 1 })
		ran := false
		var err error
		h := hs.start(p, "k", func(c Caller) {
			_, err = Do(c, func(ctx context.Context) (int, error) { ran = true; return 0, nil })
		})
		waitUntil(t, "second queued", func() bool { return p.Stats().Lanes[laneFast].Waiting == 1 })
		h.cancel(errGone)
		h.wait(t)
		if err != errGone || ran {
			t.Fatalf("queued cancel: err %v ran %v", err, ran)
		}
		if st := p.Stats().Lanes[laneFast]; st.Waiting != 0 || st.Cancelled != 1 {
			t.Fatalf("waiting %d cancelled %d", st.Waiting, st.Cancelled)
		}
		close(hold)
		first.wait(t)
	})
}

func panicky(ctx context.Context) (int, error) { panic("kaboom") }

func TestPanicBecomesError(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 1})
		var err error
		hs.start(p, "k", func(c Caller) { _, err = Do(c, panicky) }).wait(t)
		var pe *PanicError
		if !errors.Is(err, ErrPanicked) || !errors.As(err, &pe) || pe.Value != "kaboom" ||
			!strings.Contains(err.Error(), "panicky") {
			t.Fatalf("Do = %v; want a PanicError with the stack", err)
		}
		// runtime.Goexit in the function is reported too, and the pool keeps working.
		hs.start(p, "k", func(c Caller) {
			_, err = Do(c, func(context.Context) (int, error) { runtime.Goexit(); return 0, nil })
		}).wait(t)
		if !errors.Is(err, ErrPanicked) {
			t.Fatalf("Goexit: %v", err)
		}
		var v int
		hs.start(p, "k", func(c Caller) {
			v, err = Do(c, func(context.Context) (int, error) { return 7, nil })
		}).wait(t)
		if v != 7 || err != nil {
			t.Fatalf("after panics: %d, %v", v, err)
		}
		if st := p.Stats().Lanes[laneFast]; st.Panicked != 2 || st.InUse != 0 {
			t.Fatalf("panicked %d in use %d", st.Panicked, st.InUse)
		}
	})
}

func TestQueueFull(t *testing.T) {
	p := newPool(t, Config{Tokens: 1, MaxWaiting: 2})
	hs := goHarness{}
	hold := make(chan struct{})
	var handles []*handle
	for i := range 3 {
		handles = append(handles, hs.start(p, "k", func(c Caller) {
			Do(c, func(context.Context) (int, error) { <-hold; return 0, nil })
		}))
		waitUntil(t, "admitted", func() bool {
			st := p.Stats().Lanes[laneFast]
			return st.InUse+st.Waiting == i+1
		})
	}
	var err error
	hs.start(p, "k", func(c Caller) {
		_, err = Do(c, func(context.Context) (int, error) { return 0, nil })
	}).wait(t)
	if err != ErrQueueFull {
		t.Fatalf("4th call = %v; want ErrQueueFull", err)
	}
	if st := p.Stats().Lanes[laneFast]; st.Rejected != 1 || st.Waiting != 2 {
		t.Fatalf("rejected %d waiting %d", st.Rejected, st.Waiting)
	}
	close(hold)
	for _, h := range handles {
		h.wait(t)
	}
}

func TestTimeout(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 1})
		hold := make(chan struct{})
		var ctxErr error
		var err, err2 error
		h := hs.start(p, "k", func(c Caller) {
			_, err = Do(c, func(ctx context.Context) (int, error) {
				<-ctx.Done()
				ctxErr = ctx.Err()
				<-hold
				return 0, nil
			}, Timeout(10*time.Millisecond))
		})
		h.wait(t) // returns at the deadline, while the function is held
		if err != context.DeadlineExceeded {
			t.Fatalf("Do = %v; want DeadlineExceeded", err)
		}
		// A queued call times out too, and leaves the queue.
		hs.start(p, "k", func(c Caller) {
			_, err2 = Do(c, func(context.Context) (int, error) { return 0, nil }, Timeout(10*time.Millisecond))
		}).wait(t)
		if err2 != context.DeadlineExceeded {
			t.Fatalf("queued Do = %v", err2)
		}
		st := p.Stats().Lanes[laneFast]
		if st.TimedOut != 2 || st.Waiting != 0 || st.InUse != 1 {
			t.Fatalf("timed out %d waiting %d in use %d", st.TimedOut, st.Waiting, st.InUse)
		}
		close(hold)
		waitUntil(t, "token back", func() bool { return p.Stats().Lanes[laneFast].InUse == 0 })
		if ctxErr != context.DeadlineExceeded {
			t.Fatalf("function ctx = %v", ctxErr)
		}
	})
}

func TestClose(t *testing.T) {
	p := New(Config{Tokens: 1})
	hs := goHarness{}
	hold := make(chan struct{})
	var fnCtxErr error
	first := hs.start(p, "k", func(c Caller) {
		Do(c, func(ctx context.Context) (int, error) {
			<-hold
			fnCtxErr = ctx.Err()
			return 0, nil
		})
	})
	waitUntil(t, "running", func() bool { return p.Stats().Lanes[laneFast].InUse == 1 })
	var queuedErr error
	queued := hs.start(p, "k", func(c Caller) {
		_, queuedErr = Do(c, func(context.Context) (int, error) { return 0, nil })
	})
	waitUntil(t, "queued", func() bool { return p.Stats().Lanes[laneFast].Waiting == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Close with a running function = %v; want DeadlineExceeded", err)
	}
	queued.wait(t)
	if queuedErr != ErrClosed {
		t.Fatalf("queued call = %v; want ErrClosed", queuedErr)
	}
	var lateErr error
	hs.start(p, "k", func(c Caller) {
		_, lateErr = Do(c, func(context.Context) (int, error) { return 0, nil })
	}).wait(t)
	if lateErr != ErrClosed {
		t.Fatalf("Do after Close = %v", lateErr)
	}
	close(hold)
	first.wait(t)
	if fnCtxErr == nil {
		t.Fatal("running function's context not cancelled when Close gave up")
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if st := p.Stats(); st.Workers != 0 || !st.Closed {
		t.Fatalf("after Close: %d workers, closed %v", st.Workers, st.Closed)
	}
}

// Close with a context already done reports nothing when no function runs: a pool that
// never ran one (no worker at all), and one whose workers are idle. Close used to pick
// ctx.Done at random beside a closed done (one call in two), and to report idle workers
// still leaving as functions still running.
func TestCloseIdleWithDoneContext(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		if err := New(Config{Tokens: 2}).Close(done); err != nil {
			t.Fatalf("round %d: Close of a pool that never ran a function = %v; want nil", i, err)
		}
	}
	for i := range 50 {
		p := New(Config{Tokens: 4})
		var hs []*handle
		for range 4 { // four at once: four workers, idle afterwards
			hs = append(hs, goHarness{}.start(p, "k", func(c Caller) {
				_, _ = Do(c, func(context.Context) (int, error) { return 0, nil })
			}))
		}
		for _, h := range hs {
			h.wait(t)
		}
		waitUntil(t, "workers idle", func() bool { st := p.Stats(); return st.Lanes[laneFast].InUse == 0 })
		if err := p.Close(done); err != nil {
			t.Fatalf("round %d: Close with %d idle workers = %v; want nil", i, p.Stats().Workers, err)
		}
		if st := p.Stats(); st.Workers != 0 {
			t.Fatalf("round %d: Close returned with %d workers left", i, st.Workers)
		}
	}
}

// An offloaded function that waits on the pool gets ErrNested at once, whether it reuses
// its handler's Caller or builds one from its own context; gates likewise.
func TestNestedDetected(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 1}) // a nested wait would deadlock on one token
		g := NewGate("g", 1, 4)
		var errs [4]error
		var outer error
		hs.start(p, "k", func(c Caller) {
			_, outer = Do(c, func(ctx context.Context) (int, error) {
				if hs.name() == "goroutine" { // a loop Caller must not be touched off the loop
					_, errs[0] = Do(c, func(context.Context) (int, error) { return 0, nil })
				} else {
					errs[0] = ErrNested
				}
				inner := NewGoCaller(ctx, p, "k")
				_, errs[1] = Do(inner, func(context.Context) (int, error) { return 0, nil })
				errs[2] = g.Enter(inner)
				_, errs[3] = Copy(inner, &strings.Builder{}, func(context.Context) ([]byte, error) { return nil, nil })
				return 0, nil
			})
		}).wait(t)
		if outer != nil {
			t.Fatalf("outer Do = %v", outer)
		}
		for i, err := range errs {
			if err != ErrNested {
				t.Fatalf("nested #%d = %v; want ErrNested", i, err)
			}
		}
		if n := p.Stats().Nested; n < 2 {
			t.Fatalf("pool Nested = %d", n)
		}
		if g.Stats().Nested != 1 || g.Stats().InUse != 0 {
			t.Fatalf("gate stats %+v", g.Stats())
		}
	})
}

// A Caller already waiting in the pool is refused (the captured-Caller mistake, caught
// before the Caller is used off its goroutine).
func TestNestedSameCaller(t *testing.T) {
	p := newPool(t, Config{Tokens: 1})
	c := NewGoCaller(context.Background(), p, "k")
	var inner error
	_, err := Do(c, func(ctx context.Context) (int, error) {
		_, inner = Do(c, func(context.Context) (int, error) { return 0, nil })
		return 0, nil
	})
	if err != nil || inner != ErrNested {
		t.Fatalf("outer %v inner %v; want nil, ErrNested", err, inner)
	}
	// The Caller is free again afterwards.
	if _, err := Do(c, func(context.Context) (int, error) { return 0, nil }); err != nil {
		t.Fatalf("reuse: %v", err)
	}
}

// At most Tokens workers exist, and idle ones exit after IdleTimeout.
func TestWorkersBoundedAndIdleExit(t *testing.T) {
	p := newPool(t, Config{Tokens: 4, IdleTimeout: 5 * time.Millisecond})
	var wg sync.WaitGroup
	maxWorkers := 0
	var mu sync.Mutex
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := NewGoCaller(context.Background(), p, fmt.Sprint("k", i%3))
			Do(c, func(context.Context) (int, error) {
				st := p.Stats()
				mu.Lock()
				maxWorkers = max(maxWorkers, st.Workers)
				mu.Unlock()
				return 0, nil
			})
		}()
	}
	wg.Wait()
	if maxWorkers > 4 || maxWorkers < 1 {
		t.Fatalf("max workers %d; want 1..4", maxWorkers)
	}
	waitUntil(t, "idle workers exit", func() bool { return p.Stats().Workers == 0 })
	// Workers come back on demand.
	if _, err := Do(NewGoCaller(context.Background(), p, "k"), func(context.Context) (int, error) { return 0, nil }); err != nil {
		t.Fatal(err)
	}
}

func TestLaneString(t *testing.T) {
	if laneFast.String() != "fast" || laneSlow.String() != "slow" || lane(7).String() != "lane(7)" {
		t.Fatal("String methods")
	}
}
