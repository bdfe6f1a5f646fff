package recorder

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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// warnLines returns the stall lines (level WARN) of a text log; endLines the lines logged
// when a logged stall ended. The text handler writes one line per record (newlines in
// values are escaped).
func warnLines(s string) []string { return linesWith(s, "level=WARN") }
func endLines(s string) []string  { return linesWith(s, "gave the loop back") }

func linesWith(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

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

// realSlice is a probe over a slice the test starts and ends by hand, on the real clock.
type realSlice struct {
	mu      sync.Mutex
	id      uint64
	start   time.Time
	running bool
}

func (r *realSlice) begin(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.id, r.start, r.running = id, time.Now(), true
}

// end ends the slice and returns its length.
func (r *realSlice) end() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = false
	return time.Since(r.start)
}

func (r *realSlice) probe() (uint64, time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running {
		return 0, 0, false
	}
	return r.id, time.Since(r.start), true
}

func TestWatchdogRealStall(t *testing.T) {
	goid, stopHandler := startStalled(t)
	const id = 42
	route := "GET /stall"
	var cur Current
	cur.Set(id, goid, &route)

	var sl realSlice
	var logs syncBuffer
	w := StartWatchdog(WatchdogConfig{
		Threshold: 100 * time.Millisecond, Logger: testLogger(&logs),
		Probe: sl.probe, Describe: cur.Describe,
	})
	defer w.Stop()

	sl.begin(id)
	require.Eventually(t, func() bool { return len(warnLines(logs.String())) == 1 }, 10*time.Second, time.Millisecond)
	ran := sl.end()
	w.SliceEnded(id, ran) // as the loop does at the end of a long slice
	stopHandler()
	require.Eventually(t, func() bool { return w.Stats().Count == 1 }, 10*time.Second, time.Millisecond)
	w.Stop()

	st := w.Stats()
	assert.Equal(t, uint64(1), st.Logged)
	assert.Zero(t, st.Suppressed)
	assert.False(t, st.InProgress)
	assert.Equal(t, ran, st.Durations.Max, "the stall's true length, as the loop reported it")
	out := logs.String()
	line := warnLines(out)[0]
	for _, want := range []string{"task=42", `route="GET /stall"`, "stalledHandlerForTest",
		"goroutine=" + strconv.FormatUint(goid, 10), "elapsed=", "cause=unknown", "suppressed=0"} {
		assert.Contains(t, line, want)
	}
	ends := endLines(out)
	require.Len(t, ends, 1, out)
	assert.Contains(t, ends[0], "length="+ran.String())
	assert.Contains(t, ends[0], "exact=true")
	assert.Contains(t, ends[0], `route="GET /stall"`)
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
	return newFakeWatchdogCfg(WatchdogConfig{LogEvery: logEvery})
}

// newFakeWatchdogCfg makes a fake watchdog from cfg; Threshold, Logger and Probe are set
// here (Probe unless cfg has one).
func newFakeWatchdogCfg(cfg WatchdogConfig) *fakeWatchdog {
	f := &fakeWatchdog{logs: &syncBuffer{}, clock: epoch}
	cfg.Threshold, cfg.Logger = 100*time.Millisecond, testLogger(f.logs)
	if cfg.Probe == nil {
		cfg.Probe = f.probe
	}
	f.Watchdog = newWatchdog(cfg)
	f.now = func() time.Time { return f.clock }
	close(f.done) // no goroutine: Stop returns at once
	return f
}

func (f *fakeWatchdog) probe() (uint64, time.Duration, bool) {
	if !f.run {
		return 0, 0, false
	}
	return f.id, f.clock.Sub(f.start), true
}

func (f *fakeWatchdog) slice(id uint64)         { f.id, f.start, f.run = id, f.clock, true }
func (f *fakeWatchdog) idle()                   { f.run = false }
func (f *fakeWatchdog) advance(d time.Duration) { f.clock = f.clock.Add(d); f.poll() }

// endSlice ends the slice at the current time and reports it as the loop does.
func (f *fakeWatchdog) endSlice() {
	f.run = false
	f.SliceEnded(f.id, f.clock.Sub(f.start))
}

