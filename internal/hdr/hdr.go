// Package hdr holds the HDR histograms behind baton's accounting: a bucket layout computed
// as hdrhistogram-go computes it, a recording front of 32-bit counters that the loop's
// per-request and per-slice paths touch ([Recorder]), and a reading side of 64-bit
// counters that computes percentiles exactly as hdrhistogram-go does ([Histogram]).
//
// It is shared by the loop's recorders (internal/recorder), the rooms' (loop/room), and the
// packages that keep distributions of their own (offload, loop/ws), which read a
// [Histogram] as an accounting.Summary through [SummaryOf]. It imports the standard library
// and accounting (itself standard library only), never hdrhistogram-go, whose go.mod would
// bring gonum into the module graph of every program importing baton; the bench module
// checks its figures against hdrhistogram-go value for value (bench/internal/hdrdiff).
//
// # Goroutines
//
// Nothing here locks: a [Recorder] or [Histogram] belongs to one owner (the loop, or
// whoever guards it with a lock). A [Layout] is immutable and may be shared by any
// goroutine.
package hdr

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"time"
)

// Histograms come in two parts. The recording front (Recorder) is a plain array of 32-bit
// bucket counters in HDR's log-linear layout (the layout of HdrHistogram and of
// hdrhistogram-go), so recording a value is a leading-zero count, two shifts and one
// increment. It is what the per-request and per-slice paths touch. The reading side
// (Histogram) has the same layout with 64-bit counters: a recorder's counters are folded
// into it bucket for bucket (a cumulative store, or a scratch histogram), and it computes
// the percentiles exactly as hdrhistogram-go does, so the figures are those of an HDR
// histogram without the module (whose go.mod would bring gonum into the module graph of
// every program importing baton).

// Layout is the bucket layout of an HDR histogram with lowest discernible value 1, highest
// trackable value limit and the given significant digits, as hdrhistogram-go computes it.
// Immutable: any goroutine.
type Layout struct {
	limit   int64  // highest trackable value; larger values are recorded as limit
	digits  int    // significant decimal digits
	mask    uint64 // sub-bucket mask: values up to it fall in bucket 0
	halfMag uint   // log2 of half the sub-bucket count
	half    int    // half the sub-bucket count
	n       int    // number of counters
}

// MaxDigits is the most significant digits a layout can keep: hdrhistogram-go refuses
// more, and each digit multiplies a histogram's size by about ten.
const MaxDigits = 5

// NewLayout returns the layout of hdrhistogram-go's New(1, limit, digits). It panics unless
// 1 <= digits <= MaxDigits and limit >= 2: the arguments are the caller's constants (or a
// configuration it has validated), not input.
func NewLayout(limit int64, digits int) *Layout {
	if digits < 1 || digits > MaxDigits || limit < 2 {
		panic(fmt.Sprintf("hdr: NewLayout(%d, %d): limit must be at least 2 and digits 1 to %d", limit, digits, MaxDigits))
	}
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
	return &Layout{
		limit:   limit,
		digits:  digits,
		mask:    uint64(subCount - 1),
		halfMag: halfMag,
		half:    half,
		n:       (buckets + 1) * half,
	}
}

// Limit returns the highest trackable value.
func (l *Layout) Limit() int64 { return l.limit }

// Digits returns the significant decimal digits.
func (l *Layout) Digits() int { return l.digits }

// Len returns the number of counters.
func (l *Layout) Len() int { return l.n }

// Index returns the counter of value v (0 <= v <= Limit).
func (l *Layout) Index(v int64) int {
	b := 63 - bits.LeadingZeros64(uint64(v)|l.mask) - int(l.halfMag) // bucket
	return (b+1)<<l.halfMag + int(v>>uint(b)) - l.half
}

// Value returns the lowest value counted by counter i.
func (l *Layout) Value(i int) int64 {
	b := i>>l.halfMag - 1
	sub := i&(l.half-1) + l.half
	if b < 0 {
		b, sub = 0, sub-l.half
	}
	return int64(sub) << uint(b)
}

// Top returns the highest value counted by counter i (hdrhistogram-go's
// highestEquivalentValue of Value(i)): Value(i) plus the counter's width minus one. Counters
// of bucket 0 and the lower half of bucket 1 are one unit wide, bucket b's upper half 2^b.
func (l *Layout) Top(i int) int64 {
	b := max(i>>l.halfMag-1, 0)
	return l.Value(i) + int64(1)<<uint(b) - 1
}

