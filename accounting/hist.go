package accounting

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// hist is an HDR histogram of nanosecond values with the exact count, sum and maximum kept
// beside it. record neither allocates nor locks. Loop-confined (or guarded by its owner).
type hist struct {
	h     *hdrhistogram.Histogram
	limit int64 // highest trackable value; larger values are recorded as limit
	n     uint64
	sum   int64
	max   int64
}

func newHist(cfg Config) hist {
	limit := int64(cfg.HistogramMax)
	return hist{h: hdrhistogram.New(1, limit, cfg.HistogramDigits), limit: limit}
}

// record adds one value (negative values count as 0).
func (h *hist) record(v int64) {
	v = max(v, 0)
	h.n++
	h.sum += v
	h.max = max(h.max, v)
	// RecordValue fails (and allocates its error) only out of range, which the clamp rules
	// out.
	_ = h.h.RecordValue(min(v, h.limit))
}

func (h *hist) reset() {
	h.h.Reset()
	h.n, h.sum, h.max = 0, 0, 0
}

// summary reads the histogram. It does not allocate beyond the library's iterators.
func (h *hist) summary() Summary {
	s := Summary{Count: h.n, Sum: time.Duration(h.sum), Max: time.Duration(h.max)}
	if h.n == 0 {
		return s
	}
	q := func(p float64) time.Duration {
		// The HDR value is the top of its bucket: never report more than the exact max.
		return time.Duration(min(h.h.ValueAtQuantile(p), h.max))
	}
	s.P50, s.P90, s.P99, s.P999 = q(50), q(90), q(99), q(99.9)
	return s
}

// mergeInto resets dst and merges srcs into it (all must have the same layout).
func mergeInto(dst *hist, srcs ...*hist) {
	dst.reset()
	for _, src := range srcs {
		dst.add(src)
	}
}

// add merges src into h (same layout). It walks src's buckets: meant for window rotation
// and snapshots, not for the recording path.
func (h *hist) add(src *hist) {
	if src.n == 0 {
		return
	}
	h.h.Merge(src.h)
	h.n += src.n
	h.sum += src.sum
	h.max = max(h.max, src.max)
}

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
}

// Mean returns Sum/Count, or 0 when Count is 0. Any goroutine.
func (s Summary) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}
