package offload

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/internal/hdr"
	"github.com/batonrt/baton/internal/scheduler"
)

// The mixed-load scenario of issue 5: an open-loop arrival stream (a fixed schedule, not
// paced by completions) of 95% fast calls (1 ms) and 5% slow ones (200 ms) on a 16-token
// pool. Slow calls alone demand rate x 5% x 200 ms = 20 tokens, more than the whole pool:
// with one FIFO queue they take every token and fast calls queue behind them. With lanes
// they are confined to the slow lane (4 tokens; the rest of their flood is queued, then
// refused), and the fast lane (12 tokens against a fast demand of about 2) never queues.
const (
	mixTokens   = 16
	mixRate     = 2000 // calls/s
	mixDuration = 2 * time.Second
	mixFast     = time.Millisecond
	mixSlow     = 200 * time.Millisecond
	mixSlowEach = 20 // every 20th call is slow: 5%
)

func BenchmarkMixedLoad(b *testing.B) {
	for _, sc := range []struct {
		name          string
		slow, noLanes bool
	}{
		{"noslow", false, false},
		{"lanes", true, false},
		{"nolanes", true, true},
	} {
		b.Run(sc.name, func(b *testing.B) { runMixed(b, sc.slow, sc.noLanes) })
	}
}

// runMixed runs the scenario once (whatever b.N: it has a fixed length) and reports the
// latency of fast calls (admission wait + run, as the handler sees it).
func runMixed(b *testing.B, withSlow, noLanes bool) {
	// The per-key cap is off: this compares lanes with one FIFO, and with the cap the slow
	// route (one key) could not take more than half of the pool even without lanes.
	p := New(Config{Tokens: mixTokens, NoLanes: noLanes, MaxWaiting: 256, MaxKeyShare: 1})
	defer p.Close(context.Background())
	slowCtx, stopSlow := context.WithCancel(context.Background())
	defer stopSlow()

	var (
		mu                   sync.Mutex
		fastLat              = hdr.New(hdr.NewLayout(int64(time.Minute/time.Microsecond), 3))
		fastRejected, slowOK int64
		wg                   sync.WaitGroup
	)
	fast := func(ctx context.Context) (int, error) { time.Sleep(mixFast); return 0, nil }
	slow := func(ctx context.Context) (int, error) {
		t := time.NewTimer(mixSlow)
		defer t.Stop()
		select {
		case <-t.C:
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	arrival := func(i int) {
		defer wg.Done()
		if i%mixSlowEach == mixSlowEach-1 {
			if !withSlow {
				return
			}
			if _, err := Do(NewGoCaller(slowCtx, p, "GET /report"), slow); err == nil {
				mu.Lock()
				slowOK++
				mu.Unlock()
			}
			return
		}
		t0 := time.Now()
		_, err := Do(NewGoCaller(context.Background(), p, "GET /users/{id}"), fast)
		d := time.Since(t0)
		mu.Lock()
		if err != nil {
			fastRejected++
		} else {
			fastLat.Record(int64(d / time.Microsecond))
		}
		mu.Unlock()
	}

	b.ResetTimer()
	interval := time.Second / mixRate
	n := int(mixDuration / interval)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go arrival(i)
	}
	stopSlow() // end the slow flood so that the queues drain quickly
	wg.Wait()
	b.StopTimer()

	ms := func(us int64) float64 { return float64(us) / 1000 }
	b.ReportMetric(ms(fastLat.ValueAtQuantile(50)), "fast-p50-ms")
	b.ReportMetric(ms(fastLat.ValueAtQuantile(99)), "fast-p99-ms")
	b.ReportMetric(ms(fastLat.ValueAtQuantile(100)), "fast-max-ms")
	b.ReportMetric(float64(fastRejected), "fast-rejected")
	b.ReportMetric(float64(slowOK), "slow-done")
	b.ReportMetric(0, "ns/op")
	st := p.Stats()
	b.Logf("fast lane: %d tokens, wait p99 %v, run p99 %v; slow lane: %d tokens, %d started, %d rejected; fast calls %d",
		st.Lanes[laneFast].Tokens, st.Lanes[laneFast].Wait.P99, st.Lanes[laneFast].Run.P99,
		st.Lanes[laneSlow].Tokens, st.Lanes[laneSlow].Started, st.Lanes[laneSlow].Rejected, fastLat.TotalCount())
}

func nop(context.Context) (int, error) { return 0, nil }

// Do round trip from a goroutine Caller (worker hand-off, resume by channel).
func BenchmarkDoGoCaller(b *testing.B) {
	p := New(Config{})
	defer p.Close(context.Background())
	c := NewGoCaller(context.Background(), p, "GET /x")
	b.ReportAllocs()
	c0 := processCPU()
	for b.Loop() {
		if _, err := Do(c, nop); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
}

// processCPU returns the CPU time the process has used (every goroutine: here the caller's
// and the worker's), in nanoseconds. On a machine shared with other work it leaves out the
// time spent waiting for a core, so "cpu-ns/op" is steadier than ns/op there.
func processCPU() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
	return ts.Nano()
}

// Do from many goroutines at once.
func BenchmarkDoGoCallerParallel(b *testing.B) {
	p := New(Config{})
	defer p.Close(context.Background())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := NewGoCaller(context.Background(), p, "GET /x")
		for pb.Next() {
			if _, err := Do(c, nop); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// Do round trip from a task on a scheduler loop (park, worker, resume through the door).
func BenchmarkDoLoopCaller(b *testing.B) {
	p := New(Config{})
	defer p.Close(context.Background())
	l := newLoop(b)
	done := make(chan struct{})
	n := b.N
	b.ReportAllocs()
	b.ResetTimer()
	l.do(func() {
		l.s.Spawn(func(t *scheduler.Task) {
			defer close(done)
			ctx := context.Background()
			c := &loopCaller{l: l, t: t, ctx: ctx, cancel: func(error) {}, key: "GET /x", pool: p, log: &whyLog{}}
			for range n {
				if _, err := Do(c, nop); err != nil {
					b.Error(err)
					return
				}
				c.log.whys = c.log.whys[:0]
			}
		}, nil)
	})
	<-done
}

func BenchmarkTryEnterLeave(b *testing.B) {
	g := NewGate("g", 1, 0)
	b.ReportAllocs()
	for b.Loop() {
		if !g.TryEnter() {
			b.Fatal("full")
		}
		g.Leave()
	}
}

func BenchmarkTryEnterLeaveParallel(b *testing.B) {
	g := NewGate("g", 1<<20, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if g.TryEnter() {
				g.Leave()
			}
		}
	})
}

// BenchmarkGoroutineHandoff is the floor Do's round trip is compared with: the same
// function run on a new goroutine, its result handed back over a channel.
func BenchmarkGoroutineHandoff(b *testing.B) {
	ctx := context.Background()
	ch := make(chan int)
	b.ReportAllocs()
	c0 := processCPU()
	for b.Loop() {
		go func() {
			v, _ := nop(ctx)
			ch <- v
		}()
		<-ch
	}
	b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkWorkerHandoff is the same floor with a long-lived worker goroutine, as a pool
// has: the function goes over one channel and its result comes back over another.
func BenchmarkWorkerHandoff(b *testing.B) {
	ctx := context.Background()
	in := make(chan func(context.Context) (int, error))
	out := make(chan int)
	go func() {
		for fn := range in {
			v, _ := fn(ctx)
			out <- v
		}
	}()
	defer close(in)
	b.ReportAllocs()
	c0 := processCPU()
	for b.Loop() {
		in <- nop
		<-out
	}
	b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
}
