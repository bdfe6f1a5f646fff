package loadgen

import (
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: latencies are recorded in microseconds, from 1 µs to one minute, with
// three significant digits (a value is known to within 0.1%).
const (
	HistLowestUs  = 1
	HistHighestUs = 60_000_000
	HistSigFigs   = 3
)

// NewHistogram returns an empty latency histogram with the harness's bounds (microseconds).
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(HistLowestUs, HistHighestUs, HistSigFigs)
}

// Merge returns a new histogram holding the sum of hs (nil entries are skipped).
func Merge(hs ...*hdrhistogram.Histogram) *hdrhistogram.Histogram {
	out := NewHistogram()
	for _, h := range hs {
		if h != nil {
			out.Merge(h)
		}
	}
	return out
}

// record adds one latency in nanoseconds to h as microseconds, clamped to its bounds.
func record(h *hdrhistogram.Histogram, ns int64) {
	us := ns / int64(time.Microsecond)
	if us < HistLowestUs {
		us = HistLowestUs
	}
	if us > HistHighestUs {
		us = HistHighestUs
	}
	_ = h.RecordValue(us) // cannot fail within the bounds
}
