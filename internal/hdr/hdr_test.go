package hdr

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
		l := NewLayout(c.limit, c.digits)
		require.Equal(t, c.n, l.n, "digits %d limit %d", c.digits, c.limit)
		if c.n > 100000 && testing.Short() {
			continue
		}
		require.Equal(t, int64(0), l.Value(0))
		last := l.Index(c.limit)
		require.Less(t, last, l.n, "digits %d limit %d: the limit's counter", c.digits, c.limit)
		for i := 0; i < l.n-1; i++ {
			lo, hi := l.Value(i), l.Top(i)
			b := max(i>>l.halfMag-1, 0)
			if hi-lo != int64(1)<<b-1 || l.Value(i+1) != hi+1 {
				t.Fatalf("digits %d limit %d: counter %d counts %d..%d, next starts at %d", c.digits, c.limit, i, lo, hi, l.Value(i+1))
			}
			if i <= last && (l.Index(lo) != i || l.Index(min(hi, c.limit)) != i || l.Index(lo+(min(hi, c.limit)-lo)/2) != i) {
				t.Fatalf("digits %d limit %d: counter %d (%d..%d) does not index back", c.digits, c.limit, i, lo, hi)
			}
		}
	}
}

// TestLayoutValues pins a few counters of the default layout (2 digits: 256 sub-buckets).
func TestLayoutValues(t *testing.T) {
	l := NewLayout(FastLimit, 2)
	for _, c := range []struct {
		v       int64
		i       int
		lo, top int64
	}{
		{0, 0, 0, 0}, {1, 1, 1, 1}, {255, 255, 255, 255}, {256, 256, 256, 257}, {257, 256, 256, 257},
		{258, 257, 258, 259}, {511, 383, 510, 511}, {512, 384, 512, 515}, {1000, 506, 1000, 1003},
		{1003, 506, 1000, 1003}, {FastLimit, 4561, 3590592659456, 3607772528639},
	} {
		i := l.Index(c.v)
		assert.Equal(t, c.i, i, "index(%d)", c.v)
		assert.Equal(t, c.lo, l.Value(i), "value(index(%d))", c.v)
		assert.Equal(t, c.top, l.Top(i), "top(index(%d))", c.v)
	}
}

// TestRecorderFoldsExactly: folding a recorder gives the counters that recording every
// value in a Histogram directly gives, for every digits and several limits, with the exact
// sum and maximum.
func TestRecorderFoldsExactly(t *testing.T) {
	limits := []int64{1000, int64(time.Second), int64(time.Hour), math.MaxInt64 / 4}
	rng := rand.New(rand.NewPCG(1, 2))
	for digits := 1; digits <= 5; digits++ {
		for _, limit := range limits {
			if digits == 5 && limit > int64(time.Second) {
				continue // millions of counters: slow under -race, and no new case
			}
			l := NewLayout(limit, digits)
			values := []int64{0, 1, 2, limit, limit - 1, -1, limit + 1}
			for p := int64(1); p > 0 && p <= limit; p <<= 1 {
				values = append(values, p-1, p, min(p+1, limit))
			}
			for range 500 {
				values = append(values, rng.Int64N(limit+1), int64(float64(limit)*math.Pow(rng.Float64(), 8)))
			}
			h := NewRecorder(l)
			h.RecordAll(values)
			direct := New(l)
			var sum, mx int64
			for _, v := range values {
				direct.Record(v)
				sum += max(v, 0)
				mx = max(mx, v)
			}
			folded := New(l)
			n := h.FoldInto(folded)
			require.Equal(t, direct.counts, folded.counts, "digits %d limit %d", digits, limit)
			require.Equal(t, uint64(len(values)), n)
			require.Equal(t, uint64(len(values)), folded.TotalCount())
			require.Equal(t, sum, h.Sum())
			require.Equal(t, mx, h.Max())
			require.Equal(t, direct.Quantiles(1, time.Duration(mx)), folded.Quantiles(1, time.Duration(mx)))
		}
	}
}

// TestRecorderClampsAndKeepsExactFigures: values beyond the limit count at the limit,
// negative ones as 0, while sum and max stay exact; Reset empties the recorder.
func TestRecorderClampsAndKeepsExactFigures(t *testing.T) {
	l := NewLayout(1000, 2)
	h := NewRecorder(l)
	h.RecordAll([]int64{-5, 5000, 10})
	require.Equal(t, int64(5010), h.Sum())
	require.Equal(t, int64(5000), h.Max())
	folded := New(l)
	h.FoldInto(folded)
	require.Equal(t, [4]time.Duration{10, 1003, 1003, 1003}, folded.Quantiles(1, 5000))
	require.Equal(t, [4]time.Duration{10, 1000, 1000, 1000}, folded.Quantiles(1, 1000), "never above the max given")
	var b [3]uint64
	folded.Buckets(1, []time.Duration{9, 10, 2000}, b[:]) // the clamped 5000 is in the counter 1000-1003
	require.Equal(t, [3]uint64{1, 2, 3}, b)
	h.Reset()
	require.False(t, h.Used() || h.Sum() != 0 || slices.ContainsFunc(h.Counts(), func(c uint32) bool { return c != 0 }), "Reset left counts")
}

// TestQuantilesMatchValueAtQuantile: Quantiles gives ValueAtQuantile at SummaryQuantiles.
func TestQuantilesMatchValueAtQuantile(t *testing.T) {
	h := New(NewLayout(int64(time.Hour), 2))
	assert.Equal(t, [4]time.Duration{}, h.Quantiles(1, time.Hour), "empty")
	rng := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		h.Record(int64(float64(time.Second) * math.Pow(rng.Float64(), 6)))
	}
	q := h.Quantiles(time.Microsecond, time.Duration(math.MaxInt64))
	for k, p := range SummaryQuantiles {
		assert.Equal(t, time.Duration(h.ValueAtQuantile(p))*time.Microsecond, q[k], "q %v", p)
	}
}

// TestFastLayoutConstants: RecordAll's constants are the fast layout, and it counts
// exactly as Index does.
func TestFastLayoutConstants(t *testing.T) {
	l := NewLayout(FastLimit, FastDigits)
	if !l.IsFast() {
		t.Fatalf("layout %+v does not match the constants", *l)
	}
	if NewLayout(int64(time.Second), 2).IsFast() || NewLayout(FastLimit, 3).IsFast() {
		t.Fatal("another layout passes IsFast")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	vs := []int64{-1, 0, 1, 255, 256, 257, FastLimit - 1, FastLimit, FastLimit + 1, math.MaxInt64}
	for range 100000 {
		vs = append(vs, int64(float64(FastLimit)*math.Pow(rng.Float64(), 10)))
	}
	for _, l := range []*Layout{l, NewLayout(int64(time.Second), 3)} {
		// The reference: Layout.Index value by value, with the documented clamps.
		want := make([]uint32, l.n)
		var sum, mx int64
		for _, v := range vs {
			v = max(v, 0)
			want[l.Index(min(v, l.limit))]++
			sum += v
			mx = max(mx, v)
		}
		h := NewRecorder(l)
		h.RecordAll(vs[:7])
		h.RecordAll(vs[7:])
		if !slices.Equal(h.counts, want) || h.sum != sum || h.max != mx || !h.used {
			t.Fatalf("layout %+v: RecordAll counts differently from Layout.Index", *l)
		}
	}
}