// The fast layout (FastDigits over 1 ns .. FastLimit) as constants, so that
// Recorder.RecordAll compiles to immediate shifts and masks: the recording path's
// instructions are most of what accounting costs per request. It is the recorders'
// default layout (internal/recorder checks that it stays so).
const (
	// FastLimit is the fast layout's highest trackable value: an hour in nanoseconds.
	FastLimit = int64(time.Hour)
	// FastDigits is the fast layout's significant digits.
	FastDigits = 2

	fastHalfMag = 7                // 2 digits: 256 sub-buckets, half of them 128
	fastHalf    = 1 << fastHalfMag // half the sub-bucket count
	fastMask    = 2*fastHalf - 1   // the sub-bucket mask
	fastCounts  = 36 * fastHalf    // (buckets + 1) * half: 35 buckets reach 2^42 ns > 1 h
)

// IsFast reports whether l is the fast layout, which RecordAll's fast path assumes.
func (l *Layout) IsFast() bool {
	return l.limit == FastLimit && l.mask == fastMask && l.halfMag == fastHalfMag && l.n == fastCounts
}

// Recorder is the recording front of a histogram of nanosecond values: bucket counters in
// HDR layout and the exact count, sum and maximum. RecordAll neither allocates nor locks.
// Owned by one goroutine (the loop), or guarded by its owner.
//
// The counters are 32 bits wide, half the cache lines of 64-bit ones: an owner must fold
// its recorders into a Histogram (and reset them) before any counter can reach 2^32, which
// at any possible rate means at least once a minute. The routes do at every window
// rotation, the loop recorder every second.
type Recorder struct {
	l      *Layout
	counts []uint32
	sum    int64 // the count is the counters' sum, taken when folding
	max    int64
	used   bool // something was recorded since the last reset
}

// NewRecorder returns an empty recorder of layout l.
func NewRecorder(l *Layout) Recorder {
	return Recorder{l: l, counts: make([]uint32, l.n)}
}

// RecordAll records the values vs (negative values count as 0, values above the limit are
// counted at the limit; sum and max keep the exact values), with the running sum and
// maximum in registers and, for the fast layout, constant shifts.
func (h *Recorder) RecordAll(vs []int64) {
	if len(vs) == 0 {
		return
	}
	h.used = true
	sum, mx := h.sum, h.max
	if h.l.IsFast() {
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
			// Index() with the constants folded: the bucket is s = top bit - 7, and
			// (s+1)<<7 + u>>s - 128 = s<<7 + u>>s.
			u := uint64(min(v, FastLimit))
			sh := 63 - fastHalfMag - bits.LeadingZeros64(u|fastMask)
			c[sh<<fastHalfMag+int(u>>uint(sh))]++
		}
		c[0] += zeros
	} else {
		l := h.l
		for _, v := range vs {
			v = max(v, 0)
			sum += v
			mx = max(mx, v)
			h.counts[l.Index(min(v, l.limit))]++
		}
	}
	h.sum, h.max = sum, mx
}

// Reset empties h.
func (h *Recorder) Reset() {
	if !h.used {
		return
	}
	clear(h.counts)
	h.sum, h.max, h.used = 0, 0, false
}

// Used reports whether anything was recorded since the last Reset.
func (h *Recorder) Used() bool { return h.used }

// Sum returns the exact sum of the values recorded since the last Reset.
func (h *Recorder) Sum() int64 { return h.sum }

// Max returns the exact maximum of the values recorded since the last Reset.
func (h *Recorder) Max() int64 { return h.max }

// Counts returns h's counters (not a copy: the caller only reads them).
func (h *Recorder) Counts() []uint32 { return h.counts }

