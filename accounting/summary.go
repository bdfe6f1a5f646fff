package accounting

import "time"

// Summary is a distribution of durations: exact Count, Sum and Max, and percentiles from
// an HDR histogram (within 10^-digits relative error, never above Max). Plain data.
type Summary struct {
	Count uint64        // values recorded
	Sum   time.Duration // their exact sum
	P50   time.Duration // median
	P90   time.Duration // 90th percentile
	P99   time.Duration // 99th percentile
	P999  time.Duration // 99.9th percentile
	Max   time.Duration // exact maximum

	// Buckets are the cumulative bucket counts at BucketBounds, for exporters that keep
	// histograms (Prometheus) rather than percentiles. Zero in the routes' recent views
	// (SummaryPair.Recent), which exporters do not need.
	Buckets Buckets
}

// Mean returns Sum/Count, or 0 when Count is 0. Any goroutine.
func (s Summary) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}
