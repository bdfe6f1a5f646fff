package accounting

import (
	"math"
	"math/bits"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histograms come in two parts. The recording front (hist) is a plain array of bucket
// counters in HDR's log-linear layout, so recording a value is a leading-zero count, two
// shifts and one increment, a fraction of the instructions of
// hdrhistogram.Histogram.RecordValues and no second struct to load. It is what the
// per-request and per-slice paths touch. Reading goes through hdrhistogram-go: a recorder's
// counters are folded, bucket for bucket, into an hdrhistogram.Histogram of the same layout
// (the cumulative store, or a scratch histogram), which computes the percentiles. Because
// the layouts are identical the fold loses nothing (TestHistMatchesHDR).

// layout is the bucket layout of an HDR histogram with lowest trackable value 1, highest
// limit and the given significant digits, as hdrhistogram-go computes it.
type layout struct {
	limit   int64  // highest trackable value; larger values are recorded as limit
	digits  int    // significant decimal digits
	mask    uint64 // sub-bucket mask: values up to it fall in bucket 0
	halfMag uint   // log2 of half the sub-bucket count
	half    int    // half the sub-bucket count
	n       int    // number of counters
}

func newLayout(limit int64, digits int) *layout {
	// As hdrhistogram.New computes it, for lowestDiscernibleValue 1 (unit magnitude 0).
	largest := 2 * math.Pow10(digits)
	countMag := max(int(math.Ceil(math.Log2(largest))), 1)
	halfMag := uint(countMag - 1)
	subCount := int64(1) << (halfMag + 1)
	buckets := 1
	for smallest := subCount; smallest < limit; smallest <<= 1 {
		if smallest > math.MaxInt64/2 {
			buckets++
			break
		}
		buckets++
	}
	half := int(subCount / 2)
	return &layout{
		limit:   limit,
		digits:  digits,
		mask:    uint64(subCount - 1),
		halfMag: halfMag,
		half:    half,
		n:       (buckets + 1) * half,
	}
}

// index returns the counter of value v (0 <= v <= limit).
func (l *layout) index(v int64) int {
	b := 63 - bits.LeadingZeros64(uint64(v)|l.mask) - int(l.halfMag) // bucket
	return (b+1)<<l.halfMag + int(v>>uint(b)) - l.half
}

// value returns the lowest value counted by counter i.
func (l *layout) value(i int) int64 {
	b := i>>l.halfMag - 1
	sub := i&(l.half-1) + l.half
	if b < 0 {
		b, sub = 0, sub-l.half
	}
	return int64(sub) << uint(b)
}

// newHDR returns an empty hdrhistogram.Histogram with layout l.
func (l *layout) newHDR() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, l.limit, l.digits)
}

// hist is the recording front of a histogram of nanosecond values: bucket counters in HDR
// layout and the exact count, sum and maximum. record neither allocates nor locks.
// Loop-confined (or guarded by its owner).
//
// The counters are 32 bits wide, half the cache lines of 64-bit ones: an owner must fold
// its recorders into a store (and reset them) before any counter can reach 2^32, which at
// any possible rate means at least once a minute. Routes do at every window rotation,
// Loop every second.
type hist struct {
	l      *layout
	counts []uint32
	sum    int64 // the count is the counters' sum, taken when folding
	max    int64
	used   bool // something was recorded since the last reset
}

func newHist(l *layout) hist {
	return hist{l: l, counts: make([]uint32, l.n)}
}

// The default layout (DefaultHistogramDigits over 1 ns .. DefaultHistogramMax) as
// constants, so that recordAll compiles to immediate shifts and masks: the recording
// path's instructions are most of what accounting costs per request.
const (
	defHalfMag = 7               // 2 digits: 256 sub-buckets, half of them 128
	defHalf    = 1 << defHalfMag // half the sub-bucket count
	defMask    = 2*defHalf - 1   // the sub-bucket mask
	defLimit   = int64(DefaultHistogramMax)
	defCounts  = 36 * defHalf // (buckets + 1) * half: 35 buckets reach 2^42 ns > 1 h
)

// isDefault reports whether l is the default layout, which recordAll's fast path assumes.
func (l *layout) isDefault() bool {
	return l.limit == defLimit && l.mask == defMask && l.halfMag == defHalfMag && l.n == defCounts
}

