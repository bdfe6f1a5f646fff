package scheduler

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func benchConfigs(b *testing.B, fn func(b *testing.B, cfg Config)) {
	b.Run("acct=on", func(b *testing.B) { fn(b, Config{}) })
	b.Run("acct=off", func(b *testing.B) { fn(b, Config{NoAccounting: true}) })
}

// BenchmarkParkResume: a task parks, the loop wakes it and runs it (one round trip).
func BenchmarkParkResume(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		task := s.Go(func(t *Task) {
			for t.Park(ReasonOther) == nil {
			}
		})
		s.Run()
		b.ReportAllocs()
		c0 := processCPU()
		for b.Loop() {
			s.Wake(task)
			s.Run()
		}
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkParkResumeAt is BenchmarkParkResume with the wake given a clock reading the
// loop already holds (Waker.WakeAt with the turn's reading, as the loop's door does), so
// the round trip reads the clock twice with accounting on instead of three times. The
// reading is taken once, outside the loop, standing for the turn's.
func BenchmarkParkResumeAt(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		var wk Waker
		s.Go(func(t *Task) {
			for {
				wk = t.Waker()
				if t.Park(ReasonOther) != nil {
					return
				}
			}
		})
		s.Run()
		turn := s.Now()
		b.ReportAllocs()
		c0 := processCPU()
		for b.Loop() {
			wk.WakeAt(turn)
			s.Run()
		}
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkParkResumeRunAt is BenchmarkParkResumeAt with Run given the same reading
// (RunAt), as the loop's door does when its batch held only wakes: with accounting on the
// round trip reads the clock once, at the end of the slice. The reading is taken once,
// outside the loop, standing for the turn's (the loop reads it once per turn, whatever the
// number of wakes in the batch).
func BenchmarkParkResumeRunAt(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		var wk Waker
		s.Go(func(t *Task) {
			for {
				wk = t.Waker()
				if t.Park(ReasonOther) != nil {
					return
				}
			}
		})
		s.Run()
		turn := s.Now()
		b.ReportAllocs()
		c0 := processCPU()
		for b.Loop() {
			wk.WakeAt(turn)
			s.RunAt(turn)
		}
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
}

// processCPU returns the CPU time the process has used, in nanoseconds. On a machine
// shared with other work it leaves out the time spent waiting for a core, so "cpu-ns/op"
// is steadier than ns/op there.
func processCPU() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
	return ts.Nano()
}

func nop(*Task) {}

// BenchmarkSpawnRun: spawn a task that returns at once and run it (the per-request
// dispatch overhead of the scheduler, with a pooled coroutine).
func BenchmarkSpawnRun(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		arg := new(int)
		b.ReportAllocs()
		for b.Loop() {
			s.Spawn(nop, arg)
			s.Run()
		}
	})
}

// BenchmarkSpawnNowAt: the loop's request path, a task that returns at once run inside
// SpawnNowAt, each call given the previous call's end reading as the loop does within a
// callback (a pooled coroutine, one clock reading per task with accounting on).
func BenchmarkSpawnNowAt(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		arg := new(int)
		end := s.Now()
		b.ReportAllocs()
		c0 := processCPU()
		for b.Loop() {
			end = s.SpawnNowAt(nop, arg, end, end)
		}
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkYield: a task yields, the loop runs it again.
func BenchmarkYield(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		s.Go(func(t *Task) {
			for {
				t.Yield()
			}
		})
		b.ReportAllocs()
		for b.Loop() {
			s.Run()
		}
	})
}

// BenchmarkSleepTimer: a task sleeps 1 ns; Run fires its timer (heap insert, pop, wake) and
// resumes it.
func BenchmarkSleepTimer(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		s.Go(func(t *Task) {
			for t.Sleep(time.Nanosecond) == nil {
			}
		})
		s.Run()
		b.ReportAllocs()
		for b.Loop() {
			s.Run()
		}
	})
}

// BenchmarkFuture: a task awaits a future that the loop resolves.
func BenchmarkFuture(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		var f Future[int]
		s.Go(func(t *Task) {
			for {
				if _, err := f.Await(t); err != nil {
					return
				}
				f = Future[int]{}
			}
		})
		s.Run()
		b.ReportAllocs()
		for b.Loop() {
			f.Resolve(1, nil)
			s.Run()
		}
	})
}

// BenchmarkSpawnRunNoPool: as BenchmarkSpawnRun with MaxIdle -1, so every task creates and
// stops a coroutine (what pooling saves).
func BenchmarkSpawnRunNoPool(b *testing.B) {
	s := newSync(b, Config{MaxIdle: -1})
	arg := new(int)
	b.ReportAllocs()
	for b.Loop() {
		s.Spawn(nop, arg)
		s.Run()
	}
}

// BenchmarkParkTimeoutWake: a task parks with a deadline, the loop wakes it before the
// deadline and runs it (ParkResume plus adding and removing the deadline's timer).
func BenchmarkParkTimeoutWake(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		task := s.Go(func(t *Task) {
			for t.ParkTimeout(ReasonOther, time.Hour) == nil {
			}
		})
		s.Run()
		b.ReportAllocs()
		c0 := processCPU()
		for b.Loop() {
			s.Wake(task)
			s.Run()
		}
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkEventWaitTimeoutSet: a task waits for an event with a deadline; the loop sets
// the event and runs the task, which waits for the next one.
func BenchmarkEventWaitTimeoutSet(b *testing.B) {
	benchConfigs(b, func(b *testing.B, cfg Config) {
		s := newSync(b, cfg)
		evs := [2]*Event{NewEvent(s), NewEvent(s)}
		task := s.Go(func(t *Task) {
			for i := 0; ; i++ {
				e := evs[i&1]
				if e.WaitTimeout(t, time.Hour) != nil {
					return
				}
				e.set = false // reuse the two events (test only)
			}
		})
		_ = task
		s.Run()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			evs[i&1].Set()
			i++
			s.Run()
		}
	})
}