func TestWatchdogOneLogPerStall(t *testing.T) {
	f := newFakeWatchdog(time.Nanosecond)
	f.slice(1)
	for range 12 { // 300 ms in 25 ms polls
		f.advance(25 * time.Millisecond)
	}
	st := f.Stats()
	assert.True(t, st.InProgress)
	assert.Equal(t, uint64(1), st.CurrentTask)
	assert.Equal(t, 300*time.Millisecond, st.CurrentElapsed)
	assert.Zero(t, st.Count)
	f.idle()
	f.advance(25 * time.Millisecond)
	st = f.Stats()
	assert.Equal(t, uint64(1), st.Count)
	assert.Equal(t, uint64(1), st.Logged)
	assert.False(t, st.InProgress)
	assert.Equal(t, 300*time.Millisecond, st.Durations.Max, "without reports from the loop: the last observed length")
	assert.Len(t, warnLines(f.logs.String()), 1)

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
	assert.Equal(t, uint64(3), st.Count)
	assert.Equal(t, uint64(3), st.Logged)
	assert.Equal(t, int64(3), int64(st.Durations.Count))
	assert.Len(t, warnLines(f.logs.String()), 3)
	assert.Len(t, endLines(f.logs.String()), 3)
}

// TestWatchdogTrueLength: a 150 ms stall seen by 25 ms polls is recorded as 150 ms, not as
// the last poll's 125 ms, when the loop reports the end; also when the probe sees the slice
// over before the report comes.
func TestWatchdogTrueLength(t *testing.T) {
	f := newFakeWatchdog(time.Nanosecond)
	f.clock = f.clock.Add(7 * time.Millisecond) // the slice starts between polls
	f.slice(1)
	f.clock = f.clock.Add(18 * time.Millisecond)
	for range 5 {
		f.advance(25 * time.Millisecond)
	}
	assert.Equal(t, 143*time.Millisecond, f.Stats().CurrentElapsed)
	f.clock = f.clock.Add(7 * time.Millisecond)
	f.endSlice() // 150 ms
	f.advance(18 * time.Millisecond)
	st := f.Stats()
	require.Equal(t, uint64(1), st.Count)
	assert.Equal(t, 150*time.Millisecond, st.Durations.Max)
	assert.Contains(t, endLines(f.logs.String())[0], "length=150ms exact=true")

	// The probe sees the next stall over before the loop's report: it is recorded at the
	// next poll, with the report.
	f.slice(2)
	for range 5 {
		f.advance(25 * time.Millisecond)
	}
	f.clock = f.clock.Add(10 * time.Millisecond)
	f.run = false
	f.advance(5 * time.Millisecond)
	st = f.Stats()
	assert.Equal(t, uint64(1), st.Count, "waits one poll for the loop's report")
	assert.False(t, st.InProgress)
	f.SliceEnded(2, 135*time.Millisecond)
	f.advance(25 * time.Millisecond)
	st = f.Stats()
	require.Equal(t, uint64(2), st.Count)
	assert.Equal(t, 285*time.Millisecond, st.Durations.Sum)

	// A report that never comes (another task's, or too long to be this slice): the last
	// observed length, one poll later.
	f.slice(3)
	for range 5 {
		f.advance(25 * time.Millisecond)
	}
	f.idle()
	f.SliceEnded(3, time.Hour)
	f.advance(25 * time.Millisecond)
	f.advance(25 * time.Millisecond)
	st = f.Stats()
	require.Equal(t, uint64(3), st.Count)
	assert.Equal(t, 410*time.Millisecond, st.Durations.Sum)
	ends := endLines(f.logs.String())
	require.Len(t, ends, 3)
	assert.Contains(t, ends[2], "length=125ms exact=false")

	// Slices shorter than the threshold are not reports.
	f.SliceEnded(4, 99*time.Millisecond)
	id, _, ok, _ := f.end.load()
	assert.True(t, ok)
	assert.Equal(t, uint64(3), id)
}

