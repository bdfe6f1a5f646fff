package accounting

import "time"

// UtilisationWindows are the windows of LoopSnapshot.Utilisation, in order: utilisation
// over the last 1, 10 and 60 complete seconds.
var UtilisationWindows = [3]time.Duration{time.Second, 10 * time.Second, time.Minute}

// LoopSnapshot is the loop's figures at one instant. Plain data.
type LoopSnapshot struct {
	Uptime    time.Duration // since the loop started
	BusyTotal time.Duration // busy time since the loop started

	// Utilisation over the last 1, 10 and 60 complete seconds (UtilisationWindows).
	Utilisation [3]Window

	Lag    Summary    // time a task waited ready before each slice (ready -> running)
	Slices SliceStats // length of the slices

	ReadyDepth    int // ready-queue depth at the last sample
	ReadyDepthMax int // largest sampled ready-queue depth

	Switches   uint64     // slices run since the loop started
	SwitchRate SwitchRate // switches over the last ten complete seconds

	TasksStarted uint64 // tasks spawned
	TasksDone    uint64 // tasks finished

	// Stalls are the watchdog's figures, nil when no watchdog is attached.
	Stalls *StallStats

	// ArrivalClock names where request latencies start (filled in by the server, "" when
	// unknown): "loop-turn bound" for baton's loop (docs/health.md, arrival time).
	ArrivalClock string
	// ArrivalBounded counts reads whose arrival was put before the start of the callback
	// that read them, because a long callback ran just before (their bytes may have waited
	// through it); ArrivalHidden is the sum of those moves: kernel wait that latencies
	// measured from the read would have hidden.
	ArrivalBounded uint64
	ArrivalHidden  time.Duration

	// The process's own figures, the same on every loop of it, read when the page is
	// rendered (off the loop): Goroutines from runtime.NumGoroutine; RSSBytes (resident
	// memory, /proc/self/statm) and OpenFDs (entries of /proc/self/fd) on Linux only, 0
	// (absent from the JSON) elsewhere or when they could not be read.
	Goroutines int
	RSSBytes   int64
	OpenFDs    int
}

// LiveTasks returns TasksStarted - TasksDone. Any goroutine.
func (s *LoopSnapshot) LiveTasks() int64 { return int64(s.TasksStarted - s.TasksDone) }

// Window is the loop's busy time over one utilisation window. Plain data.
type Window struct {
	Length  time.Duration // the window's nominal length
	Busy    time.Duration // busy time in it
	Elapsed time.Duration // time it covers (less than Length just after start)
}

// Utilisation returns Busy/Elapsed, between 0 and 1 (0 when Elapsed is 0). Any goroutine.
func (w Window) Utilisation() float64 {
	if w.Elapsed <= 0 {
		return 0
	}
	return float64(w.Busy) / float64(w.Elapsed)
}

// SwitchRate counts switches over a window. Plain data.
type SwitchRate struct {
	Switches uint64        // switches in the window
	Elapsed  time.Duration // time the window covers
}

// PerSecond returns Switches/Elapsed in switches per second (0 when Elapsed is 0). Any
// goroutine.
func (r SwitchRate) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Switches) / r.Elapsed.Seconds()
}

// SliceStats are the lengths of the loop's slices: exact count, total, maximum, and the
// slices over the slow-slice threshold (the scheduler's, 50 us by default). Percentiles are
// left out on purpose: a histogram record per slice was measured to cost a large share of
// all the accounting per request (docs/accounting.md, the loop's slices; tokio makes its
// poll-time histogram opt-in for the same reason); the routes' on-loop histograms hold the
// same lengths per request, and the tasks' max_slice and the stall detector name the long
// ones. Plain data.
type SliceStats struct {
	Count     uint64        // slices run
	Total     time.Duration // their total length
	Max       time.Duration // the longest
	Slow      uint64        // slices longer than the slow-slice threshold
	SlowTotal time.Duration // their total length
}

// Mean returns Total/Count, or 0 when Count is 0. Any goroutine.
func (s SliceStats) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Total / time.Duration(s.Count)
}
