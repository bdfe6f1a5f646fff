package hdr_test

import (
	"fmt"
	"time"

	"github.com/batonrt/baton/internal/hdr"
)

// ExampleSummaryOf keeps a distribution of its own, as offload does for its queue waits:
// the histogram holds the counters, the caller the exact sum and maximum. The median is
// the top of the counter holding 300 us (300-301 us with two significant digits).
func ExampleSummaryOf() {
	h := hdr.New(hdr.NewLayout(int64(time.Minute/time.Microsecond), 2)) // microseconds up to a minute
	var sum, maxV time.Duration
	for _, d := range []time.Duration{120 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond, 45 * time.Millisecond} {
		h.Record(int64(d / time.Microsecond))
		sum += d
		maxV = max(maxV, d)
	}
	s := hdr.SummaryOf(h, time.Microsecond, sum, maxV)
	fmt.Println(s.Count, s.Mean(), s.P50, s.Max)
	fmt.Println("at most 1 ms:", s.Buckets[9])
	// Output:
	// 4 11.855ms 301µs 45ms
	// at most 1 ms: 2
}
