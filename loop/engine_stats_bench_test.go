package loop

import (
	"fmt"
	"testing"
	"time"

	"github.com/batonrt/baton/internal/recorder"
)

// BenchmarkSnapshotOnLoop measures what a scrape costs the loop: the on-loop Take of the
// loop, routes and admission sections, for a server of 10 and of 100 routes that have all
// served requests (run without a server: the benchmark's goroutine plays the loop), and
// the share its reader then computes off the loop (the routes section's Read). Fresh
// routes have served 1,000 requests of up to 1 ms in the current window; aged ones also
// 1,000 older ones, folded into the cumulative histograms, with every figure reaching
// seconds (the longer the range of values, the more counters a copy takes).
func BenchmarkSnapshotOnLoop(b *testing.B) {
	for _, routes := range []int{10, 100} {
		for _, aged := range []bool{false, true} {
			b.Run(fmt.Sprintf("routes=%d/aged=%v", routes, aged), func(b *testing.B) {
				s := benchSnapshotServer(b, routes, aged)
				l := s.Loop(0)
				b.Run("loop", func(b *testing.B) { // the loop's hold: the copy
					for range b.N {
						_, _ = takeLoop(l, nil)
						rc, _ := takeRoutesSection(l, nil)
						routesCopies.Put(rc)
						_, _ = takeAdmission(l, nil)
					}
				})
				b.Run("reader", func(b *testing.B) { // the reader's share: percentiles and buckets
					b.StopTimer()
					for range b.N {
						rc, _ := takeRoutesSection(l, nil)
						b.StartTimer()
						_ = readRoutesSection(rc)
						b.StopTimer()
					}
				})
			})
		}
	}
}

// benchSnapshotServer returns a server (not started) of n routes that served requests,
// for BenchmarkSnapshotOnLoop.
func benchSnapshotServer(b *testing.B, n int, aged bool) *Server {
	s := New(Config{Logger: quietLogger(b)})
	for i := range n {
		s.Handle(fmt.Sprintf("GET /r%d/{id}", i), func(c *Ctx) {})
	}
	now := s.nanotime()
	for _, rt := range s.acct.routes.Snapshot(time.Now()) {
		r := s.acct.routes.Route(rt.Route)
		if aged { // three windows ago: retired into the cumulative histograms
			for k := range 1000 {
				d := time.Duration(k) * time.Duration(k) * 2 * time.Microsecond // up to 2 s
				r.Start()
				r.FinishValues(now-int64(3*recorder.DefaultRecentWindow), 200, d, d/40, d/200, d/2)
			}
		}
		for k := range 1000 {
			r.Start()
			r.FinishValues(now, 200, time.Duration(k)*time.Microsecond, time.Duration(k)*100, 0, 0)
		}
	}
	return s
}
