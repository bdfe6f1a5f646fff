package accounting

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Histograms come in two parts. The recording front (hist) is a plain array of 32-bit
// bucket counters in HDR's log-linear layout (the layout of HdrHistogram and of
// hdrhistogram-go), so recording a value is a leading-zero count, two shifts and one
// increment. It is what the per-request and per-slice paths touch. The reading side
// (Histogram) has the same layout with 64-bit counters: a recorder's counters are folded
// into it bucket for bucket (the cumulative store, or a scratch histogram), and it
// computes the percentiles exactly as hdrhistogram-go does, so the figures are those of
// an HDR histogram without the module (whose go.mod would bring gonum into the module
// graph of every program importing accounting). The bench module checks it against
// hdrhistogram-go value for value (bench/internal/hdrdiff).

// layout is the bucket layout of an HDR histogram with lowest discernible value 1, highest
// trackable value limit and the given significant digits, as hdrhistogram-go computes it.
type layout struct {
	limit   int64  // highest trackable value; larger values are recorded as limit
	digits  int    // significant decimal digits
	mask    uint64 // sub-bucket mask: values up to it fall in bucket 0
	halfMag uint   // log2 of half the sub-bucket count
	half    int    // half the sub-bucket count
	n       int    // number of counters
}

func newLayout(limit int64, digits int) *layout {
	// As hdrhistogram-go's New computes it, for lowestDiscernibleValue 1 (unit magnitude 0).
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

// top returns the highest value counted by counter i (hdrhistogram-go's
// highestEquivalentValue of value(i)): value(i) plus the counter's width minus one. Counters
// of bucket 0 and the lower half of bucket 1 are one unit wide, bucket b's upper half 2^b.
func (l *layout) top(i int) int64 {
	b := max(i>>l.halfMag-1, 0)
	return l.value(i) + int64(1)<<uint(b) - 1
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
func (h *hist) foldInto(dst *Histogram) (n uint64) {
	if !h.used {
		return 0
	}
	dc := dst.counts[:len(h.counts)]
	for i, c := range h.counts {
		dc[i] += uint64(c)
		n += uint64(c)
	}
	dst.total += n
	return n
}

// Histogram is a histogram of int64 values in HDR's log-linear layout with lowest
// discernible value 1, 64-bit counters, and percentiles computed exactly as
// hdrhistogram-go computes them (ValueAtQuantile). It is what accounting reads its own
// recorders through, exported for packages (offload) that keep distributions of their own.
// Build one with NewHistogram; the zero value is not usable. Not safe for concurrent use:
// its owner guards it (or confines it to one goroutine).
type Histogram struct {
	l      *layout
	counts []uint64
	total  uint64
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
	return newHistogram(newLayout(limit, digits))
}

func newHistogram(l *layout) *Histogram {
	return &Histogram{l: l, counts: make([]uint64, l.n)}
}

// Limit returns the highest value h tracks. Any goroutine that may read h.
func (h *Histogram) Limit() int64 { return h.l.limit }

// Digits returns the significant decimal digits h keeps. Any goroutine that may read h.
func (h *Histogram) Digits() int { return h.l.digits }

// Record counts v once: negative values count as 0, values above Limit as Limit. It does
// not allocate. The owner's goroutine.
func (h *Histogram) Record(v int64) {
	h.counts[h.l.index(min(max(v, 0), h.l.limit))]++
	h.total++
}

// TotalCount returns how many values h holds. Any goroutine that may read h.
func (h *Histogram) TotalCount() uint64 { return h.total }

// Merge adds src's counts to h. Both must have the same Limit and Digits (it panics
// otherwise). It does not allocate. The owner's goroutine (of both).
func (h *Histogram) Merge(src *Histogram) {
	if src.l != h.l && (src.l.limit != h.l.limit || src.l.digits != h.l.digits) {
		panic(fmt.Sprintf("accounting: Histogram.Merge of limit %d digits %d into limit %d digits %d",
			src.l.limit, src.l.digits, h.l.limit, h.l.digits))
	}
	if src.total == 0 {
		return
	}
	dc := h.counts[:len(src.counts)]
	for i, c := range src.counts {
		dc[i] += c
	}
	h.total += src.total
}

// Reset empties h. The owner's goroutine.
func (h *Histogram) Reset() {
	if h.total != 0 {
		clear(h.counts)
		h.total = 0
	}
}

// Clone returns a copy of h, for instance to compute percentiles after the lock guarding
// h is released. The owner's goroutine.
func (h *Histogram) Clone() *Histogram {
	return &Histogram{l: h.l, counts: append([]uint64(nil), h.counts...), total: h.total}
}

// ValueAtQuantile returns the value at quantile q (a percentage, 0 to 100; values outside
// are clamped) as hdrhistogram-go's ValueAtQuantile does: the value whose counter holds the
// value of rank q/100*TotalCount rounded half up (at least 1, at most TotalCount), reported
// as the highest value that counter counts (the lowest for q = 0). 0 when h is empty. Any
// goroutine that may read h.
func (h *Histogram) ValueAtQuantile(q float64) int64 {
	if h.total == 0 {
		return 0
	}
	if q > 100 {
		q = 100
	} else if q < 0 {
		q = 0
	}
	var i [1]int
	h.indexes([]uint64{rank(q, h.total)}, i[:])
	if q == 0 {
		return h.l.value(i[0])
	}
	return h.l.top(i[0])
}

// rank is hdrhistogram-go's percentileRank: the rank (1 to total) of percentile q, which
// is already clamped to at most 100.
func rank(q float64, total uint64) uint64 {
	r := (q/100)*float64(total) + 0.5
	if !(r >= 1) { // NaN and ranks below the first value
		return 1
	}
	if r >= float64(total) {
		return total
	}
	return uint64(r)
}

// indexes sets out[k] to the first counter at which the running count reaches ranks[k]
// (1 <= ranks[k] <= h.total; ranks in nondecreasing order), in one pass over the counters.
func (h *Histogram) indexes(ranks []uint64, out []int) {
	var acc uint64
	k := 0
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		acc += c
		for k < len(ranks) && acc >= ranks[k] {
			out[k] = i
			k++
		}
		if k == len(ranks) {
			return
		}
	}
}

// store is a cumulative histogram and the exact sum and maximum (the count is the
// histogram's). Loop-confined (or guarded by its owner).
type store struct {
	h   *Histogram
	sum int64
	max int64
}

func newStore(l *layout) store { return store{h: newHistogram(l)} }

// add folds the recorder src into s (src is left as it is).
func (s *store) add(src *hist) {
	if !src.used {
		return
	}
	src.foldInto(s.h)
	s.sum += src.sum
	s.max = max(s.max, src.max)
}

// record adds one value directly (for rare events; the hot paths use a hist). Values
// above the store's limit are counted at the limit, negative ones as 0.
func (s *store) record(v int64) {
	v = max(v, 0)
	s.sum += v
	s.max = max(s.max, v)
	s.h.Record(v)
}

// summary reads the store.
func (s *store) summary() Summary { return summarize(s.h, s.sum, s.max) }

// summaryQuantiles are the percentiles of a Summary, in increasing order.
var summaryQuantiles = [...]float64{50, 90, 99, 99.9}

// summarize reads percentiles from h (its count is the Summary's) and takes the exact sum
// and maximum as given. It does not allocate.
func summarize(h *Histogram, sum, maxV int64) Summary {
	return SummaryOf(h, 1, time.Duration(sum), time.Duration(maxV))
}

// SummaryOf returns the Summary of the values h holds, with their exact sum and maximum
// given by the caller (who keeps them: h only has counters). The percentiles are
// h.ValueAtQuantile(50, 90, 99, 99.9) times unit, never above maxV; Count is
// h.TotalCount(). It does not allocate. Any goroutine that may read h.
func SummaryOf(h *Histogram, unit, sum, maxV time.Duration) Summary {
	s := quantilesOf(h, unit, sum, maxV)
	s.Buckets = bucketsOf(h, unit)
	return s
}

// quantilesOf is SummaryOf without the buckets, for the recent views, which exporters do
// not read: the buckets cost one more pass over the counters on the loop.
func quantilesOf(h *Histogram, unit, sum, maxV time.Duration) Summary {
	s := Summary{Count: h.total, Sum: sum, Max: maxV}
	if h.total == 0 {
		return s
	}
	var ranks [len(summaryQuantiles)]uint64
	var idx [len(summaryQuantiles)]int
	for k, q := range summaryQuantiles {
		ranks[k] = rank(q, h.total)
	}
	h.indexes(ranks[:], idx[:])
	// The HDR value is the top of its counter: never report more than the exact max.
	q := func(k int) time.Duration { return min(time.Duration(h.l.top(idx[k]))*unit, maxV) }
	s.P50, s.P90, s.P99, s.P999 = q(0), q(1), q(2), q(3)
	return s
}

// summaryOf reads the recorders hs together through the scratch histogram (reset first;
// same layout), without buckets (it reads the recent views).
func summaryOf(scratch *Histogram, hs ...*hist) Summary {
	scratch.Reset()
	var sum, maxV int64
	for _, h := range hs {
		h.foldInto(scratch)
		sum += h.sum
		maxV = max(maxV, h.max)
	}
	return quantilesOf(scratch, 1, time.Duration(sum), time.Duration(maxV))
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
