package recorder

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/batonrt/baton/accounting"
)

const sec = int64(time.Second)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %v, want %v ± %v", what, got, want, tol)
	}
}

func TestLoopUtilisationWindows(t *testing.T) {
	l := NewLoop(Config{Epoch: epoch}, epoch)
	// 10 s at 30%: three 100 ms busy intervals per second.
	for s := range int64(10) {
		for k := range int64(3) {
			start := s*sec + k*300*int64(time.Millisecond)
			l.Busy(start, start+100*int64(time.Millisecond))
		}
	}
	snap := l.Snapshot(at(10*time.Second + 500*time.Millisecond))
	for i, u := range snap.Utilisation {
		near(t, accounting.UtilisationWindows[i].String(), u.Utilisation(), 0.3, 1e-9)
	}
	if snap.Utilisation[2].Elapsed != 10*time.Second || snap.Utilisation[1].Elapsed != 10*time.Second || snap.Utilisation[0].Elapsed != time.Second {
		t.Errorf("elapsed %v", snap.Utilisation)
	}
	if snap.BusyTotal != 3*time.Second || snap.Uptime != 10500*time.Millisecond {
		t.Errorf("busy total %v uptime %v", snap.BusyTotal, snap.Uptime)
	}

	// 20 more seconds idle, then 1 s fully busy: the 1 s window sees 100%, the 10 s window
	// 10%, the 60 s window (31 s elapsed) 4/31.
	l.Busy(30*sec, 31*sec)
	snap = l.Snapshot(at(31*time.Second + time.Millisecond))
	near(t, "1s", snap.Utilisation[0].Utilisation(), 1, 1e-9)
	near(t, "10s", snap.Utilisation[1].Utilisation(), 0.1, 1e-9)
	near(t, "60s", snap.Utilisation[2].Utilisation(), 4.0/31, 1e-9)

	// 100 s later, the old seconds have left every window.
	snap = l.Snapshot(at(131 * time.Second))
	for i, u := range snap.Utilisation {
		if u.Utilisation() != 0 || u.Elapsed != accounting.UtilisationWindows[i] {
			t.Errorf("window %d after idle: %+v", i, u)
		}
	}
}

func TestLoopBusySplitsSeconds(t *testing.T) {
	l := NewLoop(Config{Epoch: epoch}, epoch)
	l.Busy(900*int64(time.Millisecond), 1200*int64(time.Millisecond)) // 0.1 s in second 0, 0.2 s in second 1
	snap := l.Snapshot(at(2 * time.Second))
	near(t, "second 1", snap.Utilisation[0].Utilisation(), 0.2, 1e-9)
	near(t, "seconds 0-1", snap.Utilisation[1].Utilisation(), 0.15, 1e-9)

	// A 100 s stall: busy total counts it whole; the ring keeps its last 64 s.
	l.Busy(10*sec, 110*sec)
	snap = l.Snapshot(at(110*time.Second + 1))
	if snap.BusyTotal != 100*time.Second+300*time.Millisecond {
		t.Errorf("busy total %v", snap.BusyTotal)
	}
	for i, u := range snap.Utilisation {
		near(t, "after stall "+accounting.UtilisationWindows[i].String(), u.Utilisation(), 1, 1e-9)
	}
	l.Busy(5, 5) // empty: ignored
	l.Busy(7, 3) // reversed: ignored
	if got := l.Snapshot(at(110 * time.Second)).BusyTotal; got != snap.BusyTotal {
		t.Errorf("empty intervals changed busy total to %v", got)
	}
}

func TestLoopStartsMidSecond(t *testing.T) {
	start := 2*time.Second + 500*time.Millisecond
	l := NewLoop(Config{Epoch: epoch}, at(start))
	snap := l.Snapshot(at(start + 100*time.Millisecond))
	for _, u := range snap.Utilisation {
		if u.Elapsed != 0 || u.Utilisation() != 0 {
			t.Errorf("no complete second yet: %+v", u)
		}
	}
	l.Busy(int64(start), int64(start+250*time.Millisecond))
	snap = l.Snapshot(at(3*time.Second + time.Millisecond))
	near(t, "half second", snap.Utilisation[0].Utilisation(), 0.5, 1e-9)
	if snap.Utilisation[2].Elapsed != 500*time.Millisecond {
		t.Errorf("elapsed %v", snap.Utilisation[2].Elapsed)
	}
}

func TestLoopEpochDefaultsToNow(t *testing.T) {
	now := time.Now()
	l := NewLoop(Config{}, now)
	if !l.cfg.Epoch.Equal(now) {
		t.Errorf("epoch %v, want %v", l.cfg.Epoch, now)
	}
}

