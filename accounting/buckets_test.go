package accounting

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBucketsBoundCounts: each cumulative bucket holds every value at least 1% under its
// bound and none above it (values within the histogram's error of a bound may go to the next
// bucket), buckets never decrease, and the last holds every value up to 10 s.
func TestBucketsBoundCounts(t *testing.T) {
	for _, unit := range []time.Duration{1, time.Microsecond} {
		rng := rand.New(rand.NewPCG(3, 4))
		h := NewHistogram(int64(time.Hour/unit), 2)
		var values []time.Duration
		for range 20000 {
			// log-uniform over 100 ns .. 100 s, plus the bounds themselves
			v := time.Duration(100 * float64(time.Nanosecond) * math.Pow(10, rng.Float64()*9))
			values = append(values, v)
		}
		values = append(values, BucketBounds[:]...)
		for _, v := range values {
			h.Record(int64(v / unit))
		}
		b := SummaryOf(h, unit, 0, 0).Buckets
		for k, bound := range BucketBounds {
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
	assert.Equal(t, Buckets{}, SummaryOf(NewHistogram(1000, 2), 1, 0, 0).Buckets, "empty")
}

// TestSummaryJSON: a Summary marshals as the pages' summary object, in seconds, without
// its buckets.
func TestSummaryJSON(t *testing.T) {
	out, err := json.Marshal(Summary{Count: 2, Sum: 3 * time.Second, P50: time.Second, P90: 2 * time.Second,
		P99: 2 * time.Second, P999: 2 * time.Second, Max: 2 * time.Second, Buckets: Buckets{1}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"count":2,"mean_seconds":1.5,"p50_seconds":1,"p90_seconds":2,"p99_seconds":2,"p999_seconds":2,"max_seconds":2}`, string(out))
}
