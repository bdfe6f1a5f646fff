package accounting

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHistMatchesHDR checks that the recording front lays its counters out exactly as
// hdrhistogram-go does, so folding a recorder into an hdrhistogram.Histogram gives the same
// histogram as recording every value there directly.
func TestHistMatchesHDR(t *testing.T) {
	limits := []int64{1000, int64(time.Second), int64(time.Hour), math.MaxInt64 / 4}
	rng := rand.New(rand.NewPCG(1, 2))
	for digits := 1; digits <= 5; digits++ {
		for _, limit := range limits {
			if digits == 5 && limit > int64(time.Second) {
				continue // millions of counters: slow under -race, and no new case
			}
			l := newLayout(limit, digits)
			direct := l.newHDR()
			if got, want := l.n, len(direct.Export().Counts); got != want {
				t.Fatalf("digits %d limit %d: %d counters, hdrhistogram-go has %d", digits, limit, got, want)
			}
			h := newHist(l)
			values := []int64{0, 1, 2, limit, limit - 1}
			for p := int64(1); p > 0 && p <= limit; p <<= 1 {
				values = append(values, p-1, p, min(p+1, limit))
			}
			for range 500 {
				values = append(values, rng.Int64N(limit+1), int64(float64(limit)*math.Pow(rng.Float64(), 8)))
			}
			h.recordAll(values)
			for _, v := range values {
				if err := direct.RecordValue(v); err != nil {
					t.Fatalf("hdr: %v", err)
				}
			}
			folded := l.newHDR()
			n := h.foldInto(folded)
			if !slices.Equal(folded.Export().Counts, direct.Export().Counts) {
				t.Fatalf("digits %d limit %d: folded counters differ from direct recording", digits, limit)
			}
			if folded.TotalCount() != int64(len(values)) || n != uint64(len(values)) {
				t.Fatalf("digits %d limit %d: count %d/%d, want %d", digits, limit, folded.TotalCount(), n, len(values))
			}
			for i := range l.n {
				if v := l.value(i); l.index(min(v, limit)) != i && v <= limit {
					t.Fatalf("digits %d limit %d: value(%d) = %d maps back to %d", digits, limit, i, v, l.index(v))
				}
			}
		}
	}
}

// TestHistClampsAndKeepsExactFigures: values beyond the limit count at the limit, negative
// ones as 0, while sum and max stay exact.
func TestHistClampsAndKeepsExactFigures(t *testing.T) {
	l := newLayout(1000, 2)
	h := newHist(l)
	h.recordAll([]int64{-5, 5000, 10})
	if h.sum != 5010 || h.max != 5000 {
		t.Fatalf("sum %d max %d", h.sum, h.max)
	}
	s := summaryOf(l.newHDR(), &h)
	if s.Count != 3 || s.Max != 5000 || s.P50 < 10 || s.P50 > 11 || s.P999 < 990 {
		t.Fatalf("summary %+v", s)
	}
	h.reset()
	if h.used || h.sum != 0 || slices.ContainsFunc(h.counts, func(c uint32) bool { return c != 0 }) {
		t.Fatal("reset left counts")
	}
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
