package clock

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// calibrated reads c until it has calibrated its counter (or does not use it), failing
// after a minute: readings, not sleeps, drive the calibration.
func calibrated(t testing.TB, c *Clock) {
	deadline := time.Now().Add(time.Minute)
	for c.Fast() && c.Rate() == 0 {
		c.Now()
		require.False(t, time.Now().After(deadline), "not calibrated after a minute")
	}
}

// TestNowTracksTheOSClockAndNeverGoesBack checks the clocks New gives: readings never go
// back, and each lies between the OS readings taken just before and after it, widened by
// the bound stated under Accuracy for readings from the counter.
func TestNowTracksTheOSClockAndNeverGoesBack(t *testing.T) {
	for _, osOnly := range []bool{false, true} {
		epoch := time.Now()
		c := New(epoch, osOnly)
		if osOnly {
			require.False(t, c.Fast(), "osOnly clock reports Fast")
		}
		t.Logf("osOnly=%v: fast=%v", osOnly, c.Fast())
		prev := int64(0)
		deadline := time.Now().Add(3 * calibrateFirst) // past the first calibration
		n := 0
		for ; time.Now().Before(deadline) || n < 20000; n++ {
			bound := int64(0)
			if c.Rate() != 0 {
				bound = int64(maxBound(c.Rate()))
			}
			a := int64(time.Since(epoch))
			r := c.Now()
			b := int64(time.Since(epoch))
			require.GreaterOrEqual(t, r, prev, "reading %d went back", n)
			require.True(t, r >= a-bound && r <= b+bound, "reading %d = %d ns, OS clock read %d before and %d after (bound %d, rate %v ns/tick)", n, r, a, b, bound, c.Rate())
			prev = r
		}
		if c.Fast() {
			assert.NotZero(t, c.Rate(), "not calibrated after %d readings over %v", n, 3*calibrateFirst)
		}
	}
}

// TestForcedTSCTracksTheOSClock drives the counter even where the kernel keeps time with
// something else (kvm-clock in a VM, say): for at least 50 ms, past the first calibration,
// readings never go back, those from the OS lie between the OS readings around them, and
// those extrapolated from the counter lie within the bound stated under Accuracy. With -v
// it logs how far the extrapolated readings strayed (the figures the package doc quotes).
func TestForcedTSCTracksTheOSClock(t *testing.T) {
	if !hasTSC {
		t.Skip("no time-stamp counter on this architecture")
	}
	const run, minFast, narrow = 50 * time.Millisecond, 10000, 100
	epoch := time.Now()
	c := newClock(epoch, sourceTSC)
	require.True(t, c.Fast())
	deadline := time.Now().Add(time.Minute)
	var prev int64
	var errs []float64 // |reading - OS| for extrapolated readings with a narrow OS bracket
	var outside int64  // how far the furthest extrapolated reading lay outside its OS bracket
	fast, n := 0, 0
	for ; prev < int64(run) || fast < minFast; n++ {
		require.False(t, time.Now().After(deadline), "after a minute: %d readings, %d from the counter, rate %v", n, fast, c.Rate())
		anchor, rate := c.anchorTSC, c.Rate()
		a := int64(time.Since(epoch))
		r := c.Now()
		b := int64(time.Since(epoch))
		require.GreaterOrEqual(t, r, prev, "reading %d went back", n)
		if rate == 0 || c.anchorTSC != anchor { // an OS reading (Sync): the OS's, or held at prev
			require.True(t, r >= a && r <= b || r == prev, "OS reading %d = %d ns, OS clock read %d before and %d after, previous reading %d", n, r, a, b, prev)
			prev = r
			continue
		}
		prev = r
		fast++
		bound := int64(maxBound(rate))
		require.True(t, r >= a-bound && r <= b+bound, "reading %d = %d ns from the counter, OS clock read %d before and %d after (bound %d ns, rate %v ns/tick)", n, r, a, b, bound, rate)
		outside = max(outside, a-r, r-b)
		if b-a <= narrow {
			e := float64(r) - float64(a+b)/2
			errs = append(errs, max(e, -e))
		}
	}
	if len(errs) == 0 {
		t.Logf("%d readings, %d from the counter: none with OS readings at most %d ns apart around them", n, fast, narrow)
		return
	}
	slices.Sort(errs)
	q := func(p float64) float64 { return errs[int(p*float64(len(errs)-1))] }
	t.Logf("%d readings over %v, %d from the counter at %.4f GHz (bound %v); of these, %d with OS readings at most %d ns apart around them: |reading - their middle| median %.0f ns, 99th %.0f, 99.9th %.0f, max %.0f; furthest outside its OS bracket: %d ns",
		n, time.Duration(prev), fast, 1/c.Rate(), maxBound(c.Rate()), len(errs), narrow, q(0.5), q(0.99), q(0.999), errs[len(errs)-1], outside)
}

