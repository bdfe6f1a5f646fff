package recorder

import (
	"runtime"
	"testing"
	"time"
)

func BenchmarkRouteFinishAt(b *testing.B) {
	r := NewRoutes(Config{Epoch: epoch})
	rt := r.Route("GET /bench")
	s := sampleTask()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Age = time.Duration(i&1023) * time.Microsecond
		rt.finishAt(&s, int64(i)*1000) // 1 µs apart: rotates every 10^7 requests
	}
}

func BenchmarkLoopSlice(b *testing.B) {
	l := NewLoop(Config{Epoch: epoch}, epoch)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.slice(time.Duration(i&1023)*time.Microsecond, 3*time.Microsecond)
	}
}

func BenchmarkLoopBusy(b *testing.B) {
	l := NewLoop(Config{Epoch: epoch}, epoch)
	b.ReportAllocs()
	for i := int64(0); b.Loop(); i++ {
		l.Busy(i*10000, i*10000+5000)
	}
}

func BenchmarkRingCommit(b *testing.B) {
	r := NewRing(0)
	s := sampleTask()
	b.ReportAllocs()
	for b.Loop() {
		*r.Slot() = s
		r.Commit()
	}
}

func BenchmarkCurrentSet(b *testing.B) {
	var c Current
	route := "GET /bench"
	b.ReportAllocs()
	for i := uint64(0); b.Loop(); i++ {
		c.Set(i, 7, &route)
	}
}

func BenchmarkThreadCPU(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	for b.Loop() {
		_ = ThreadCPU()
	}
}

// BenchmarkTimeNow is the reference: one monotonic clock read (vDSO).
func BenchmarkTimeNow(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = time.Now()
	}
}

// BenchmarkThreadCPUOf reads another thread's CPU clock by its id, as the watchdog does at
// each poll that sees a slice running.
func BenchmarkThreadCPUOf(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := gettid()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = threadCPUOf(tid)
	}
}

// BenchmarkThreadStateOf reads a thread's state from /proc, as the watchdog does at the
// polls of a stall whose thread hardly computed.
func BenchmarkThreadStateOf(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := gettid()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = threadStateOf(tid)
	}
}

// BenchmarkLogLimiterAllow is the price of counting a suppressed event (a panic in a flood).
func BenchmarkLogLimiterAllow(b *testing.B) {
	l := NewLogLimiter(1, time.Hour)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		l.Allow(now)
	}
}

// BenchmarkRoutesSnapshot reads one route's eight summaries (recent and cumulative for four
// figures) as Routes.Snapshot does: the copy (CopyInto, on the loop in a server), then the
// fold of two windows, the merge with the cumulative store, the percentiles and buckets
// (RoutesCopy.Snapshot, off the loop in a server). Off the hot path.
func BenchmarkRoutesSnapshot(b *testing.B) {
	r := NewRoutes(Config{Epoch: epoch})
	rt := r.Route("GET /bench")
	s := sampleTask()
	for i := range 100000 {
		s.Age = time.Duration(i%5000) * time.Microsecond
		rt.finishAt(&s, int64(i)*100000) // 10 s in all: the cumulative store has retired windows
	}
	now := epoch.Add(10 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Snapshot(now)
	}
}
