package accounting

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layoutSizes are hdrhistogram-go v1.4.0's counter counts (len(New(1, limit,
// digits).Export().Counts)) for these limits and digits. The bench module checks the
// percentiles against hdrhistogram-go itself (bench/internal/hdrdiff).
var layoutSizes = []struct {
	digits int
	limit  int64
	n      int
}{
	{1, 2, 32}, {1, 1000, 112}, {1, 1000000000, 432}, {1, 3600000000000, 624},
	{1, math.MaxInt64 / 4, 928}, {1, math.MaxInt64, 960},
	{2, 2, 256}, {2, 1000, 512}, {2, 1000000000, 3072}, {2, 3600000000000, 4608},
	{2, math.MaxInt64 / 4, 7040}, {2, math.MaxInt64, 7296},
	{3, 2, 2048}, {3, 1000, 2048}, {3, 1000000000, 21504}, {3, 3600000000000, 33792},
	{3, math.MaxInt64 / 4, 53248}, {3, math.MaxInt64, 55296},
	{4, 2, 32768}, {4, 1000, 32768}, {4, 1000000000, 278528}, {4, 3600000000000, 475136},
	{4, math.MaxInt64 / 4, 786432}, {4, math.MaxInt64, 819200},
	{5, 2, 262144}, {5, 1000, 262144}, {5, 1000000000, 1835008}, {5, 3600000000000, 3407872},
	{5, math.MaxInt64 / 4, 5898240}, {5, math.MaxInt64, 6160384},
}

// TestLayoutMatchesHDR checks the layout against hdrhistogram-go's: the same number of
// counters, and counters that tile the values without gaps or overlaps, each one unit wide
// up to twice the sub-bucket half count and 2^b wide in bucket b, with index mapping every
// value of a counter back to it.
func TestLayoutMatchesHDR(t *testing.T) {
	for _, c := range layoutSizes {
		l := newLayout(c.limit, c.digits)
		require.Equal(t, c.n, l.n, "digits %d limit %d", c.digits, c.limit)
		if c.n > 100000 && testing.Short() {
			continue
		}
		require.Equal(t, int64(0), l.value(0))
		last := l.index(c.limit)
		require.Less(t, last, l.n, "digits %d limit %d: the limit's counter", c.digits, c.limit)
		for i := 0; i < l.n-1; i++ {
			lo, hi := l.value(i), l.top(i)
			b := max(i>>l.halfMag-1, 0)
			if hi-lo != int64(1)<<b-1 || l.value(i+1) != hi+1 {
				t.Fatalf("digits %d limit %d: counter %d counts %d..%d, next starts at %d", c.digits, c.limit, i, lo, hi, l.value(i+1))
			}
			if i <= last && (l.index(lo) != i || l.index(min(hi, c.limit)) != i || l.index(lo+(min(hi, c.limit)-lo)/2) != i) {
				t.Fatalf("digits %d limit %d: counter %d (%d..%d) does not index back", c.digits, c.limit, i, lo, hi)
			}
		}
	}
}

// TestLayoutValues pins a few counters of the default layout (2 digits: 256 sub-buckets).
func TestLayoutValues(t *testing.T) {
	l := newLayout(defLimit, 2)
	for _, c := range []struct {
		v       int64
		i       int
		lo, top int64
	}{
		{0, 0, 0, 0}, {1, 1, 1, 1}, {255, 255, 255, 255}, {256, 256, 256, 257}, {257, 256, 256, 257},
		{258, 257, 258, 259}, {511, 383, 510, 511}, {512, 384, 512, 515}, {1000, 506, 1000, 1003},
		{1003, 506, 1000, 1003}, {defLimit, 4561, 3590592659456, 3607772528639},
	} {
		i := l.index(c.v)
		assert.Equal(t, c.i, i, "index(%d)", c.v)
		assert.Equal(t, c.lo, l.value(i), "value(index(%d))", c.v)
		assert.Equal(t, c.top, l.top(i), "top(index(%d))", c.v)
	}
}

