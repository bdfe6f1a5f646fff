package room

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/stats"
)

// BenchmarkRoomTick measures what a room tick costs the loop: 1,000 rooms whose period is
// so short that the loop does nothing but tick them (late ticks are skipped), so one op is
// one tick of an empty tick function, timers, deadline arithmetic and accounting
// included. allocs/op counts every goroutine's allocations: the goal is 0. Compare with
// BenchmarkEveryTick (the same load on Loop.Every) in the same run.
func BenchmarkRoomTick(b *testing.B) {
	for _, acct := range []bool{true, false} {
		b.Run(fmt.Sprintf("accounting=%v", acct), func(b *testing.B) {
			s, _ := startServer(b, loop.Config{NoAccounting: !acct, StallThreshold: -1}, nil)
			done := make(chan struct{})
			count, target := 0, 0
			rooms := make([]*Room[int], 1000)
			looptest.OnLoop(b, s.Loop(0), func() {
				for i := range rooms {
					r, err := New(s.Loop(0), Config[int]{Name: fmt.Sprint("r", i), Period: 100 * time.Microsecond,
						Tick: func(*Room[int], *Tick[int]) {
							if count++; count == target {
								close(done)
							}
						}})
					if err != nil {
						b.Fatal(err)
					}
					rooms[i] = r
				}
			})
			time.Sleep(50 * time.Millisecond) // warm up: queues grown, coroutines made
			b.ReportAllocs()
			looptest.OnLoop(b, s.Loop(0), func() { count, target = 0, b.N })
			b.ResetTimer()
			<-done
			b.StopTimer()
			for _, r := range rooms {
				r.Stop()
			}
			for _, r := range rooms {
				<-r.Done()
			}
		})
	}
}

// BenchmarkEveryTick is BenchmarkRoomTick's load on Loop.Every: the baseline a room's
// tick adds its deadline policy, budget check and figures to.
func BenchmarkEveryTick(b *testing.B) {
	s, _ := startServer(b, loop.Config{StallThreshold: -1}, nil)
	done := make(chan struct{})
	count, target := 0, 0
	hs := make([]*loop.TaskHandle, 1000)
	for i := range hs {
		hs[i] = s.Loop(0).Every(fmt.Sprint("e", i), 100*time.Microsecond, func(*loop.Task) {
			if count++; count == target {
				close(done)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	b.ReportAllocs()
	looptest.OnLoop(b, s.Loop(0), func() { count, target = 0, b.N })
	b.ResetTimer()
	<-done
	b.StopTimer()
	for _, h := range hs {
		h.Stop()
		<-h.Done()
	}
}

// BenchmarkRooms20Hz runs the load for one second per op: 1,000 rooms at 20 Hz
// (20,000 ticks/s), each tick draining its inputs and spinning ~20 µs of simulation, and
// reports the loop's busy time per tick (work=0: the machinery alone), loop utilisation and the rooms' p99 tick
// lateness. Run it with -benchtime=3x.
func BenchmarkRooms20Hz(b *testing.B) {
	for _, work := range []time.Duration{0, 20 * time.Microsecond} {
		b.Run(fmt.Sprintf("work=%v", work), func(b *testing.B) { benchRooms20Hz(b, work) })
	}
}

func benchRooms20Hz(b *testing.B, work time.Duration) {
	s, _ := startServer(b, loop.Config{StallThreshold: -1}, nil)
	rooms := make([]*Room[int], 1000)
	looptest.OnLoop(b, s.Loop(0), func() {
		for i := range rooms {
			r, err := New(s.Loop(0), Config[int]{Name: fmt.Sprint("r", i), Period: 50 * time.Millisecond,
				Tick: func(r *Room[int], t *Tick[int]) {
					t.DrainInputs(func(int) {})
					if work > 0 {
						spinFor(work)
					}
				}})
			if err != nil {
				b.Fatal(err)
			}
			rooms[i] = r
		}
	})
	time.Sleep(200 * time.Millisecond)
	var busy0 time.Duration
	var ticks0 uint64
	read := func() (busy time.Duration, ticks uint64) {
		busy = loopBusy(b, s)
		looptest.OnLoop(b, s.Loop(0), func() {
			for _, r := range rooms {
				ticks += r.core.rec.Snapshot(0).Ticks
			}
		})
		return
	}
	busy0, ticks0 = read()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	elapsed := time.Since(start)
	busy1, ticks1 := read()
	var p99, maxLate time.Duration
	looptest.OnLoop(b, s.Loop(0), func() {
		for _, r := range rooms {
			st := r.Stats()
			p99 = max(p99, st.TickLateness.P99)
			maxLate = max(maxLate, st.TickLateness.Max)
		}
	})
	n := float64(ticks1 - ticks0)
	b.ReportMetric(float64(busy1-busy0)/n, "loop-ns/tick")
	b.ReportMetric(n/elapsed.Seconds(), "ticks/s")
	b.ReportMetric(float64(busy1-busy0)/float64(elapsed), "utilisation")
	b.ReportMetric(float64(p99)/1e6, "worst-room-p99-late-ms")
	b.ReportMetric(float64(maxLate)/1e6, "max-late-ms")
	for _, r := range rooms {
		r.Stop()
	}
	for _, r := range rooms {
		<-r.Done()
	}
}

// BenchmarkEvery20Hz is BenchmarkRooms20Hz/work=0s on Loop.Every: the baseline for the
// loop's busy time per tick.
func BenchmarkEvery20Hz(b *testing.B) {
	s, _ := startServer(b, loop.Config{StallThreshold: -1}, nil)
	var ticks uint64 // loop-confined
	hs := make([]*loop.TaskHandle, 1000)
	for i := range hs {
		hs[i] = s.Loop(0).Every(fmt.Sprint("e", i), 50*time.Millisecond, func(*loop.Task) { ticks++ })
	}
	time.Sleep(200 * time.Millisecond)
	read := func() (busy time.Duration, n uint64) {
		busy = loopBusy(b, s)
		looptest.OnLoop(b, s.Loop(0), func() { n = ticks })
		return
	}
	busy0, ticks0 := read()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	elapsed := time.Since(start)
	busy1, ticks1 := read()
	n := float64(ticks1 - ticks0)
	b.ReportMetric(float64(busy1-busy0)/n, "loop-ns/tick")
	b.ReportMetric(n/elapsed.Seconds(), "ticks/s")
	b.ReportMetric(float64(busy1-busy0)/float64(elapsed), "utilisation")
	for _, h := range hs {
		h.Stop()
		<-h.Done()
	}
}

// loopBusy returns the loop's busy time so far (Snapshot's loop section), read off the loop.
func loopBusy(b *testing.B, s *loop.Server) time.Duration {
	b.Helper()
	snap, err := stats.Take(context.Background(), s, stats.ViewLoop)
	if err != nil {
		b.Fatal(err)
	}
	return snap.Loop.BusyTotal
}
