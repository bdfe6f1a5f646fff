package hdr

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/batonrt/baton/accounting"
)

// TestSummaryOf: the exact figures as given, percentiles in units, never above the max.
func TestSummaryOf(t *testing.T) {
	h := New(NewLayout(int64(time.Hour/time.Microsecond), 2))
	assert.Equal(t, accounting.Summary{Sum: 7, Max: 9}, SummaryOf(h, time.Microsecond, 7, 9), "empty")
	for v := int64(1); v <= 1000; v++ {
		h.Record(v)
	}
	s := SummaryOf(h, time.Microsecond, 500500*time.Microsecond, 1000*time.Microsecond)
	// Counters are 1 us wide up to 255 us, 2 us to 511 us, 4 us to 1023 us: the counter of
	// 500 us (500-501) ends above the 500 us bound, that of 1000 us (1000-1003) above 1 ms.
	buckets := accounting.Buckets{1, 2, 5, 10, 25, 50, 100, 250, 499, 999}
	for k := 10; k < accounting.NumBuckets; k++ {
		buckets[k] = 1000
	}
	assert.Equal(t, accounting.Summary{Count: 1000, Sum: 500500 * time.Microsecond,
		P50: 501 * time.Microsecond, P90: 903 * time.Microsecond, P99: 991 * time.Microsecond,
		P999: 999 * time.Microsecond, Max: 1000 * time.Microsecond, Buckets: buckets}, s)
	for _, q := range []struct {
		got time.Duration
		p   float64
	}{{s.P50, 50}, {s.P90, 90}, {s.P99, 99}} {
		assert.Equal(t, time.Duration(h.ValueAtQuantile(q.p))*time.Microsecond, q.got, "q %v", q.p)
	}
}

// TestBucketsBoundCounts: each cumulative bucket holds every value at least 1% under its
// bound and none above it (values within the histogram's error of a bound may go to the next
// bucket), buckets never decrease, and the last holds every value up to 10 s.
func TestBucketsBoundCounts(t *testing.T) {
	for _, unit := range []time.Duration{1, time.Microsecond} {
		rng := rand.New(rand.NewPCG(3, 4))
		h := New(NewLayout(int64(time.Hour/unit), 2))
		var values []time.Duration
		for range 20000 {
			// log-uniform over 100 ns .. 100 s, plus the bounds themselves
			v := time.Duration(100 * float64(time.Nanosecond) * math.Pow(10, rng.Float64()*9))
			values = append(values, v)
		}
		values = append(values, accounting.BucketBounds[:]...)
		for _, v := range values {
			h.Record(int64(v / unit))
		}
		b := SummaryOf(h, unit, 0, 0).Buckets
		for k, bound := range accounting.BucketBounds {
			var atMost, under uint64
			for _, v := range values {
				q := v / unit * unit // what the histogram saw
				if q <= bound {
					atMost++
				}
				if float64(q) <= 0.99*float64(bound) {
					under++
				}
			}
			assert.LessOrEqual(t, b[k], atMost, "unit %v bound %v", unit, bound)
			assert.GreaterOrEqual(t, b[k], under, "unit %v bound %v", unit, bound)
			if k > 0 {
				assert.GreaterOrEqual(t, b[k], b[k-1])
			}
		}
	}
	assert.Equal(t, accounting.Buckets{}, SummaryOf(New(NewLayout(1000, 2)), 1, 0, 0).Buckets, "empty")
}