// TestHistogramValueAtQuantile checks ValueAtQuantile against values worked out by hand
// from hdrhistogram-go's definition: rank q/100*n rounded half up, clamped to 1..n; the top
// of that rank's counter, the bottom for q = 0.
func TestHistogramValueAtQuantile(t *testing.T) {
	h := NewHistogram(int64(time.Hour), 2)
	assert.Equal(t, int64(0), h.ValueAtQuantile(50), "empty")
	assert.Equal(t, int64(0), h.ValueAtQuantile(100), "empty")
	for _, v := range []int64{10, 1000, 1001, 5000} {
		h.Record(v)
	}
	// 1000 and 1001 share counter 1000..1003; 5000 is in 4992..5023 (bucket 5, width 32).
	// Ranks: q 12.5 is 4*0.125+0.5 = 1, q 37.5 is 2, q 87.4 is 3 (3.996), q 87.5 is 4.
	for _, c := range []struct {
		q    float64
		want int64
	}{
		{0, 10}, {-3, 10}, {1, 10}, {12.5, 10}, {37.4, 10}, {37.5, 1003}, {50, 1003}, {62.5, 1003},
		{75, 1003}, {87.4, 1003}, {87.5, 5023}, {99.9, 5023}, {100, 5023}, {250, 5023},
		{math.NaN(), 10}, {math.Inf(1), 5023}, {math.Inf(-1), 10},
	} {
		assert.Equal(t, c.want, h.ValueAtQuantile(c.q), "q %v", c.q)
	}
	assert.Equal(t, uint64(4), h.TotalCount())

	// The lowest value of the first counter for q = 0, its top otherwise.
	g := NewHistogram(int64(time.Hour), 2)
	g.Record(5001)
	assert.Equal(t, int64(4992), g.ValueAtQuantile(0))
	assert.Equal(t, int64(5023), g.ValueAtQuantile(0.0001))
	assert.Equal(t, int64(5023), g.ValueAtQuantile(100))
}

// TestHistogramClampsMergesAndResets: Record's clamps, Merge, Clone and Reset.
func TestHistogramClampsMergesAndResets(t *testing.T) {
	h := NewHistogram(1000, 2)
	assert.Equal(t, int64(1000), h.Limit())
	assert.Equal(t, 2, h.Digits())
	h.Record(-5)
	h.Record(5000)
	assert.Equal(t, int64(0), h.ValueAtQuantile(50))
	assert.Equal(t, int64(1003), h.ValueAtQuantile(100), "5000 counts at the limit, whose counter ends at 1003")

	c := h.Clone()
	g := NewHistogram(1000, 2)
	g.Record(300)
	h.Merge(g)
	assert.Equal(t, uint64(3), h.TotalCount())
	assert.Equal(t, int64(301), h.ValueAtQuantile(50))
	assert.Equal(t, uint64(2), c.TotalCount(), "the clone is a copy")
	assert.Equal(t, int64(0), c.ValueAtQuantile(50))

	h.Reset()
	assert.Equal(t, uint64(0), h.TotalCount())
	assert.Equal(t, int64(0), h.ValueAtQuantile(100))
	assert.False(t, slices.ContainsFunc(h.counts, func(c uint64) bool { return c != 0 }), "Reset left counts")

	assert.Panics(t, func() { h.Merge(NewHistogram(2000, 2)) }, "different limit")
	assert.Panics(t, func() { h.Merge(NewHistogram(1000, 3)) }, "different digits")
	assert.Panics(t, func() { NewHistogram(1000, 0) })
	assert.Panics(t, func() { NewHistogram(1000, MaxHistogramDigits+1) })
	assert.Panics(t, func() { NewHistogram(1, 2) })
}

// TestSummaryOf: the exact figures as given, percentiles in units, never above the max.
func TestSummaryOf(t *testing.T) {
	h := NewHistogram(int64(time.Hour/time.Microsecond), 2)
	assert.Equal(t, Summary{Sum: 7, Max: 9}, SummaryOf(h, time.Microsecond, 7, 9), "empty")
	for v := int64(1); v <= 1000; v++ {
		h.Record(v)
	}
	s := SummaryOf(h, time.Microsecond, 500500*time.Microsecond, 1000*time.Microsecond)
	// Counters are 1 us wide up to 255 us, 2 us to 511 us, 4 us to 1023 us: the counter of
	// 500 us (500-501) ends above the 500 us bound, that of 1000 us (1000-1003) above 1 ms.
	buckets := Buckets{1, 2, 5, 10, 25, 50, 100, 250, 499, 999}
	for k := 10; k < NumBuckets; k++ {
		buckets[k] = 1000
	}
	assert.Equal(t, Summary{Count: 1000, Sum: 500500 * time.Microsecond,
		P50: 501 * time.Microsecond, P90: 903 * time.Microsecond, P99: 991 * time.Microsecond,
		P999: 999 * time.Microsecond, Max: 1000 * time.Microsecond, Buckets: buckets}, s)
	for _, q := range []struct {
		got time.Duration
		p   float64
	}{{s.P50, 50}, {s.P90, 90}, {s.P99, 99}} {
		assert.Equal(t, time.Duration(h.ValueAtQuantile(q.p))*time.Microsecond, q.got, "q %v", q.p)
	}
}

