package hdr

import (
	"time"

	"github.com/batonrt/baton/accounting"
)

// SummaryOf returns the accounting.Summary of the values h holds, with their exact sum and
// maximum given by the caller (who keeps them: h only has counters). The percentiles are
// h.ValueAtQuantile(50, 90, 99, 99.9) times unit, never above maxV; Count is
// h.TotalCount(); the buckets are counted at accounting.BucketBounds. It does not allocate.
func SummaryOf(h *Histogram, unit, sum, maxV time.Duration) accounting.Summary {
	q := h.Quantiles(unit, maxV)
	s := accounting.Summary{Count: h.total, Sum: sum, P50: q[0], P90: q[1], P99: q[2], P999: q[3], Max: maxV}
	h.Buckets(unit, accounting.BucketBounds[:], s.Buckets[:])
	return s
}
