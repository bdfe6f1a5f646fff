package clock

import (
	"testing"
	"time"
)

// tolerance bounds how far a reading may stray from the OS clock in these tests. The
// design error is nanoseconds; the bound is loose so that a preempted calibration on a
// busy machine cannot fail the test, and tight enough to catch a wrong rate or scale (a
// rate off by 10% is off by 100 us across an anchor span).
const tolerance = 50 * time.Microsecond

func TestNowTracksTheOSClockAndNeverGoesBack(t *testing.T) {
	for _, osOnly := range []bool{false, true} {
		epoch := time.Now()
		c := New(epoch, osOnly)
		if osOnly && c.Fast() {
			t.Fatal("osOnly clock reports Fast")
		}
		t.Logf("osOnly=%v: fast=%v", osOnly, c.Fast())
		prev := int64(0)
		deadline := time.Now().Add(3 * calibrateFirst) // past the first calibration
		n := 0
		for ; time.Now().Before(deadline) || n < 100000; n++ {
			a := int64(time.Since(epoch))
			r := c.Now()
			b := int64(time.Since(epoch))
			if r < prev {
				t.Fatalf("reading %d went back: %d after %d", n, r, prev)
			}
			if r < a-int64(tolerance) || r > b+int64(tolerance) {
				t.Fatalf("reading %d = %d ns, OS clock read %d before and %d after (rate %v ns/tick)", n, r, a, b, c.Rate())
			}
			prev = r
		}
		if c.Fast() && c.Rate() == 0 {
			t.Errorf("not calibrated after %d readings over %v", n, 3*calibrateFirst)
		}
		if c.Fast() {
			t.Logf("rate %.6f ns/tick (%.3f GHz)", c.Rate(), 1/c.Rate())
		}
	}
}

func TestSyncReturnsTheOSReading(t *testing.T) {
	epoch := time.Now()
	c := New(epoch, false)
	time.Sleep(2 * calibrateFirst)
	for range 1000 {
		a := int64(time.Since(epoch))
		r := c.Sync()
		b := int64(time.Since(epoch))
		if r < a || r > b {
			t.Fatalf("Sync = %d, OS clock read %d before and %d after", r, a, b)
		}
	}
}

// fakeCalibrating returns a clock with the counter in use and a calibration span starting
// at counter 1000, 5 ms, as if New had run then.
func fakeCalibrating() Clock {
	return Clock{tsc: true, calTSC: 1000, calNS: 5e6, anchorTSC: 1000, anchorNS: 5e6}
}

func TestObserveCalibrates(t *testing.T) {
	c := fakeCalibrating()
	c.observe(1000+2.6e6, 6e6) // 1 ms later: too soon for a first rate
	if c.mult != 0 || c.anchorTSC != 1000+2.6e6 || c.anchorNS != 6e6 {
		t.Fatalf("after 1 ms: mult %d anchor (%d, %d)", c.mult, c.anchorTSC, c.anchorNS)
	}
	c.observe(1000+26e6, 15e6) // 10 ms over 26e6 ticks: 2.6 GHz
	if got, want := c.Rate(), 10.0/26; got != want {
		t.Fatalf("rate %v, want %v", got, want)
	}
	if got, want := float64(c.mult)/(1<<32), 10.0/26; got < want*(1-1e-9) || got > want*(1+1e-9) {
		t.Fatalf("mult %d is %v ns/tick, want %v", c.mult, got, want)
	}
	if got, want := c.span, uint64(2.6e6); got < want-1 || got > want+1 {
		t.Fatalf("span %d ticks, want %d (1 ms)", got, want)
	}
	// Later calibrations wait for a second, then follow the OS clock's rate.
	c.observe(1000+26e6+2.6e9, 15e6+999e6)
	if c.Rate() != 10.0/26 {
		t.Fatalf("recalibrated after 999 ms: rate %v", c.Rate())
	}
	c.observe(1000+26e6+2.6e9, 15e6+1001e6)
	if got := c.Rate(); got <= 10.0/26 {
		t.Fatalf("recalibrated after 1001 ms over the same ticks: rate %v, want above %v", got, 10.0/26)
	}
}

func TestObserveGivesUpOnACounterThatDoesNotCountTime(t *testing.T) {
	c := fakeCalibrating()
	c.observe(1000+10, 15e6) // 10 ticks in 10 ms: 1 ms per tick
	if c.Fast() || c.mult != 0 {
		t.Fatalf("implausible rate accepted: fast %v mult %d", c.Fast(), c.mult)
	}
	c = fakeCalibrating()
	c.observe(500, 15e6) // the counter went back
	if !c.Fast() || c.mult != 0 || c.calTSC != 500 || c.calNS != 15e6 {
		t.Fatalf("counter going back: fast %v mult %d span start (%d, %d), want the span restarted", c.Fast(), c.mult, c.calTSC, c.calNS)
	}
}

// BenchmarkNow compares a reading from the time-stamp counter with one from the OS.
func BenchmarkNow(b *testing.B) {
	for _, osOnly := range []bool{false, true} {
		name := "tsc"
		if osOnly {
			name = "os"
		}
		b.Run(name, func(b *testing.B) {
			c := New(time.Now(), osOnly)
			if !osOnly && !c.Fast() {
				b.Skip("no usable time-stamp counter here")
			}
			time.Sleep(2 * calibrateFirst)
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