// FoldInto adds h's counters to dst, which has h's layout, and returns how many values h
// holds. It walks every counter: meant for window rotation and snapshots, not for the
// recording path.
func (h *Recorder) FoldInto(dst *Histogram) (n uint64) {
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
// hdrhistogram-go computes them (ValueAtQuantile). The zero value is not usable: build one
// with New. Owned by one goroutine, or guarded by its owner.
type Histogram struct {
	l      *Layout
	counts []uint64
	total  uint64
}

// New returns an empty histogram of layout l.
func New(l *Layout) *Histogram {
	return &Histogram{l: l, counts: make([]uint64, l.n)}
}

// Layout returns h's layout.
func (h *Histogram) Layout() *Layout { return h.l }

// Record counts v once: negative values count as 0, values above the limit as the limit.
// It does not allocate.
func (h *Histogram) Record(v int64) {
	h.counts[h.l.Index(min(max(v, 0), h.l.limit))]++
	h.total++
}

// TotalCount returns how many values h holds.
func (h *Histogram) TotalCount() uint64 { return h.total }

// Counts returns h's counters (not a copy: the caller only reads them).
func (h *Histogram) Counts() []uint64 { return h.counts }

// Merge adds src's counts to h. Both must have the same limit and digits (it panics
// otherwise). It does not allocate.
func (h *Histogram) Merge(src *Histogram) {
	if hl, sl := h.l, src.l; sl != hl && (sl.limit != hl.limit || sl.digits != hl.digits) {
		panic(fmt.Sprintf("hdr: Histogram.Merge of limit %d digits %d into limit %d digits %d",
			sl.limit, sl.digits, hl.limit, hl.digits))
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

// Reset empties h.
func (h *Histogram) Reset() {
	if h.total != 0 {
		clear(h.counts)
		h.total = 0
	}
}

// Clone returns a copy of h.
func (h *Histogram) Clone() *Histogram {
	return &Histogram{l: h.l, counts: append([]uint64(nil), h.counts...), total: h.total}
}

// AddCounts32 adds a prefix of a recorder's counters (same layout) to h.
func (h *Histogram) AddCounts32(src []uint32) {
	dc := h.counts[:len(src)]
	var n uint64
	for i, c := range src {
		dc[i] += uint64(c)
		n += uint64(c)
	}
	h.total += n
}

// AddCounts64 adds a prefix of another histogram's counters (same layout) to h.
func (h *Histogram) AddCounts64(src []uint64) {
	dc := h.counts[:len(src)]
	var n uint64
	for i, c := range src {
		dc[i] += c
		n += c
	}
	h.total += n
}

// ValueAtQuantile returns the value at quantile q (a percentage, 0 to 100; values outside
// are clamped) as hdrhistogram-go's ValueAtQuantile does: the value whose counter holds the
// value of rank q/100*TotalCount rounded half up (at least 1, at most TotalCount), reported
// as the highest value that counter counts (the lowest for q = 0). 0 when h is empty.
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
	h.indexes([]uint64{Rank(q, h.total)}, i[:])
	if q == 0 {
		return h.l.Value(i[0])
	}
	return h.l.Top(i[0])
}

// Rank is hdrhistogram-go's percentileRank: the rank (1 to total) of percentile q, which
// is already clamped to at most 100.
func Rank(q float64, total uint64) uint64 {
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

// SummaryQuantiles are the percentiles of a summary (accounting.Summary's P50, P90, P99
// and P999), in increasing order.
var SummaryQuantiles = [...]float64{50, 90, 99, 99.9}

// Quantiles returns the values at SummaryQuantiles times unit, each the top of its counter
// but never above maxV (the exact maximum, which the caller keeps); zeros when h is empty.
// It does not allocate.
func (h *Histogram) Quantiles(unit, maxV time.Duration) (q [len(SummaryQuantiles)]time.Duration) {
	if h.total == 0 {
		return q
	}
	var ranks [len(SummaryQuantiles)]uint64
	var idx [len(SummaryQuantiles)]int
	for k, p := range SummaryQuantiles {
		ranks[k] = Rank(p, h.total)
	}
	h.indexes(ranks[:], idx[:])
	for k := range q {
		// The HDR value is the top of its counter: never report more than the exact max.
		q[k] = min(time.Duration(h.l.Top(idx[k]))*unit, maxV)
	}
	return q
}

// Buckets sets out[k] to the cumulative count of values at most bounds[k], for h's values
// in unit; bounds increase and out is as long as bounds. A counter is counted in bucket k
// when the highest value it counts is at most bounds[k] (as ValueAtQuantile reports a
// counter by its highest value). The counters each bound ends at are found by binary
// search over the layout, and the counts are summed in one pass up to the last bound. It
// does not allocate.
func (h *Histogram) Buckets(unit time.Duration, bounds []time.Duration, out []uint64) {
	clear(out)
	if h.total == 0 {
		return
	}
	l := h.l
	var acc uint64
	i := 0
	for k, bound := range bounds {
		// end: the first counter whose highest value is above the bound (tops increase
		// with the index).
		v := int64(bound / unit)
		end := i + sort.Search(l.n-i, func(j int) bool { return l.Top(i+j) > v })
		for _, c := range h.counts[i:end] {
			acc += c
		}
		out[k], i = acc, end
	}
}
