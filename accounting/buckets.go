package accounting

import "time"

// BucketBounds are the upper bounds of Buckets: 1, 2.5 and 5 times each power of ten from
// 1 us to 10 s. They span what baton measures (a slice's lag in microseconds, a request
// parked on a slow dependency for seconds) with the resolution Prometheus's default
// buckets have, and are the same for every figure so that exporters can aggregate them
// across routes and instances. Read-only.
var BucketBounds = [NumBuckets]time.Duration{
	1 * time.Microsecond, 2500 * time.Nanosecond, 5 * time.Microsecond,
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	1 * time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	1 * time.Second, 2500 * time.Millisecond, 5 * time.Second,
	10 * time.Second,
}

// NumBuckets is the number of finite bucket bounds (the length of BucketBounds).
const NumBuckets = 22

// Buckets are a distribution's cumulative bucket counts: Buckets[k] is how many values are
// at most BucketBounds[k] (Summary.Count is the +Inf bucket). A value is placed by its HDR
// counter: a counter is in bucket k when the highest value it counts is at most
// BucketBounds[k], as ValueAtQuantile reports a counter by its highest value, so a value
// within the histogram's relative error (1% with the default digits) above a bound may be
// counted in the next bucket, never in an earlier one. Plain data.
type Buckets [NumBuckets]uint64

// MarshalJSON encodes s as the stats pages do: {"count", "mean_seconds", "p50_seconds",
// "p90_seconds", "p99_seconds", "p999_seconds", "max_seconds"} (the buckets are left out).
// Any goroutine.
func (s Summary) MarshalJSON() ([]byte, error) { return marshalJSON(summaryJSON(s)) }
