// Package clock is the loop's clock: monotonic nanoseconds since an epoch, read from the
// CPU's time-stamp counter where the kernel keeps time with it, and from the OS otherwise.
//
// Accounting reads the clock at every switch between tasks, so its price is paid per
// request. Through the OS a reading costs about 22 ns on the machines this was measured on
// (Go calls the vDSO on the system stack); the time-stamp counter costs about 8. A Clock
// reads the OS clock now and then (an anchor) and, in between, extrapolates from the
// counter with a rate it calibrates against the OS clock, so its readings stay within
// nanoseconds of the OS clock's: see Clock.Now for the bounds.
package clock

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// anchorSpan is how long a Clock extrapolates from one OS reading before it takes another:
// long enough that a busy loop pays for an OS reading about once per millisecond, short
// enough that the rate's error (below) moves a reading by nanoseconds at most.
const anchorSpan = time.Millisecond

// Calibration spans: the first rate comes from OS readings at least calibrateFirst apart,
// each later one from readings at least calibrateEvery apart. Each OS reading is exact to
// within some tens of nanoseconds, so the first rate is good to about 1e-5 (10 ns over an
// anchor span) and later ones to about 1e-7, and recalibrating follows the OS clock when
// NTP slews it (by at most 5e-4).
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
// the OS reading was taken, so it is taken again (up to pairTries times). 4,096 ticks is
// under 2 us at 2.6 GHz, an error of at most 1e-4 on a first calibration.
const (
	maxPairTicks = 4096
	pairTries    = 4
)

// Clock reads monotonic nanoseconds since its epoch. Loop-confined: its anchor and
// calibration are plain fields, updated by the readings themselves, so one goroutine (or
// goroutines that hand it over with a happens-before edge, as coroutines do) may use it.
// Other goroutines read time.Since(Epoch()), which agrees with it to within tens of
// nanoseconds.
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
}

// New returns a clock whose readings count from epoch (which should carry a monotonic
// reading, as time.Now's do). With osOnly, or where the time-stamp counter cannot be
// trusted (see Fast), every reading comes from the OS. Any goroutine.
func New(epoch time.Time, osOnly bool) Clock {
	c := Clock{epoch: epoch, tsc: !osOnly && tscUsable()}
	if c.tsc {
		t, ns := c.pair()
		c.calTSC, c.calNS = t, ns
		c.anchorTSC, c.anchorNS = t, ns
		c.last = ns
	}
	return c
}

// Epoch returns the time readings count from. Any goroutine.
func (c *Clock) Epoch() time.Time { return c.epoch }

// Fast reports whether readings may come from the time-stamp counter: on amd64 when the
// kernel's own clocksource is the TSC (it then checked that the counter is invariant and
// synchronised across CPUs), unless New was told osOnly. Until the first calibration
// (about 10 ms of use) readings come from the OS even so. Loop-confined.
func (c *Clock) Fast() bool { return c.tsc }

// Rate returns the calibrated length of a counter tick in nanoseconds, or 0 before the
// first calibration or when the counter is not used. Loop-confined.
func (c *Clock) Rate() float64 { return c.rate }

// Now returns the nanoseconds since the epoch; readings never go back. Once calibrated and
// within anchorSpan of the latest OS reading it extrapolates from the time-stamp counter,
// with an error against the OS clock of the rate's error over at most anchorSpan: about
// 10 ns in the first second, under 1 ns afterwards, on top of the OS reading's own.
// Otherwise it takes an OS reading (Sync). Loop-confined.
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
	if !c.tsc {
		ns := max(int64(time.Since(c.epoch)), c.last)
		c.last = ns
		return ns
	}
	c.observe(c.pair())
	r := max(c.anchorNS, c.last)
	c.last = r
	return r
}

// pair reads the OS clock between two counter readings and returns the counter at the
// middle of them with the OS reading, retrying when the two are too far apart.
func (c *Clock) pair() (tsc, ns int64) {
	for range pairTries {
		t1 := rdtsc()
		ns = int64(time.Since(c.epoch))
		t2 := rdtsc()
		tsc = t1 + (t2-t1)/2
		if uint64(t2-t1) <= maxPairTicks {
			break
		}
	}
	return tsc, ns
}

// observe makes (t, ns) the anchor and recalibrates when the calibration span is long
// enough.
func (c *Clock) observe(t, ns int64) {
	c.anchorTSC, c.anchorNS = t, ns
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