// TestWatchdogStopCountsAnEndedStall: Stop records a stall that ended and waits for its
// report.
func TestWatchdogStopCountsAnEndedStall(t *testing.T) {
	var sl realSlice
	w := StartWatchdog(WatchdogConfig{Threshold: 10 * time.Millisecond, Interval: time.Millisecond,
		LogEvery: time.Hour, Logger: slog.New(slog.DiscardHandler), Probe: sl.probe})
	w.SliceEnded(1, time.Hour) // the loop reports ends: the watchdog waits for them
	sl.begin(2)
	require.Eventually(t, func() bool { return w.Stats().InProgress }, 10*time.Second, time.Millisecond)
	sl.end()
	require.Eventually(t, func() bool { return !w.Stats().InProgress }, 10*time.Second, time.Millisecond)
	w.Stop()
	assert.Equal(t, uint64(1), w.Stats().Count)
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
	assert.Equal(t, uint64(3), st.Count)
	assert.Equal(t, uint64(1), st.Logged)
	assert.Equal(t, uint64(2), st.Suppressed)
	assert.Len(t, warnLines(f.logs.String()), 1)
	assert.Len(t, endLines(f.logs.String()), 1, "only logged stalls log their end")
	f.clock = f.clock.Add(time.Hour)
	f.slice(9)
	f.advance(200 * time.Millisecond)
	lines := warnLines(f.logs.String())
	require.Len(t, lines, 2)
	assert.Contains(t, lines[1], "suppressed=2")
	f.Stop()
}

func TestWatchdogDefaults(t *testing.T) {
	w := StartWatchdog(WatchdogConfig{Probe: func() (uint64, time.Duration, bool) { return 0, 0, false }})
	w.Stop()
	w.Stop() // idempotent
	assert.Equal(t, defaultStallThreshold, w.Threshold())
	assert.Equal(t, defaultStallThreshold/defaultStallPollDivisor, w.cfg.Interval)
	assert.Equal(t, defaultStallLogEvery, w.cfg.LogEvery)
	assert.NotNil(t, w.cfg.Logger)
	st := w.Stats()
	assert.Equal(t, defaultStallThreshold, st.Threshold)
	assert.Zero(t, st.Count)
	assert.PanicsWithError(t, "recorder: WatchdogConfig.Probe is required", func() { StartWatchdog(WatchdogConfig{}) })

	// The smallest threshold polls once a millisecond.
	w = newWatchdog(WatchdogConfig{Threshold: time.Millisecond, Probe: w.cfg.Probe})
	assert.Equal(t, time.Millisecond, w.cfg.Interval)
}

func TestWatchdogConfigValidate(t *testing.T) {
	probe := func() (uint64, time.Duration, bool) { return 0, 0, false }
	for _, tc := range []struct {
		cfg  WatchdogConfig
		want string
	}{
		{WatchdogConfig{Probe: probe}, ""},
		{WatchdogConfig{Probe: probe, Threshold: time.Millisecond, Interval: time.Millisecond}, ""},
		{WatchdogConfig{}, "recorder: WatchdogConfig.Probe is required"},
		{WatchdogConfig{Probe: probe, Threshold: -1}, "recorder: WatchdogConfig.Threshold (-1ns) must be 0 (default 100ms) or at least 1ms"},
		{WatchdogConfig{Probe: probe, Threshold: time.Microsecond}, "recorder: WatchdogConfig.Threshold (1µs) must be 0 (default 100ms) or at least 1ms"},
		{WatchdogConfig{Probe: probe, Interval: -time.Second}, "recorder: WatchdogConfig.Interval (-1s) must be 0 (default Threshold/4) or at least 1ms"},
		{WatchdogConfig{Probe: probe, Interval: 200 * time.Millisecond}, "recorder: WatchdogConfig.Interval (200ms) must be at most WatchdogConfig.Threshold (100ms)"},
		{WatchdogConfig{Probe: probe, LogEvery: -time.Second}, "recorder: WatchdogConfig.LogEvery (-1s) must not be negative"},
	} {
		err := tc.cfg.validate()
		if tc.want == "" {
			assert.NoError(t, err)
		} else {
			assert.EqualError(t, err, tc.want)
		}
	}
}

func TestLoopSnapshotIncludesStalls(t *testing.T) {
	f := newFakeWatchdog(time.Nanosecond)
	f.slice(1)
	f.advance(time.Second)
	l := NewLoop(Config{Epoch: epoch}, epoch)
	l.AttachWatchdog(f.Watchdog)
	s := l.Snapshot(at(time.Second))
	require.NotNil(t, s.Stalls)
	assert.True(t, s.Stalls.InProgress)
	assert.Equal(t, time.Second, s.Stalls.CurrentElapsed)
}

