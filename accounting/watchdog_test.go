package accounting

import (
	"bytes"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the watchdog goroutine to write into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records counts log records (the text handler writes one line per record; newlines in
// values are escaped).
func logRecords(s string) int { return strings.Count(s, "msg=") }

func currentGoroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// stalledHandlerForTest stands in for a handler holding the loop: it reports its goroutine
// id and sleeps in small steps until released.
func stalledHandlerForTest(goid chan<- uint64, release *atomic.Bool) {
	goid <- currentGoroutineID()
	for !release.Load() {
		time.Sleep(time.Millisecond)
	}
}

// startStalled runs stalledHandlerForTest in a goroutine; the returned func releases it and
// waits for it to end.
func startStalled(t *testing.T) (goid uint64, stop func()) {
	t.Helper()
	ch := make(chan uint64)
	var release atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		stalledHandlerForTest(ch, &release)
	}()
	goid = <-ch
	var once sync.Once
	stop = func() { once.Do(func() { release.Store(true); wg.Wait() }) }
	t.Cleanup(stop)
	return goid, stop
}

func TestWatchdogRealStall(t *testing.T) {
	goid, stopHandler := startStalled(t)
	const id = 42
	route := "GET /stall"
	var cur Current
	cur.Set(id, goid, &route)

	var mu sync.Mutex
	var sliceStart time.Time
	running := false
	probe := func() (uint64, time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		if !running {
			return 0, 0, false
		}
		return id, time.Since(sliceStart), true
	}
	var logs syncBuffer
	w := StartWatchdog(WatchdogConfig{
		Threshold: 100 * time.Millisecond, Logger: testLogger(&logs),
		Probe: probe, Describe: cur.Describe,
	})
	defer w.Stop()

	mu.Lock()
	sliceStart, running = time.Now(), true
	mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	running = false
	ran := time.Since(sliceStart)
	mu.Unlock()
	stopHandler()

	deadline := time.Now().Add(5 * time.Second)
	for w.Stats().Count == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	w.Stop()
	st := w.Stats()
	if st.Count != 1 || st.Logged != 1 || st.Suppressed != 0 || st.InProgress {
		t.Errorf("stats %+v, want one stall, logged", st)
	}
	if d := st.Durations.Max; d < 100*time.Millisecond || d > ran {
		t.Errorf("stall duration %v, want between the threshold and the slice's %v", d, ran)
	}
	out := logs.String()
	if n := logRecords(out); n != 1 {
		t.Fatalf("%d log records, want 1:\n%s", n, out)
	}
	for _, want := range []string{"task=42", `route="GET /stall"`, "stalledHandlerForTest", "goroutine=" + strconv.FormatUint(goid, 10), "elapsed="} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// fakeWatchdog is a watchdog driven by hand: poll with a fake clock and a scripted probe.
type fakeWatchdog struct {
	*Watchdog
	logs  *syncBuffer
	clock time.Time
	id    uint64
	start time.Time
	run   bool
}

func newFakeWatchdog(logEvery time.Duration) *fakeWatchdog {
	f := &fakeWatchdog{logs: &syncBuffer{}, clock: epoch}
	f.Watchdog = newWatchdog(WatchdogConfig{
		Threshold: 100 * time.Millisecond, LogEvery: logEvery, Logger: testLogger(f.logs),
		Probe: func() (uint64, time.Duration, bool) {
			if !f.run {
				return 0, 0, false
			}
			return f.id, f.clock.Sub(f.start), true
		},
	})
	f.now = func() time.Time { return f.clock }
	close(f.done) // no goroutine: Stop returns at once
	return f
}

func (f *fakeWatchdog) slice(id uint64)         { f.id, f.start, f.run = id, f.clock, true }
func (f *fakeWatchdog) idle()                   { f.run = false }
func (f *fakeWatchdog) advance(d time.Duration) { f.clock = f.clock.Add(d); f.poll() }

func TestWatchdogOneLogPerStall(t *testing.T) {
	f := newFakeWatchdog(time.Nanosecond)
	f.slice(1)
	for range 12 { // 300 ms in 25 ms polls
		f.advance(25 * time.Millisecond)
	}
	if st := f.Stats(); !st.InProgress || st.CurrentTask != 1 || st.CurrentElapsed != 300*time.Millisecond || st.Count != 0 {
		t.Errorf("during the stall: %+v", st)
	}
	f.idle()
	f.advance(25 * time.Millisecond)
	st := f.Stats()
	if st.Count != 1 || st.Logged != 1 || st.InProgress || st.Durations.Max != 300*time.Millisecond {
		t.Errorf("after the stall: %+v", st)
	}
	if n := logRecords(f.logs.String()); n != 1 {
		t.Errorf("%d log records, want 1", n)
	}

	// The same task's next slice is a new stall; a slice under the threshold is none.
	f.slice(1)
	f.advance(50 * time.Millisecond)
	f.slice(1)
	for range 5 {
		f.advance(25 * time.Millisecond)
	}
	// Another task takes over straight away: the first stall ends, the second starts.
	f.slice(2)
	f.advance(150 * time.Millisecond)
	f.idle()
	f.advance(time.Millisecond)
	st = f.Stats()
	if st.Count != 3 || st.Logged != 3 || st.Durations.Count != 3 {
		t.Errorf("after three stalls: %+v", st)
	}
	if n := logRecords(f.logs.String()); n != 3 {
		t.Errorf("%d log records, want 3", n)
	}
}

func TestWatchdogRateLimit(t *testing.T) {
	f := newFakeWatchdog(time.Hour)
	for range 3 {
		f.slice(9)
		f.advance(200 * time.Millisecond)
		f.idle()
		f.advance(time.Millisecond)
	}
	st := f.Stats()
	if st.Count != 3 || st.Logged != 1 || st.Suppressed != 2 {
		t.Errorf("stats %+v, want 3 stalls, 1 logged, 2 suppressed", st)
	}
	if n := logRecords(f.logs.String()); n != 1 {
		t.Errorf("%d log records, want 1", n)
	}
	f.Stop()
}

func TestWatchdogDefaults(t *testing.T) {
	w := StartWatchdog(WatchdogConfig{Probe: func() (uint64, time.Duration, bool) { return 0, 0, false }})
	w.Stop()
	w.Stop() // idempotent
	if w.cfg.Threshold != DefaultStallThreshold || w.cfg.Interval != DefaultStallThreshold/DefaultStallPollDivisor ||
		w.cfg.LogEvery != DefaultStallLogEvery || w.cfg.Logger == nil {
		t.Errorf("defaults %+v", w.cfg)
	}
	if st := w.Stats(); st.Threshold != DefaultStallThreshold || st.Count != 0 {
		t.Errorf("stats %+v", st)
	}
	defer func() {
		if recover() == nil {
			t.Error("no panic without a Probe")
		}
	}()
	StartWatchdog(WatchdogConfig{})
}

func TestLoopSnapshotIncludesStalls(t *testing.T) {
	f := newFakeWatchdog(time.Nanosecond)
	f.slice(1)
	f.advance(time.Second)
	l := NewLoop(Config{Epoch: epoch}, epoch)
	l.AttachWatchdog(f.Watchdog)
	s := l.Snapshot(at(time.Second))
	if s.Stalls == nil || !s.Stalls.InProgress || s.Stalls.CurrentElapsed != time.Second {
		t.Errorf("stalls %+v", s.Stalls)
	}
}

func TestStackOf(t *testing.T) {
	goid, stop := startStalled(t)
	st := StackOf(goid)
	if !strings.HasPrefix(st, "goroutine "+strconv.FormatUint(goid, 10)+" [") {
		t.Errorf("stack does not start with its header:\n%s", st)
	}
	if !strings.Contains(st, "stalledHandlerForTest") || strings.Contains(st, "TestStackOf") {
		t.Errorf("stack is not the handler's alone:\n%s", st)
	}
	stop()
	if StackOf(0) != "" {
		t.Error("StackOf(0) not empty")
	}
}

func TestFindStack(t *testing.T) {
	dump := []byte("goroutine 1 [running]:\nmain.a()\n\tcreated by x in goroutine 12 [\n\n" +
		"goroutine 12 [sleep]:\nmain.b()\n\n" +
		"goroutine 123 [chan receive]:\nmain.c()\n")
	for goid, want := range map[uint64]string{
		1:   "goroutine 1 [running]:\nmain.a()\n\tcreated by x in goroutine 12 [",
		12:  "goroutine 12 [sleep]:\nmain.b()",
		123: "goroutine 123 [chan receive]:\nmain.c()",
		2:   "",
	} {
		if got := findStack(dump, goid); got != want {
			t.Errorf("goroutine %d: got %q, want %q", goid, got, want)
		}
	}
}

func TestCurrent(t *testing.T) {
	var c Current
	if r, g := c.Describe(1); r != "" || g != 0 {
		t.Errorf("empty slot: %q %d", r, g)
	}
	route := "GET /x"
	c.Set(1, 10, &route)
	if r, g := c.Describe(1); r != route || g != 10 {
		t.Errorf("got %q %d", r, g)
	}
	c.Set(2, 10, &route) // the same coroutine and route for the next task: nothing changes
	if r, g := c.Describe(2); r != route || g != 10 {
		t.Errorf("same coroutine: %q %d", r, g)
	}
	c.Set(3, 20, nil)
	if r, g := c.Describe(3); r != "" || g != 20 {
		t.Errorf("no route: %q %d", r, g)
	}
}

// A stall that ends between the probe and the description is logged without another
// slice's route and stack.
func TestWatchdogDescribesOnlyTheStalledSlice(t *testing.T) {
	var calls atomic.Int32
	var buf syncBuffer
	route := "GET /other"
	w := &Watchdog{cfg: WatchdogConfig{
		Threshold: time.Millisecond,
		Logger:    slog.New(slog.NewTextHandler(&buf, nil)),
		Probe: func() (uint64, time.Duration, bool) {
			if calls.Add(1) == 1 {
				return 8, 0, true // by the time task 7 is described, task 8 runs
			}
			return 8, 0, true
		},
		Describe: func(uint64) (string, uint64) { return route, 1 },
	}}
	w.log(7, time.Second)
	if out := buf.String(); strings.Contains(out, route) || !strings.Contains(out, "task=7") {
		t.Fatalf("log: %s", out)
	}
}

// TestCurrentConcurrent checks, under -race, that Describe never pairs one slice's
// goroutine with another's route.
func TestCurrentConcurrent(t *testing.T) {
	var c Current
	routes := [2]string{"even", "odd"}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := uint64(1); !stop.Load(); id++ {
			c.Set(id, id, &routes[id%2])
		}
	}()
	deadline := time.Now().Add(100 * time.Millisecond)
	hits := 0
	for time.Now().Before(deadline) {
		r, g := c.Describe(0)
		if g == 0 {
			continue
		}
		hits++
		if r != routes[g%2] {
			t.Fatalf("Describe = %q, %d: route of another slice", r, g)
		}
	}
	stop.Store(true)
	wg.Wait()
	if hits == 0 {
		t.Error("Describe never matched")
	}
}