func TestLoopSlicesAndCounts(t *testing.T) {
	l := NewLoop(Config{Epoch: epoch}, epoch)
	for s := range int64(10) {
		for i := range 50 {
			l.slice(time.Duration(i+1)*time.Microsecond, 2*time.Microsecond)
		}
		l.Busy(s*sec, s*sec+1000) // switches go to the second this interval ends in
	}
	for range 7 {
		l.slice(time.Millisecond, time.Microsecond) // pending, not in a second yet
	}
	for _, n := range []int{3, 9, 2} {
		l.ReadyDepth(n)
	}
	for range 5 {
		l.TaskStarted()
	}
	l.TaskFinished()
	l.TaskFinished()
	snap := l.Snapshot(at(10*time.Second + 1))
	if snap.Switches != 507 {
		t.Errorf("switches %d", snap.Switches)
	}
	near(t, "switches/s", snap.SwitchRate.PerSecond(), 50, 1e-9)
	if snap.Lag.Count != 507 || snap.Lag.Max != time.Millisecond || snap.Slices.Count != 507 || snap.Slices.Max != 2*time.Microsecond {
		t.Errorf("lag %+v slices %+v", snap.Lag, snap.Slices)
	}
	near(t, "lag p50 (µs)", float64(snap.Lag.P50)/1e3, 26, 0.26) // 254th of 507: 10 each of 1..50 µs, then 7 of 1 ms
	if snap.ReadyDepth != 2 || snap.ReadyDepthMax != 9 {
		t.Errorf("ready depth %d max %d", snap.ReadyDepth, snap.ReadyDepthMax)
	}
	if snap.LiveTasks() != 3 || snap.TasksDone != 2 || snap.TasksStarted != 5 {
		t.Errorf("tasks %+v", snap)
	}
	if snap.Stalls != nil {
		t.Error("stalls without a watchdog")
	}
	// A snapshot folds what it read: reading again neither loses nor counts twice.
	for range 3 {
		l.slice(time.Second, time.Second)
	}
	l.Busy(11*sec, 11*sec+1000)
	snap = l.Snapshot(at(12 * time.Second))
	if snap.Lag.Count != 510 || snap.Lag.Max != time.Second || snap.Slices.Count != 510 || snap.Switches != 510 {
		t.Errorf("second snapshot: switches %d lag %+v slices %+v", snap.Switches, snap.Lag, snap.Slices)
	}
	want := accounting.SliceStats{Count: 510, Total: 3*time.Second + 1007*time.Microsecond, Max: time.Second, Slow: 3, SlowTotal: 3 * time.Second}
	if snap.Slices != want || snap.Slices.Mean() != want.Total/510 {
		t.Errorf("slices %+v, want %+v", snap.Slices, want)
	}
}

// TestLoopSlicesInBatchesMatchSlice: a scheduler that gathers slice figures itself and
// reports them with Slices and Switched leaves the same snapshot as one calling Slice for
// every slice.
func TestLoopSlicesInBatchesMatchSlice(t *testing.T) {
	one := NewLoop(Config{Epoch: epoch}, epoch)
	batched := NewLoop(Config{Epoch: epoch}, epoch)
	rng := rand.New(rand.NewPCG(5, 6))
	var waits []int64
	var st accounting.SliceStats
	total := uint64(0)
	now := int64(0)
	for range 400 {
		for range rng.IntN(300) { // sometimes more than a batch between Busy calls
			wait := time.Duration(rng.Int64N(int64(time.Millisecond)))
			run := time.Duration(rng.Int64N(int64(200 * time.Microsecond)))
			one.slice(wait, run)
			waits = append(waits, int64(wait))
			st.Total += run
			st.Max = max(st.Max, run)
			if run > defaultSlowSlice {
				st.Slow++
				st.SlowTotal += run
			}
			total++
			if len(waits) == 256 || rng.IntN(50) == 0 {
				batched.Slices(waits, st)
				waits, st = waits[:0], accounting.SliceStats{}
			}
		}
		batched.Slices(waits, st)
		waits, st = waits[:0], accounting.SliceStats{}
		batched.Switched(total)
		start := now + rng.Int64N(int64(10*time.Millisecond))
		now = start + rng.Int64N(int64(20*time.Millisecond))
		one.Busy(start, now)
		batched.Busy(start, now)
	}
	a, b := one.Snapshot(at(time.Duration(now))), batched.Snapshot(at(time.Duration(now)))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("snapshots differ:\nSlice:   %+v\nSlices:  %+v", a, b)
	}
	if a.Switches != total || a.Lag.Count != total {
		t.Fatalf("switches %d, lags %d, want %d", a.Switches, a.Lag.Count, total)
	}
}

// TestLoopBusyWithinASecondAndAcrossTheRing: many short intervals within one second take
// the fast path; an interval of more than the ring's 64 seconds reuses that second's slot,
// and the intervals after it must not land in the stale bucket.
func TestLoopBusyWithinASecondAndAcrossTheRing(t *testing.T) {
	l := NewLoop(Config{Epoch: epoch}, epoch)
	for i := range int64(100) {
		l.Busy(5*sec+i*1e6, 5*sec+i*1e6+1e5) // 100 x 0.1 ms in second 5
	}
	l.Busy(5*sec+sec/2, 70*sec) // through second 69, whose slot was second 5's
	for i := range int64(10) {
		l.Busy(70*sec+i*1e6, 70*sec+i*1e6+3e5) // 10 x 0.3 ms in second 70
	}
	snap := l.Snapshot(at(71 * time.Second))
	if got := snap.Utilisation[0]; got.Busy != 3*time.Millisecond || got.Elapsed != time.Second {
		t.Errorf("last second: busy %v of %v, want 3ms of 1s", got.Busy, got.Elapsed)
	}
	if want := time.Duration(100*1e5 + 64.5*float64(sec) + 10*3e5); snap.BusyTotal != want {
		t.Errorf("busy total %v, want %v", snap.BusyTotal, want)
	}
	snap = l.Snapshot(at(70 * time.Second))
	if got := snap.Utilisation[0]; got.Busy != time.Second {
		t.Errorf("second 69: busy %v, want all of it", got.Busy)
	}
	// Right after the long interval, a reading from the past (second 5 again) must not
	// add to second 69, which now holds the slot second 5 had.
	l = NewLoop(Config{Epoch: epoch}, epoch)
	l.Busy(5*sec, 5*sec+1e5)
	l.Busy(5*sec+sec/2, 70*sec)
	l.Busy(5*sec+sec/2+1e8, 5*sec+sec/2+2e8)
	for _, b := range l.secs {
		if b.busy > sec {
			t.Errorf("second %d: busy %v after a step back", b.sec, time.Duration(b.busy))
		}
	}
}
