package recorder

import (
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/hdr"
)

// store is a cumulative histogram and the exact sum and maximum (the count is the
// histogram's). Loop-confined (or guarded by its owner).
type store struct {
	h   *hdr.Histogram
	sum int64
	max int64
}

func newStore(l *hdr.Layout) store { return store{h: hdr.New(l)} }

// add folds the recorder src into s (src is left as it is).
func (s *store) add(src *hdr.Recorder) {
	if !src.Used() {
		return
	}
	src.FoldInto(s.h)
	s.sum += src.Sum()
	s.max = max(s.max, src.Max())
}

// record adds one value directly (for rare events; the hot paths use a hdr.Recorder).
// Values above the store's limit are counted at the limit, negative ones as 0.
func (s *store) record(v int64) {
	v = max(v, 0)
	s.sum += v
	s.max = max(s.max, v)
	s.h.Record(v)
}

// summary reads the store.
func (s *store) summary() accounting.Summary { return summarize(s.h, s.sum, s.max) }

// summarize reads percentiles and buckets from h (its count is the Summary's) and takes
// the exact sum and maximum as given: hdr.SummaryOf in nanoseconds. It does not allocate.
func summarize(h *hdr.Histogram, sum, maxV int64) accounting.Summary {
	return hdr.SummaryOf(h, 1, time.Duration(sum), time.Duration(maxV))
}

// quantilesOf is summarize without the buckets, for the recent views, which exporters do
// not read: the buckets cost one more pass over the counters on the loop.
func quantilesOf(h *hdr.Histogram, sum, maxV time.Duration) accounting.Summary {
	q := h.Quantiles(1, maxV)
	return accounting.Summary{Count: h.TotalCount(), Sum: sum, P50: q[0], P90: q[1], P99: q[2], P999: q[3], Max: maxV}
}

// summaryOf reads the recorders hs together through the scratch histogram (reset first;
// same layout), without buckets (it reads the recent views).
func summaryOf(scratch *hdr.Histogram, hs ...*hdr.Recorder) accounting.Summary {
	scratch.Reset()
	var sum, maxV int64
	for _, h := range hs {
		h.FoldInto(scratch)
		sum += h.Sum()
		maxV = max(maxV, h.Max())
	}
	return quantilesOf(scratch, time.Duration(sum), time.Duration(maxV))
}
