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
			for range 2000 {
				values = append(values, rng.Int64N(limit+1), int64(float64(limit)*math.Pow(rng.Float64(), 8)))
			}
			for _, v := range values {
				h.record(v)
				if err := direct.RecordValue(v); err != nil {
					t.Fatalf("hdr: %v", err)
				}
			}
			folded := l.newHDR()
			h.foldInto(folded)
			if !slices.Equal(folded.Export().Counts, direct.Export().Counts) {
				t.Fatalf("digits %d limit %d: folded counters differ from direct recording", digits, limit)
			}
			if folded.TotalCount() != int64(len(values)) || h.n != uint64(len(values)) {
				t.Fatalf("digits %d limit %d: count %d/%d, want %d", digits, limit, folded.TotalCount(), h.n, len(values))
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
	h.record(-5)
	h.record(5000)
	h.record(10)
	if h.n != 3 || h.sum != 5010 || h.max != 5000 {
		t.Fatalf("n %d sum %d max %d", h.n, h.sum, h.max)
	}
	s := summaryOf(l.newHDR(), &h)
	if s.Count != 3 || s.Max != 5000 || s.P50 < 10 || s.P50 > 11 || s.P999 < 990 {
		t.Fatalf("summary %+v", s)
	}
	h.reset()
	if h.n != 0 || slices.ContainsFunc(h.counts, func(c uint32) bool { return c != 0 }) {
		t.Fatal("reset left counts")
	}
}
