package loop

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrt/baton/internal/scheduler"
)

// BenchmarkTickLateness measures how late deadline ticks (a task sleeping to absolute
// deadlines, as a room's tick task does) start on an otherwise idle loop, with
// the scheduler's alarm as the loop makes it by default (alarm=timerfd: newAlarm,
// timerSlack) and with the runtime timer (alarm=runtime: time.AfterFunc, no slack). One op is
// one tick; the ticks are empty. Cases: one room at 500 Hz (a lone timer), and 250 rooms at
// 20 Hz staggered over the period (the bench harness's rooms scenario at -quick, without
// its inputs and its 20 µs of work). It reports the lateness percentiles (Tick.Late: from
// the deadline to the tick's start), the process's CPU time per tick, and the alarm's
// fires per tick (each one wakes the loop). Run the cases in one invocation and compare
// within it, e.g. -bench TickLateness -benchtime=2000x -count=3.
func BenchmarkTickLateness(b *testing.B) {
	for _, c := range []struct {
		rooms  int
		period time.Duration
	}{{1, 2 * time.Millisecond}, {250, 50 * time.Millisecond}} {
		for _, kind := range []string{"runtime", "timerfd"} {
			b.Run(fmt.Sprintf("rooms=%d/period=%v/alarm=%s", c.rooms, c.period, kind), func(b *testing.B) {
				benchTickLateness(b, c.rooms, c.period, kind == "timerfd")
			})
		}
	}
}

// countingAlarm counts its fires.
type countingAlarm struct {
	scheduler.Alarm
	n *atomic.Int64
}

// runtimeAlarm is the scheduler's default alarm, a runtime timer, for comparison.
type runtimeAlarm struct {
	fire func()
	tmr  *time.Timer
}

func (a *runtimeAlarm) Arm(d time.Duration) {
	if a.tmr == nil {
		a.tmr = time.AfterFunc(d, a.fire)
		return
	}
	a.tmr.Reset(d)
}

func (a *runtimeAlarm) Close() {
	if a.tmr != nil {
		a.tmr.Stop()
	}
}

func benchTickLateness(b *testing.B, rooms int, period time.Duration, precise bool) {
	var fires atomic.Int64
	saved, savedSlack := newAlarm, timerSlack
	b.Cleanup(func() { newAlarm, timerSlack = saved, savedSlack })
	newAlarm = func(fire func(), spare bool) scheduler.Alarm {
		counted := func() { fires.Add(1); fire() }
		if precise {
			return countingAlarm{saved(counted, spare), &fires}
		}
		return &runtimeAlarm{fire: counted}
	}
	if !precise {
		timerSlack = 0
	}
	s, _ := startServer(b, Config{StallThreshold: -1}, nil)
	late := make([]time.Duration, 0, b.N)
	done := make(chan struct{})
	recording := false // loop-confined
	// Tickers (a task each, sleeping to absolute deadlines as a room's tick task does) are
	// made over one period, from a task, so that their deadlines spread over it.
	stopped := make(chan struct{})
	var handles []*TaskHandle
	s.Loop(0).Go("tickers-setup", func(t *Task) {
		for i := range rooms {
			handles = append(handles, s.Loop(0).Go(fmt.Sprint("r", i), func(tk *Task) {
				next := s.nanotime() + int64(period)
				for {
					if err := tk.Sleep(time.Duration(next - s.nanotime())); err != nil {
						return
					}
					if recording && len(late) < cap(late) {
						if late = append(late, time.Duration(s.nanotime()-next)); len(late) == cap(late) {
							close(done)
						}
					}
					next += int64(period)
					if now := s.nanotime(); next <= now { // late: skip the deadlines missed
						next += ((now-next)/int64(period) + 1) * int64(period)
					}
				}
			}))
			_ = t.Sleep(period / time.Duration(rooms))
		}
		close(stopped)
	})
	<-stopped
	time.Sleep(4 * period) // warm up
	cpu0, fires0 := processCPU(), fires.Load()
	b.ResetTimer()
	inLoop(b, s, func() { recording = true })
	<-done
	b.StopTimer()
	cpu, nfires := processCPU()-cpu0, fires.Load()-fires0
	inLoop(b, s, func() {
		for _, h := range handles {
			h.Stop()
		}
	})
	for _, h := range handles {
		<-h.Done()
	}
	slices.Sort(late)
	pct := func(p float64) float64 { return float64(late[int(p*float64(len(late)-1))]) }
	b.ReportMetric(pct(0.5), "p50-late-ns")
	b.ReportMetric(pct(0.99), "p99-late-ns")
	b.ReportMetric(float64(late[len(late)-1]), "max-late-ns")
	b.ReportMetric(float64(cpu)/float64(len(late)), "cpu-ns/tick")
	b.ReportMetric(float64(nfires)/float64(len(late)), "wakes/tick")
}