// TestHistFoldsExactly: folding a recorder gives the counters that recording every value
// in a Histogram directly gives, for every digits and several limits, and summaryOf reads
// the same figures as the Histogram.
func TestHistFoldsExactly(t *testing.T) {
	limits := []int64{1000, int64(time.Second), int64(time.Hour), math.MaxInt64 / 4}
	rng := rand.New(rand.NewPCG(1, 2))
	for digits := 1; digits <= 5; digits++ {
		for _, limit := range limits {
			if digits == 5 && limit > int64(time.Second) {
				continue // millions of counters: slow under -race, and no new case
			}
			l := newLayout(limit, digits)
			values := []int64{0, 1, 2, limit, limit - 1, -1, limit + 1}
			for p := int64(1); p > 0 && p <= limit; p <<= 1 {
				values = append(values, p-1, p, min(p+1, limit))
			}
			for range 500 {
				values = append(values, rng.Int64N(limit+1), int64(float64(limit)*math.Pow(rng.Float64(), 8)))
			}
			h := newHist(l)
			h.recordAll(values)
			direct := NewHistogram(limit, digits)
			var sum, mx int64
			for _, v := range values {
				direct.Record(v)
				sum += max(v, 0)
				mx = max(mx, v)
			}
			folded := newHistogram(l)
			n := h.foldInto(folded)
			require.Equal(t, direct.counts, folded.counts, "digits %d limit %d", digits, limit)
			require.Equal(t, uint64(len(values)), n)
			require.Equal(t, uint64(len(values)), folded.TotalCount())
			want := summarize(direct, sum, mx)
			want.Buckets = Buckets{} // summaryOf reads recent views, without buckets
			require.Equal(t, want, summaryOf(newHistogram(l), &h), "digits %d limit %d", digits, limit)
		}
	}
}

// TestHistClampsAndKeepsExactFigures: values beyond the limit count at the limit, negative
// ones as 0, while sum and max stay exact.
func TestHistClampsAndKeepsExactFigures(t *testing.T) {
	l := newLayout(1000, 2)
	h := newHist(l)
	h.recordAll([]int64{-5, 5000, 10})
	require.Equal(t, int64(5010), h.sum)
	require.Equal(t, int64(5000), h.max)
	s := summaryOf(newHistogram(l), &h)
	require.Equal(t, Summary{Count: 3, Sum: 5010, P50: 10, P90: 1003, P99: 1003, P999: 1003, Max: 5000}, s, "no buckets in a recent view")
	folded := newHistogram(l)
	h.foldInto(folded)
	buckets := Buckets{2} // 1 us: 0 and 10 ns; the clamped 5000 ns is in the counter 1000-1003
	for k := 1; k < NumBuckets; k++ {
		buckets[k] = 3
	}
	require.Equal(t, buckets, summarize(folded, 5010, 5000).Buckets)
	h.reset()
	require.False(t, h.used || h.sum != 0 || slices.ContainsFunc(h.counts, func(c uint32) bool { return c != 0 }), "reset left counts")
}

// TestDefaultLayoutConstants: recordAll's constants are the default configuration's
// layout, and it counts exactly as record does.
func TestDefaultLayoutConstants(t *testing.T) {
	l := Config{}.withDefaults(epoch).layout()
	if !l.isDefault() {
		t.Fatalf("default layout %+v does not match the constants", *l)
	}
	if newLayout(int64(time.Second), 2).isDefault() || newLayout(defLimit, 3).isDefault() {
		t.Fatal("a non-default layout passes isDefault")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	vs := []int64{-1, 0, 1, 255, 256, 257, defLimit - 1, defLimit, defLimit + 1, math.MaxInt64}
	for range 100000 {
		vs = append(vs, int64(float64(defLimit)*math.Pow(rng.Float64(), 10)))
	}
	for _, l := range []*layout{l, newLayout(int64(time.Second), 3)} {
		// The reference: layout.index value by value, with the documented clamps.
		want := make([]uint32, l.n)
		var sum, mx int64
		for _, v := range vs {
			v = max(v, 0)
			want[l.index(min(v, l.limit))]++
			sum += v
			mx = max(mx, v)
		}
		h := newHist(l)
		h.recordAll(vs[:7])
		h.recordAll(vs[7:])
		if !slices.Equal(h.counts, want) || h.sum != sum || h.max != mx || !h.used {
			t.Fatalf("layout %+v: recordAll counts differently from layout.index", *l)
		}
	}
}
