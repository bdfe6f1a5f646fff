package hdrdiff

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/hdr"
	"github.com/stretchr/testify/require"
)

// limits are the highest trackable values the tests use: tiny, small, a second and an hour
// in nanoseconds (the recorders' default), and two near the top of int64.
var limits = []int64{2, 1000, int64(time.Second), int64(time.Hour), math.MaxInt64 / 4, math.MaxInt64}

// edgeQuantiles are the quantiles every comparison asks, clamped ones and NaN included.
var edgeQuantiles = []float64{0, 100, 50, 90, 99, 99.9, 99.99, 1e-9, 0.001, 1, 25, 75,
	99.9999, -1, 101, 1e9, math.NaN(), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64}

// pair is an hdr.Histogram and an hdrhistogram.Histogram fed the same values.
type pair struct {
	own   *hdr.Histogram
	ref   *hdrhistogram.Histogram
	limit int64
}

func newPair(limit int64, digits int) pair {
	return pair{own: hdr.New(hdr.NewLayout(limit, digits)), ref: hdrhistogram.New(1, limit, digits), limit: limit}
}

// record records v in both; hdrhistogram-go refuses values out of range, where
// hdr.Histogram clamps them, so the reference gets the clamped value.
func (p pair) record(t *testing.T, v int64) {
	p.own.Record(v)
	require.NoError(t, p.ref.RecordValue(min(max(v, 0), p.limit)))
}

// check compares the totals and the value at every quantile qs, plus the edge quantiles.
func (p pair) check(t *testing.T, what string, qs []float64) {
	t.Helper()
	require.Equal(t, uint64(p.ref.TotalCount()), p.own.TotalCount(), "%s: total count", what)
	for _, q := range append(qs, edgeQuantiles...) {
		if got, want := p.own.ValueAtQuantile(q), p.ref.ValueAtQuantile(q); got != want {
			t.Fatalf("%s: ValueAtQuantile(%v) = %d, hdrhistogram-go says %d", what, q, got, want)
		}
	}
}

// values returns n values of one of several shapes over 0..limit, with some beyond it and
// some negative.
func values(rng *rand.Rand, limit int64, n int) []int64 {
	vs := []int64{0, 1, limit, limit - 1, limit / 2, -1, math.MinInt64}
	if limit < math.MaxInt64 {
		vs = append(vs, limit+1, math.MaxInt64)
	}
	for p := int64(1); p > 0 && p <= limit; p <<= 1 {
		vs = append(vs, p-1, p, min(p+1, limit))
	}
	for len(vs) < n {
		switch rng.IntN(5) {
		case 0: // uniform
			vs = append(vs, rng.Int64N(limit)+rng.Int64N(2))
		case 1: // log-uniform: every bucket
			vs = append(vs, int64(math.Pow(float64(limit), rng.Float64())))
		case 2: // small, where counters are one unit wide
			vs = append(vs, rng.Int64N(min(limit, 3000)+1))
		case 3: // repeats of one value
			v := int64(float64(limit) * math.Pow(rng.Float64(), 6))
			for range 1 + rng.IntN(50) {
				vs = append(vs, v)
			}
		case 4: // heavy tail near the limit
			vs = append(vs, limit-int64(float64(limit)*math.Pow(rng.Float64(), 20)))
		}
	}
	return vs
}

// TestValueAtQuantileMatchesHDR records the same random values into hdr.Histogram
// and hdrhistogram-go for digits 1 to 5 and several limits and compares the value at every
// rank (for digits up to 3; above, whose histograms have up to three million counters, only
// at random and edge quantiles), at random quantiles and at the edge quantiles, after each
// round of recording; and the same for a histogram of the larger values only, whose lowest
// counter is wide (quantile 0 reports its lowest value, the others its top).
func TestValueAtQuantileMatchesHDR(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for digits := 1; digits <= hdr.MaxDigits; digits++ {
		for _, limit := range limits {
			if digits == 5 && limit > int64(time.Hour) {
				continue // 6 million counters and no new case; internal/hdr's TestLayoutMatchesHDR counts them
			}
			t.Run(fmt.Sprintf("digits=%d/limit=%d", digits, limit), func(t *testing.T) {
				valueAtQuantile(t, rng, digits, limit)
			})
		}
	}
}