func TestStackOf(t *testing.T) {
	goid, stop := startStalled(t)
	st := stackOf(goid)
	assert.True(t, strings.HasPrefix(st, "goroutine "+strconv.FormatUint(goid, 10)+" ["), st)
	assert.Contains(t, st, "stalledHandlerForTest")
	assert.NotContains(t, st, "TestStackOf")
	stop()
	assert.Empty(t, stackOf(0))
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
		assert.Equal(t, want, findStack(dump, goid), "goroutine %d", goid)
	}
}

func TestGoroutineStatus(t *testing.T) {
	for stack, want := range map[string]string{
		"goroutine 7 [runnable]:\nmain.a()":                   "runnable",
		"goroutine 7 [syscall, 2 minutes, locked to thread]:": "syscall",
		"goroutine 7 [running]:":                              "running",
		"goroutine 7":                                         "",
		"goroutine 7 [broken":                                 "",
		"":                                                    "",
	} {
		assert.Equal(t, want, goroutineStatus(stack), stack)
	}
}

func TestCurrent(t *testing.T) {
	var c Current
	r, g := c.Describe(1)
	assert.Empty(t, r)
	assert.Zero(t, g)
	route := "GET /x"
	c.Set(1, 10, &route)
	r, g = c.Describe(1)
	assert.Equal(t, route, r)
	assert.Equal(t, uint64(10), g)
	c.Set(2, 10, &route) // the same coroutine and route for the next task: nothing changes
	r, g = c.Describe(2)
	assert.Equal(t, route, r)
	assert.Equal(t, uint64(10), g)
	c.Set(3, 20, nil)
	r, g = c.Describe(3)
	assert.Empty(t, r)
	assert.Equal(t, uint64(20), g)
}

// scriptedProbe answers the watchdog's probe calls in turn from running (true: task id
// runs, started at start); after the script, the last answer repeats.
func scriptedProbe(f *fakeWatchdog, id uint64, running ...bool) func() (uint64, time.Duration, bool) {
	var n atomic.Int32
	return func() (uint64, time.Duration, bool) {
		i := int(n.Add(1)) - 1
		if !running[min(i, len(running)-1)] {
			return 0, 0, false
		}
		return id, f.clock.Sub(f.start), true
	}
}

// A stall that ends between the probe and the description is logged without the route
// and goroutine published for the next slice.
func TestWatchdogDescribesOnlyTheStalledSlice(t *testing.T) {
	f := newFakeWatchdogCfg(WatchdogConfig{
		Describe: func(uint64) (string, uint64) { return "GET /other", 1 },
	})
	f.cfg.Probe = scriptedProbe(f, 7, true, false) // over when the watchdog checks
	f.start = f.clock
	f.advance(time.Second)
	lines := warnLines(f.logs.String())
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], "task=7")
	assert.Contains(t, lines[0], `route=""`)
	assert.Contains(t, lines[0], "goroutine=0")
	assert.Contains(t, lines[0], `stack="`+stackEndedBeforeDescribe+`"`)
}

// A stall whose slice ends while the watchdog takes the goroutine dump keeps the route
// and goroutine it knew; only the stack is lost, and the line says so.
func TestWatchdogKeepsWhatItKnewWhenTheSliceEndsDuringTheDump(t *testing.T) {
	goid, _ := startStalled(t)
	var describes atomic.Int32
	f := newFakeWatchdogCfg(WatchdogConfig{
		Describe: func(uint64) (string, uint64) {
			if describes.Add(1) == 1 {
				return "GET /stalled", goid
			}
			return "GET /next", goid + 1 // the slot moved on: never asked again
		},
	})
	// The poll sees task 5 running, so does the check after Describe; the check after the
	// dump sees the slice over.
	f.cfg.Probe = scriptedProbe(f, 5, true, true, false)
	f.start = f.clock
	f.advance(time.Second)
	lines := warnLines(f.logs.String())
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], "task=5")
	assert.Contains(t, lines[0], `route="GET /stalled"`)
	assert.Contains(t, lines[0], "goroutine="+strconv.FormatUint(goid, 10))
	assert.Contains(t, lines[0], `stack="`+stackEndedBeforeDump+`"`)
	assert.Equal(t, int32(1), describes.Load())

	// The end line names the route too.
	f.clock = f.clock.Add(time.Millisecond)
	f.poll()
	ends := endLines(f.logs.String())
	require.Len(t, ends, 1)
	assert.Contains(t, ends[0], `route="GET /stalled"`)
}

