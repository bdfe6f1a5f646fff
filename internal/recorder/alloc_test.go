package recorder

import (
	"testing"
	"time"
)

// The recording path runs on the loop at every switch or request end: it must not
// allocate.
func TestRecordingDoesNotAllocate(t *testing.T) {
	r := NewRoutes(Config{Epoch: epoch})
	rt := r.Route("GET /a")
	l := NewLoop(Config{Epoch: epoch}, epoch)
	ring := NewRing(8)
	var cur Current
	route := "GET /a"
	s := sampleTask()
	var now int64
	var id uint64
	for _, c := range []struct {
		name string
		fn   func()
	}{
		{"Routes.Route (existing)", func() { _ = r.Route("GET /a") }},
		{"Route.Start", rt.Start},
		{"Route.finishAt", func() { rt.finishAt(&s, int64(time.Second)) }},
		{"Route.finishAt rotating", func() { now += int64(DefaultRecentWindow); rt.finishAt(&s, now) }},
		{"Loop.Busy", func() { now += 3e8; l.Busy(now, now+2e8) }},
		{"Loop.Busy long", func() { now += 100 * sec; l.Busy(now-99*sec, now) }},
		{"Loop.Slice", func() { l.slice(time.Microsecond, 2*time.Microsecond) }},
		{"Loop.ReadyDepth", func() { l.ReadyDepth(3) }},
		{"Loop.TaskStarted/Finished", func() { l.TaskStarted(); l.TaskFinished() }},
		{"Ring.Slot/Commit", func() { *ring.Slot() = s; ring.Commit() }},
		{"Current.Set", func() { id++; cur.Set(id, 7, &route) }},
		{"ThreadCPU", func() { _ = ThreadCPU() }},
	} {
		if n := testing.AllocsPerRun(100, c.fn); n != 0 {
			t.Errorf("%s: %v allocs/op, want 0", c.name, n)
		}
	}
}

func TestThreadCPU(t *testing.T) {
	if !ThreadCPUSupported {
		t.Skip("no thread CPU clock here")
	}
	a := ThreadCPU()
	deadline := time.Now().Add(20 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	b := ThreadCPU()
	// The goroutine may have moved threads; only sanity-check the reading.
	if a <= 0 || b <= 0 || x == 0 {
		t.Errorf("ThreadCPU readings %v, %v", a, b)
	}
}