func valueAtQuantile(t *testing.T, rng *rand.Rand, digits int, limit int64) {
	p := newPair(limit, digits)
	require.Equal(t, limit, p.own.Layout().Limit())
	require.Equal(t, digits, p.own.Layout().Digits())
	p.check(t, "empty", nil)
	// high gets only the values above limit/64: its lowest counter is wide, where
	// quantile 0 (its lowest value) and the others (its top) differ.
	high := newPair(limit, digits)
	// Every query scans up to all counters (six million for 5 digits and the top
	// limits): fewer values and queries for more digits keep the test short under
	// -race.
	rounds, n, random := 2, 1000, 100
	if digits >= 3 {
		rounds, n, random = 1, 300, 10
	}
	for round := range rounds {
		for _, v := range values(rng, limit, n) {
			p.record(t, v)
			if v > limit/64 {
				high.record(t, v)
			}
		}
		high.check(t, describe(digits, limit, round)+" high values", qsFrom(rng, random))
		var qs []float64
		if digits <= 3 {
			total := float64(p.own.TotalCount())
			for k := 1; k <= int(total); k++ {
				// Rank k (and the ranks on either side of its rounding).
				qs = append(qs, 100*(float64(k)-0.5)/total, 100*float64(k)/total)
			}
		}
		qs = append(qs, qsFrom(rng, random)...)
		p.check(t, describe(digits, limit, round), qs)
	}
}

// TestMergeResetCloneMatchHDR: Merge, Clone and Reset keep the percentiles
// hdrhistogram-go's Merge and Reset give.
func TestMergeResetCloneMatchHDR(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for digits := 1; digits <= 3; digits++ {
		for _, limit := range limits[1:] {
			what := describe(digits, limit, 0)
			a, b := newPair(limit, digits), newPair(limit, digits)
			for _, v := range values(rng, limit, 1000) {
				a.record(t, v)
			}
			for _, v := range values(rng, limit, 700) {
				b.record(t, v)
			}
			// before is a's values before the merge, in both: a clone, and a copy by Merge.
			before := pair{own: a.own.Clone(), ref: hdrhistogram.New(1, limit, digits), limit: limit}
			require.Equal(t, int64(0), before.ref.Merge(a.ref))

			a.own.Merge(b.own)
			require.Equal(t, int64(0), a.ref.Merge(b.ref), "hdrhistogram-go dropped values")
			a.check(t, what+" merged", qsFrom(rng, 200))
			b.check(t, what+" merge source", qsFrom(rng, 200))
			before.check(t, what+" clone", qsFrom(rng, 200))

			a.own.Reset()
			a.ref.Reset()
			a.check(t, what+" reset", nil)
			for _, v := range values(rng, limit, 300) {
				a.record(t, v)
			}
			a.check(t, what+" recorded after reset", qsFrom(rng, 200))
		}
	}
}

// qsFrom returns n random quantiles.
func qsFrom(rng *rand.Rand, n int) []float64 {
	qs := make([]float64, n)
	for i := range qs {
		qs[i] = 100 * rng.Float64()
	}
	return qs
}

// TestSummaryOfMatchesHDR: hdr.SummaryOf gives hdrhistogram-go's percentiles in the
// given unit, capped at the exact maximum, as offload computed them with hdrhistogram-go.
func TestSummaryOfMatchesHDR(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	limit := int64(time.Hour / time.Microsecond)
	for range 50 {
		p := newPair(limit, 2)
		var sum, mx time.Duration
		for range 1 + rng.IntN(3000) {
			d := time.Duration(math.Pow(float64(time.Hour), rng.Float64()))
			sum += d
			mx = max(mx, d)
			p.record(t, int64(d/time.Microsecond))
		}
		q := func(pc float64) time.Duration {
			return min(time.Duration(p.ref.ValueAtQuantile(pc))*time.Microsecond, mx)
		}
		want := accounting.Summary{Count: uint64(p.ref.TotalCount()), Sum: sum, Max: mx,
			P50: q(50), P90: q(90), P99: q(99), P999: q(99.9)}
		got := hdr.SummaryOf(p.own, time.Microsecond, sum, mx)
		got.Buckets = accounting.Buckets{} // exporters' buckets: hdrdiff compares the percentiles
		require.Equal(t, want, got)
	}
}

func describe(digits int, limit int64, round int) string {
	return fmt.Sprintf("digits %d limit %d round %d", digits, limit, round)
}
