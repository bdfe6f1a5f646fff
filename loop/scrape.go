package loop

import (
	"sync"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/recorder"
)

// A snapshot of the routes is taken in two steps so that a scrape holds the loop only for
// a copy: on the loop, the routes' counts and histogram counters are copied into a pooled
// recorder.RoutesCopy (its buffers reused between snapshots); off the loop, the reader
// (Snapshot's caller, the routes page's renderer) computes the percentiles and buckets
// from it and puts it back. docs/observability.md gives the cost of each step.

// routesCopies holds *recorder.RoutesCopy values between snapshots. A copy whose reader
// gave up (Snapshot's ctx ended while the loop had it) is left to the garbage collector.
var routesCopies = sync.Pool{New: func() any { return new(recorder.RoutesCopy) }}

// takeRoutes copies the routes at now into a pooled RoutesCopy, for readRoutes. Loop only.
func (s *Server) takeRoutes(now time.Time) *recorder.RoutesCopy {
	c := routesCopies.Get().(*recorder.RoutesCopy)
	s.acct.routes.CopyInto(c, now)
	return c
}

// readRoutes computes the routes' figures from c and returns c to the pool: nil for a nil
// c (no routes were taken). The reader's goroutine, off the loop.
func readRoutes(c *recorder.RoutesCopy) []accounting.RouteSnapshot {
	if c == nil {
		return nil
	}
	rs := c.Snapshot()
	routesCopies.Put(c)
	return rs
}
