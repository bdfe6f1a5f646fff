package accounting

import "time"

// RouteSnapshot is one route's figures. Plain data.
type RouteSnapshot struct {
	Route        string // method + pattern
	Count        uint64 // requests finished
	Errors       uint64 // finished with status >= 500
	ClientErrors uint64 // finished with status 400..499
	InFlight     int64  // started and not finished

	// Recent counts the requests that finished in the recent view (between one and two windows of 10 s; Span says how much).
	Recent RecentCounts

	Latency    SummaryPair // total latency (accept to end), TaskSample.Age
	OnLoop     SummaryPair // time holding the loop per request
	QueueDelay SummaryPair // time ready but not running per request
	Parked     SummaryPair // time parked per request, all reasons
}

// RecentCounts are a route's counts over its recent view. Plain data.
type RecentCounts struct {
	Count        uint64        // requests finished in the recent view
	Errors       uint64        // of which with status >= 500
	ClientErrors uint64        // of which with status 400..499
	Span         time.Duration // time the recent view covers: from the previous window's start (or the loop's start, if later) to the snapshot
}

// PerSecond returns Count/Span in requests per second (0 when Span is 0). Any goroutine.
func (c RecentCounts) PerSecond() float64 {
	if c.Span <= 0 {
		return 0
	}
	return float64(c.Count) / c.Span.Seconds()
}

// SummaryPair is a figure's distribution since the start and over the recent view. Plain
// data.
type SummaryPair struct {
	Cumulative Summary
	Recent     Summary
}
