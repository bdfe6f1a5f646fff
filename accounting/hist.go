package accounting

import (
	"fmt"
	"time"

	"github.com/batonrt/baton/internal/hdr"
)

// MaxHistogramDigits is the most significant digits a histogram can keep: HDR histograms
// (hdrhistogram-go, whose layout accounting's follows) refuse more, and each digit
// multiplies a histogram's size by about ten.
const MaxHistogramDigits = 5

// Histogram is a histogram of int64 values in HDR's log-linear layout with lowest
// discernible value 1, 64-bit counters, and percentiles computed exactly as
// hdrhistogram-go computes them (ValueAtQuantile). It is what baton reads its own
// recorders through, exported for packages (offload) that keep distributions of their own.
// Build one with NewHistogram; the zero value is not usable. Not safe for concurrent use:
// its owner guards it (or confines it to one goroutine).
type Histogram struct {
	h hdr.Histogram
}

// NewHistogram returns an empty histogram tracking values from 0 to limit with digits
// significant decimal digits (hdrhistogram-go's New(1, limit, digits)). It panics unless
// 1 <= digits <= MaxHistogramDigits and limit >= 2: the arguments are constants of the
// caller, not input. Any goroutine.
func NewHistogram(limit int64, digits int) *Histogram {
	if digits < 1 || digits > MaxHistogramDigits || limit < 2 {
		panic(fmt.Sprintf("accounting: NewHistogram(%d, %d): limit must be at least 2 and digits 1 to %d",
			limit, digits, MaxHistogramDigits))
	}
	return &Histogram{h: *hdr.New(hdr.NewLayout(limit, digits))}
}

// Limit returns the highest value h tracks. Any goroutine that may read h.
func (h *Histogram) Limit() int64 { return h.h.Layout().Limit() }

// Digits returns the significant decimal digits h keeps. Any goroutine that may read h.
func (h *Histogram) Digits() int { return h.h.Layout().Digits() }

// Record counts v once: negative values count as 0, values above Limit as Limit. It does
// not allocate. The owner's goroutine.
func (h *Histogram) Record(v int64) { h.h.Record(v) }

// TotalCount returns how many values h holds. Any goroutine that may read h.
func (h *Histogram) TotalCount() uint64 { return h.h.TotalCount() }

// Merge adds src's counts to h. Both must have the same Limit and Digits (it panics
// otherwise). It does not allocate. The owner's goroutine (of both).
func (h *Histogram) Merge(src *Histogram) {
	if hl, sl := h.h.Layout(), src.h.Layout(); sl != hl && (sl.Limit() != hl.Limit() || sl.Digits() != hl.Digits()) {
		panic(fmt.Sprintf("accounting: Histogram.Merge of limit %d digits %d into limit %d digits %d",
			sl.Limit(), sl.Digits(), hl.Limit(), hl.Digits()))
	}
	h.h.Merge(&src.h)
}

// Reset empties h. The owner's goroutine.
func (h *Histogram) Reset() { h.h.Reset() }

// Clone returns a copy of h, for instance to compute percentiles after the lock guarding
// h is released. The owner's goroutine.
func (h *Histogram) Clone() *Histogram { return &Histogram{h: *h.h.Clone()} }

// ValueAtQuantile returns the value at quantile q (a percentage, 0 to 100; values outside
// are clamped) as hdrhistogram-go's ValueAtQuantile does: the value whose counter holds the
// value of rank q/100*TotalCount rounded half up (at least 1, at most TotalCount), reported
// as the highest value that counter counts (the lowest for q = 0). 0 when h is empty. Any
// goroutine that may read h.
func (h *Histogram) ValueAtQuantile(q float64) int64 { return h.h.ValueAtQuantile(q) }

// SummaryOf returns the Summary of the values h holds, with their exact sum and maximum
// given by the caller (who keeps them: h only has counters). The percentiles are
// h.ValueAtQuantile(50, 90, 99, 99.9) times unit, never above maxV; Count is
// h.TotalCount(). It does not allocate. Any goroutine that may read h.
func SummaryOf(h *Histogram, unit, sum, maxV time.Duration) Summary {
	q := h.h.Quantiles(unit, maxV)
	s := Summary{Count: h.h.TotalCount(), Sum: sum, P50: q[0], P90: q[1], P99: q[2], P999: q[3], Max: maxV}
	h.h.Buckets(unit, BucketBounds[:], s.Buckets[:])
	return s
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
