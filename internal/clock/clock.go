// Package clock is the loop's clock: monotonic nanoseconds since an epoch, read from the
// CPU's time-stamp counter where the kernel keeps time with it, and from the OS otherwise.
//
// Accounting reads the clock at every switch between tasks, so its price is paid per
// request, and reading the counter costs less than asking the OS (Go calls the vDSO on the
// system stack; docs/accounting.md has the figures). A Clock reads the OS clock now and
// then (an anchor) and, in between, extrapolates from the counter with a rate it
// calibrates against the OS clock.
//
// # Accuracy
//
// This is the one statement of the Clock's accuracy; other comments and docs refer to it.
// A reading taken from the counter differs from time.Since(Epoch()) read at the same moment
// by at most the sum of:
//
//   - the anchor's error: the OS reading was taken somewhere between two counter readings
//     at most maxPairTicks apart (wider pairs are discarded), and is placed at their
//     middle: at most maxPairTicks/2 ticks, plus rdtscSkew for the counter readings
//     themselves (RDTSC does not wait for the instructions before it);
//   - the rate's error over the anchor span: a rate is measured between two such anchors
//     at least calibrateFirst apart (calibrateEvery after the first), so over anchorSpan
//     it errs by at most maxPairTicks*anchorSpan/calibrateFirst ticks (a hundredth as
//     many after the first recalibration);
//   - the OS clock changing its own rate since the last calibration (NTP slews it by at
//     most 5e-4): at most 500 ns over anchorSpan.
//
// That is maxBound(rate) = 0.6*maxPairTicks + rdtscSkew ticks + 500 ns: 1.7 us with a
// 2.1 GHz counter, under 2 us from 2 GHz up. Readings never go back (a reading that would
// is held at the previous one, which keeps it within the bound); readings before the first
// calibration, or when no anchor is fresh, are the OS's own.
//
// Measured 2026-11-23 with TestForcedTSCTracksTheOSClock -v (ten runs, each of at least
// 50 ms and 10,000 readings from the counter, on a loaded 2-vCPU KVM guest whose 2.1 GHz
// counter was forced although the kernel keeps time with kvm-clock): of the readings whose
// OS readings just before and after were at most 100 ns apart, |reading - their middle|
// had a median of 3 to 6 ns, a 99.9th percentile of 15 to 64 ns and a maximum of 20 to
// 66 ns; no reading lay more than 46 ns outside the OS readings around it. Under -race,
// which slows the OS reading and so widens the pairs, the furthest was 605 ns. The bound
// held in every run.
package clock

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// anchorSpan is how long a Clock extrapolates from one OS reading before it takes another:
// long enough that a busy loop pays for an OS reading only once per anchorSpan, short
// enough that the rate's error moves a reading little (see Accuracy in the package doc).
const anchorSpan = time.Millisecond

// Calibration spans: the first rate comes from OS readings at least calibrateFirst apart,
// each later one from readings at least calibrateEvery apart. The longer later spans make
// the rate's error smaller, and recalibrating follows the OS clock when NTP slews it.
const (
	calibrateFirst = 10 * time.Millisecond
	calibrateEvery = time.Second
)

// Plausible time-stamp counter rates, in nanoseconds per tick: between 100 GHz and
// 10 MHz. A rate outside is a counter that is not counting time, and the Clock stops
// using it.
const (
	minNsPerTick = 0.01
	maxNsPerTick = 100
)

// maxPairTicks bounds the counter ticks between the two counter readings that bracket an
// OS reading: wider, the thread was interrupted in between and the pair does not say when
// the OS reading was taken, so it is taken again (up to pairTries times) and, if no pair
// is narrow enough, used as a reading but neither as an anchor nor for calibration.
const (
	maxPairTicks = 4096
	pairTries    = 4
)

// rdtscSkew is how many ticks early or late a counter reading may be against the
// instructions around it: RDTSC does not serialise, and an out-of-order core runs a few
// dozen cycles ahead.
const rdtscSkew = 64

// maxSlew is the most NTP changes the OS clock's rate (5e-4), as an error over anchorSpan.
const maxSlew = anchorSpan / 2000

// maxBound returns the bound that Accuracy in the package doc states, for a counter tick of
// rate nanoseconds.
func maxBound(rate float64) time.Duration {
	ticks := maxPairTicks/2 + rdtscSkew + maxPairTicks*float64(anchorSpan)/float64(calibrateFirst)
	return time.Duration(math.Ceil(ticks*rate)) + maxSlew
}

// source says where a Clock's readings come from.
type source int

const (
	sourceAuto source = iota // the counter where tscUsable says so, else the OS
	sourceOS                 // the OS only
	sourceTSC                // the counter on amd64, whatever the kernel keeps time with (tests)
)

