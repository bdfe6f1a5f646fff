package hdr

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestHistogramValueAtQuantile checks ValueAtQuantile against values worked out by hand
// from hdrhistogram-go's definition: rank q/100*n rounded half up, clamped to 1..n; the top
// of that rank's counter, the bottom for q = 0.
func TestHistogramValueAtQuantile(t *testing.T) {
	h := New(NewLayout(int64(time.Hour), 2))
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
	g := New(NewLayout(int64(time.Hour), 2))
	g.Record(5001)
	assert.Equal(t, int64(4992), g.ValueAtQuantile(0))
	assert.Equal(t, int64(5023), g.ValueAtQuantile(0.0001))
	assert.Equal(t, int64(5023), g.ValueAtQuantile(100))
}

// TestHistogramClampsMergesAndResets: Record's clamps, Merge, Clone and Reset.
func TestHistogramClampsMergesAndResets(t *testing.T) {
	h := New(NewLayout(1000, 2))
	assert.Equal(t, int64(1000), h.Layout().Limit())
	assert.Equal(t, 2, h.Layout().Digits())
	h.Record(-5)
	h.Record(5000)
	assert.Equal(t, int64(0), h.ValueAtQuantile(50))
	assert.Equal(t, int64(1003), h.ValueAtQuantile(100), "5000 counts at the limit, whose counter ends at 1003")

	c := h.Clone()
	g := New(NewLayout(1000, 2))
	g.Record(300)
	h.Merge(g)
	assert.Equal(t, uint64(3), h.TotalCount())
	assert.Equal(t, int64(301), h.ValueAtQuantile(50))
	assert.Equal(t, uint64(2), c.TotalCount(), "the clone is a copy")
	assert.Equal(t, int64(0), c.ValueAtQuantile(50))

	h.Reset()
	assert.Equal(t, uint64(0), h.TotalCount())
	assert.Equal(t, int64(0), h.ValueAtQuantile(100))
	assert.False(t, slices.ContainsFunc(h.Counts(), func(c uint64) bool { return c != 0 }), "Reset left counts")

	assert.Panics(t, func() { h.Merge(New(NewLayout(2000, 2))) }, "different limit")
	assert.Panics(t, func() { h.Merge(New(NewLayout(1000, 3))) }, "different digits")
	assert.Panics(t, func() { New(NewLayout(1000, 0)) })
	assert.Panics(t, func() { New(NewLayout(1000, MaxDigits+1)) })
	assert.Panics(t, func() { New(NewLayout(1, 2)) })
}