func TestStallCause(t *testing.T) {
	const win = 80 * time.Millisecond
	for _, tc := range []struct {
		used     time.Duration
		measured bool
		state    byte
		stateOK  bool
		gstatus  string
		want     string
	}{
		{0, false, 0, false, "", causeUnknown},
		{win, true, 'R', true, "running", causeTask},
		{win / 2, true, 'S', true, "", causeTask},      // half the time computing
		{win / 4, true, 'R', true, "", causeTask},      // a busy thread sharing a core
		{win / 16, true, 'R', true, "", causeStarved},  // runnable, hardly run
		{0, true, 'R', true, "running", causeStarved},  // a CPU quota, a noisy neighbour
		{0, true, 'S', true, "runnable", causeStarved}, // waiting for a Go processor
		{win / 4, true, 'S', true, "syscall", causeBlocked},
		{0, true, 'D', true, "syscall", causeBlocked},
		{0, true, 0, false, "", causeOffCPU},
		{win / 4, true, 0, false, "", causeTask},
	} {
		got := stallCause(tc.used, win, tc.measured, tc.state, tc.stateOK, tc.gstatus)
		assert.Equal(t, tc.want, got, "%+v", tc)
	}
	assert.Equal(t, causeUnknown, stallCause(0, 0, true, 'R', true, ""), "no window")
	assert.Equal(t, causeUnknown, stallCause(0, 0, false, 0, false, "runnable"), "not measured")
}

// TestWatchdogCauseFromFakeThread: the watchdog measures the thread's CPU from the first
// poll that saw the slice and reads the state only for a thread that hardly computed.
func TestWatchdogCauseFromFakeThread(t *testing.T) {
	var cpu time.Duration
	stateReads := 0
	var state byte = 'R'
	f := newFakeWatchdogCfg(WatchdogConfig{
		LogEvery:    time.Nanosecond,
		ThreadCPU:   func() (time.Duration, bool) { return cpu, true },
		ThreadState: func() (byte, bool) { stateReads++; return state, true },
	})
	stall := func(id uint64, cpuPerPoll time.Duration) {
		f.slice(id)
		for range 4 {
			cpu += cpuPerPoll
			f.advance(25 * time.Millisecond)
		}
		f.endSlice()
		f.advance(time.Millisecond)
	}
	stall(1, 25*time.Millisecond) // computing
	assert.Zero(t, stateReads)
	stall(2, time.Millisecond) // runnable, hardly run
	stall(3, 0)
	state = 'S'
	stall(4, 0) // asleep in the kernel
	assert.Equal(t, 3, stateReads)
	lines := warnLines(f.logs.String())
	require.Len(t, lines, 4)
	assert.Contains(t, lines[0], "cause=task thread_cpu=75ms window=75ms")
	assert.Contains(t, lines[1], "cause=starved thread_cpu=3ms window=75ms thread_state=R")
	assert.Contains(t, lines[2], "cause=starved")
	assert.Contains(t, lines[3], "cause=blocked thread_cpu=0s window=75ms thread_state=S")
	assert.Equal(t, uint64(2), f.Stats().Starved)
	assert.Contains(t, endLines(f.logs.String())[3], "cause=blocked")

	// A slice first seen when already a stall has no window.
	f.clock = f.clock.Add(time.Second)
	f.slice(5)
	f.start = f.start.Add(-time.Second)
	f.advance(time.Millisecond)
	assert.Contains(t, warnLines(f.logs.String())[4], "cause=unknown")
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
	hits := 0
	for hits < 1000 {
		r, g := c.Describe(0)
		if g == 0 {
			continue
		}
		hits++
		require.Equal(t, routes[g%2], r, "Describe = %q, %d: route of another slice", r, g)
	}
	stop.Store(true)
	wg.Wait()
}
