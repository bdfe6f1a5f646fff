package stats

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/batonrt/baton/loop"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Concurrent snapshots each read their own pooled copy of the routes, off the loop, while
// requests finish: every snapshot is consistent (each route's histograms count what its
// counter counts) and the counts never go back. Run with -race.
func TestSnapshotRoutesConcurrentReaders(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv, addr := startServer(t, m.cfg(loop.Config{}), func(s *loop.Server) {
				for i := range 3 {
					s.Handle(fmt.Sprintf("GET /r%d", i), func(c *loop.Ctx) { c.String(200, "ok") })
				}
			})
			const requests = 60
			cl := dial(t, addr)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var last uint64
					for {
						snap, err := Take(context.Background(), srv, ViewRoutes|ViewLoop)
						if !assert.NoError(t, err) {
							return
						}
						var total uint64
						for _, r := range snap.Routes {
							total += r.Count
							assert.Equal(t, r.Count, r.Latency.Cumulative.Count, r.Route)
							// every slice is far below the last bound (10 s)
							assert.Equal(t, r.Count, r.OnLoop.Cumulative.Buckets[len(r.OnLoop.Cumulative.Buckets)-1], r.Route)
						}
						assert.GreaterOrEqual(t, total, last, "counts went back")
						last = total
						select {
						case <-stop:
							return
						default:
						}
					}
				}()
			}
			for i := range requests {
				resp, _ := cl.Get(fmt.Sprintf("/r%d", i%3))
				mustStatus(t, resp, 200)
			}
			close(stop)
			wg.Wait()
			snap, err := Take(context.Background(), srv, ViewRoutes)
			require.NoError(t, err)
			require.Len(t, snap.Routes, 3)
			for i, r := range snap.Routes {
				assert.Equal(t, fmt.Sprintf("GET /r%d", i), r.Route, "sorted by key")
				assert.EqualValues(t, requests/3, r.Count)
				assert.EqualValues(t, requests/3, r.Latency.Cumulative.Count)
			}
		})
	}
}
