package loop

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/recorder"
)

// BenchmarkEcosystemCost measures what the optional ecosystem features add to
// BenchmarkServeNoIO's request path, against the same server without them, interleaved in
// one run: pprof route labels and a request hook that does nothing (the access logger's own
// share, its Record, is loop/accesslog's BenchmarkRecord). Time is the loop
// thread's CPU time (the benchmark is locked to its thread, which runs the fake server and
// its coroutines), which descheduling on a shared machine does not inflate.
func BenchmarkEcosystemCost(b *testing.B) {
	if !recorder.ThreadCPUSupported {
		b.Skip("no thread CPU clock here")
	}
	noop := func(*accounting.RequestRecord) {}
	variants := []struct {
		name string
		cfg  func(b *testing.B) Config
	}{
		{"labels", func(*testing.B) Config { return Config{ProfileLabels: true} }},
		{"hook-noop", func(*testing.B) Config { return Config{OnRequestDone: noop} }},
	}
	for _, v := range variants {
		for _, depth := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/depth=%d", v.name, depth), func(b *testing.B) {
				lockForCPUClock()
				base := newFakeServer(b, Config{}, 1, depth)
				with := newFakeServer(b, v.cfg(b), 1, depth)
				reads := max(4096/depth, 1)
				b.ReportAllocs()
				b.ResetTimer()
				var tBase, tWith time.Duration
				n := 0
				for r := 0; n < b.N; r++ {
					if r%2 == 0 {
						tBase += cpuServe(base, reads)
						tWith += cpuServe(with, reads)
					} else {
						tWith += cpuServe(with, reads)
						tBase += cpuServe(base, reads)
					}
					n += reads * depth
				}
				b.StopTimer()
				base.check(b)
				with.check(b)
				b.ReportMetric(float64(tBase.Nanoseconds())/float64(n), "base-ns/req")
				b.ReportMetric(float64(tWith.Nanoseconds())/float64(n), "with-ns/req")
				b.ReportMetric((float64(tWith)/float64(tBase)-1)*100, "cost-%")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkServeCPU is BenchmarkServeNoIO's default server (accounting on, no option of
// this file set) timed by the thread's CPU clock: for comparing two builds (run their test
// binaries in turn), where one build's extra nil checks are far below the spread that
// descheduling puts into wall-clock figures on a shared machine.
func BenchmarkServeCPU(b *testing.B) {
	if !recorder.ThreadCPUSupported {
		b.Skip("no thread CPU clock here")
	}
	for _, depth := range []int{1, 16} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			lockForCPUClock()
			fs := newFakeServer(b, Config{}, 1, depth)
			reads := max(4096/depth, 1)
			b.ResetTimer()
			var cpu time.Duration
			n := 0
			for n < b.N {
				cpu += cpuServe(fs, reads)
				n += reads * depth
			}
			b.StopTimer()
			fs.check(b)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/req")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// cpuServe is fs.serve timed by the calling thread's CPU clock.
func cpuServe(fs *fakeServer, reads int) time.Duration {
	start := recorder.ThreadCPU()
	fs.serve(reads)
	return recorder.ThreadCPU() - start
}

// lockForCPUClock locks the benchmark's goroutine (b.Run gives each sub-benchmark its own)
// to its thread for good: the fake server's coroutines are made on it and must be resumed
// under the same lock, the scheduler's Close in the cleanup included. The thread ends with
// the goroutine.
func lockForCPUClock() { runtime.LockOSThread() }