// Clock reads monotonic nanoseconds since its epoch. Loop-confined: its anchor and
// calibration are plain fields, updated by the readings themselves, so one goroutine (or
// goroutines that hand it over with a happens-before edge, as coroutines do) may use it.
// Other goroutines read time.Since(Epoch()), which agrees with it within the bound stated
// under Accuracy in the package doc.
//
// The zero value is not usable; call New.
type Clock struct {
	epoch time.Time
	tsc   bool    // the time-stamp counter may be used
	mult  uint64  // nanoseconds per tick as a 32.32 fixed-point number; 0 until calibrated
	span  uint64  // ticks an anchor stays valid (anchorSpan at the calibrated rate)
	last  int64   // the latest reading returned: readings never go back
	rate  float64 // nanoseconds per tick, as calibrated (for Rate)

	anchorTSC, anchorNS int64 // the latest OS reading and the counter beside it
	calTSC, calNS       int64 // where the running calibration span began
	calStarted          bool  // calTSC and calNS hold a pair
}

// New returns a clock whose readings count from epoch (which should carry a monotonic
// reading, as time.Now's do). With osOnly, or where the time-stamp counter cannot be
// trusted (see Fast), every reading comes from the OS. Any goroutine.
func New(epoch time.Time, osOnly bool) Clock {
	if osOnly {
		return newClock(epoch, sourceOS)
	}
	return newClock(epoch, sourceAuto)
}

// newClock is New with the source spelled out; sourceTSC lets tests drive the counter where
// the kernel keeps time with something else.
func newClock(epoch time.Time, src source) Clock {
	c := Clock{epoch: epoch}
	switch src {
	case sourceAuto:
		c.tsc = tscUsable()
	case sourceTSC:
		c.tsc = hasTSC
	}
	if c.tsc {
		if t, ns, ok := c.pair(); ok {
			c.calTSC, c.calNS, c.calStarted = t, ns, true
			c.last = ns
		}
	}
	return c
}

// Epoch returns the time readings count from. Any goroutine.
func (c *Clock) Epoch() time.Time { return c.epoch }

// Fast reports whether readings may come from the time-stamp counter: on amd64 when the
// kernel's own clocksource is the TSC (it then checked that the counter is invariant and
// synchronised across CPUs), unless New was told osOnly. Until the first calibration
// (calibrateFirst of use) readings come from the OS even so. Loop-confined.
func (c *Clock) Fast() bool { return c.tsc }

// Rate returns the calibrated length of a counter tick in nanoseconds, or 0 before the
// first calibration or when the counter is not used. Loop-confined.
func (c *Clock) Rate() float64 { return c.rate }

// Now returns the nanoseconds since the epoch; readings never go back. Once calibrated and
// within anchorSpan of the latest anchor it extrapolates from the time-stamp counter, within
// the bound stated under Accuracy in the package doc; otherwise it takes an OS reading
// (Sync). Loop-confined.
func (c *Clock) Now() int64 {
	if c.mult != 0 {
		if d := uint64(rdtsc() - c.anchorTSC); d < c.span {
			hi, lo := bits.Mul64(d, c.mult)
			r := max(c.anchorNS+int64(hi<<32|lo>>32), c.last)
			c.last = r
			return r
		}
	}
	return c.Sync()
}

// Sync takes an OS reading, makes it the anchor that Now extrapolates from and, once
// enough time has passed, recalibrates the counter's rate. It returns the reading (or the
// latest one returned, if that was later). Loop-confined.
func (c *Clock) Sync() int64 {
	var ns int64
	if !c.tsc {
		ns = int64(time.Since(c.epoch))
	} else {
		var t int64
		var ok bool
		t, ns, ok = c.pair()
		if ok {
			c.observe(t, ns)
		}
	}
	r := max(ns, c.last)
	c.last = r
	return r
}

// pair reads the OS clock between two counter readings and returns the counter at the
// middle of them with the OS reading, retrying when the two are too far apart; ok is
// false when no pair was narrow enough (ns is still a good reading).
func (c *Clock) pair() (tsc, ns int64, ok bool) {
	for range pairTries {
		t1 := rdtsc()
		ns = int64(time.Since(c.epoch))
		t2 := rdtsc()
		if uint64(t2-t1) <= maxPairTicks {
			return t1 + (t2-t1)/2, ns, true
		}
	}
	return 0, ns, false
}

// observe makes (t, ns) the anchor and recalibrates when the calibration span is long
// enough.
func (c *Clock) observe(t, ns int64) {
	c.anchorTSC, c.anchorNS = t, ns
	if !c.calStarted {
		c.calTSC, c.calNS, c.calStarted = t, ns, true
		return
	}
	want := int64(calibrateEvery)
	if c.mult == 0 {
		want = int64(calibrateFirst)
	}
	if ns-c.calNS < want {
		return
	}
	dt := t - c.calTSC
	if dt <= 0 {
		// The counter did not advance, or went back: start the span again.
		c.calTSC, c.calNS = t, ns
		return
	}
	rate := float64(ns-c.calNS) / float64(dt)
	if rate < minNsPerTick || rate > maxNsPerTick {
		c.tsc, c.mult, c.span, c.rate = false, 0, 0, 0 // not counting time: OS readings only
		return
	}
	c.rate = rate
	c.mult = uint64(math.Round(rate * (1 << 32)))
	c.span = uint64(float64(anchorSpan) / rate)
	c.calTSC, c.calNS = t, ns
}

// tscUsable reports whether the time-stamp counter can stand in for the OS clock here;
// it is computed once.
var tscUsable = sync.OnceValue(tscSupported)