// recordAll records the values vs (negative values count as 0, values above the limit are
// counted at the limit; sum and max keep the exact values), with the running sum and
// maximum in registers and, for the default layout, constant shifts.
func (h *hist) recordAll(vs []int64) {
	if len(vs) == 0 {
		return
	}
	h.used = true
	sum, mx := h.sum, h.max
	if h.l.isDefault() {
		c := h.counts
		zeros := uint32(0)
		for _, v := range vs {
			if v <= 0 {
				// Zero is the common value of some figures (the parked time of a handler
				// that never waits, the queue delay of a request run at once): counted
				// apart, it costs a predictable branch instead of a bucket computation.
				zeros++
				continue
			}
			sum += v
			mx = max(mx, v)
			// index() with the constants folded: the bucket is s = top bit - 7, and
			// (s+1)<<7 + u>>s - 128 = s<<7 + u>>s.
			u := uint64(min(v, defLimit))
			sh := 63 - defHalfMag - bits.LeadingZeros64(u|defMask)
			c[sh<<defHalfMag+int(u>>uint(sh))]++
		}
		c[0] += zeros
	} else {
		l := h.l
		for _, v := range vs {
			v = max(v, 0)
			sum += v
			mx = max(mx, v)
			h.counts[l.index(min(v, l.limit))]++
		}
	}
	h.sum, h.max = sum, mx
}

// reset empties h.
func (h *hist) reset() {
	if !h.used {
		return
	}
	clear(h.counts)
	h.sum, h.max, h.used = 0, 0, false
}

// foldInto adds h's counters to dst, which has h's layout, and returns how many values h
// holds. It walks every counter: meant for window rotation and snapshots, not for the
// recording path.
func (h *hist) foldInto(dst *hdrhistogram.Histogram) (n uint64) {
	if !h.used {
		return 0
	}
	for i, c := range h.counts {
		if c != 0 {
			// In range by construction: value(i) is a value of this layout.
			_ = dst.RecordValues(h.l.value(i), int64(c))
			n += uint64(c)
		}
	}
	return n
}

// store is a cumulative histogram: an hdrhistogram.Histogram and the exact count, sum and
// maximum. Loop-confined (or guarded by its owner).
type store struct {
	h   *hdrhistogram.Histogram
	n   uint64
	sum int64
	max int64
}

func newStore(l *layout) store { return store{h: l.newHDR()} }

// add folds the recorder src into s (src is left as it is).
func (s *store) add(src *hist) {
	if !src.used {
		return
	}
	s.n += src.foldInto(s.h)
	s.sum += src.sum
	s.max = max(s.max, src.max)
}

// record adds one value directly (for rare events; the hot paths use a hist).
func (s *store) record(v int64, limit int64) {
	v = max(v, 0)
	s.n++
	s.sum += v
	s.max = max(s.max, v)
	_ = s.h.RecordValue(min(v, limit))
}

// summary reads the store.
func (s *store) summary() Summary { return summarize(s.h, s.n, s.sum, s.max) }

// summarize reads percentiles from h and takes the exact figures as given. It does not
// allocate beyond the library's iterators.
func summarize(h *hdrhistogram.Histogram, n uint64, sum, maxV int64) Summary {
	s := Summary{Count: n, Sum: time.Duration(sum), Max: time.Duration(maxV)}
	if n == 0 {
		return s
	}
	q := func(p float64) time.Duration {
		// The HDR value is the top of its bucket: never report more than the exact max.
		return time.Duration(min(h.ValueAtQuantile(p), maxV))
	}
	s.P50, s.P90, s.P99, s.P999 = q(50), q(90), q(99), q(99.9)
	return s
}

// summaryOf reads the recorders hs together through the scratch histogram (reset first;
// same layout).
func summaryOf(scratch *hdrhistogram.Histogram, hs ...*hist) Summary {
	scratch.Reset()
	var n uint64
	var sum, maxV int64
	for _, h := range hs {
		n += h.foldInto(scratch)
		sum += h.sum
		maxV = max(maxV, h.max)
	}
	return summarize(scratch, n, sum, maxV)
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