// TestSyncReturnsTheOSReading checks that Sync returns the OS reading it takes, or the latest
// reading returned if that was later, and makes it the anchor.
func TestSyncReturnsTheOSReading(t *testing.T) {
	src := sourceAuto
	if hasTSC {
		src = sourceTSC
	}
	epoch := time.Now()
	c := newClock(epoch, src)
	calibrated(t, &c)
	for range 1000 {
		last := c.last
		a := int64(time.Since(epoch))
		r := c.Sync()
		b := int64(time.Since(epoch))
		require.True(t, r >= a && r <= max(b, last), "Sync = %d, OS clock read %d before and %d after, latest reading %d", r, a, b, last)
		if c.Fast() && c.anchorNS >= a { // else the pair was too wide to anchor on
			require.LessOrEqual(t, c.anchorNS, b)
		}
	}
}

// fakeCalibrating returns a clock with the counter in use and a calibration span starting
// at counter 1000, 5 ms, as if New had run then.
func fakeCalibrating() Clock {
	return Clock{tsc: true, calTSC: 1000, calNS: 5e6, calStarted: true, anchorTSC: 1000, anchorNS: 5e6}
}

func TestObserveCalibrates(t *testing.T) {
	c := fakeCalibrating()
	c.observe(1000+2.6e6, 6e6) // 1 ms later: too soon for a first rate
	require.Zero(t, c.mult)
	require.Equal(t, [2]int64{1000 + 2.6e6, 6e6}, [2]int64{c.anchorTSC, c.anchorNS})
	c.observe(1000+26e6, 15e6) // 10 ms over 26e6 ticks: 2.6 GHz
	require.Equal(t, 10.0/26, c.Rate())
	require.InEpsilon(t, 10.0/26, float64(c.mult)/(1<<32), 1e-9)
	require.InDelta(t, 2.6e6, float64(c.span), 1, "span: 1 ms of ticks")
	// Later calibrations wait for a second, then follow the OS clock's rate.
	c.observe(1000+26e6+2.6e9, 15e6+999e6)
	require.Equal(t, 10.0/26, c.Rate(), "recalibrated after 999 ms")
	c.observe(1000+26e6+2.6e9, 15e6+1001e6)
	require.Greater(t, c.Rate(), 10.0/26, "recalibrated after 1001 ms over the same ticks")
}

func TestObserveStartsTheSpanWhenNewHadNoPair(t *testing.T) {
	c := Clock{tsc: true} // New's pair was too wide
	c.observe(1000, 5e6)
	require.True(t, c.calStarted)
	require.Equal(t, [2]int64{1000, 5e6}, [2]int64{c.calTSC, c.calNS})
	require.Zero(t, c.mult)
	c.observe(1000+26e6, 15e6)
	require.Equal(t, 10.0/26, c.Rate())
}

func TestObserveGivesUpOnACounterThatDoesNotCountTime(t *testing.T) {
	c := fakeCalibrating()
	c.observe(1000+10, 15e6) // 10 ticks in 10 ms: 1 ms per tick
	require.False(t, c.Fast(), "implausible rate accepted")
	require.Zero(t, c.mult)
	c = fakeCalibrating()
	c.observe(500, 15e6) // the counter went back: the span starts again
	require.True(t, c.Fast())
	require.Zero(t, c.mult)
	require.Equal(t, [2]int64{500, 15e6}, [2]int64{c.calTSC, c.calNS})
}

func TestMaxBound(t *testing.T) {
	// 4096*0.6 + 64 = 2521.6 ticks at 0.5 ns, plus 500 ns of slew.
	require.Equal(t, 1761*time.Nanosecond, maxBound(0.5))
	require.Less(t, maxBound(1/2.0), 2*time.Microsecond, "the package doc says: under 2 us from 2 GHz up")
}

// BenchmarkNow compares a reading from the time-stamp counter (as New chooses it, and
// forced) with one from the OS.
func BenchmarkNow(b *testing.B) {
	for _, bc := range []struct {
		name string
		src  source
	}{{"tsc", sourceAuto}, {"tsc-forced", sourceTSC}, {"os", sourceOS}} {
		b.Run(bc.name, func(b *testing.B) {
			c := newClock(time.Now(), bc.src)
			if bc.src != sourceOS && !c.Fast() {
				b.Skip("no usable time-stamp counter here")
			}
			calibrated(b, &c)
			c.Sync()
			var sum int64
			for b.Loop() {
				sum += c.Now()
			}
			if sum == 0 {
				b.Fatal("no readings")
			}
		})
	}
}
