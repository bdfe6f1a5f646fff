package loop

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRetryAfterFreshServerBoundedByOldestRunning (issue 27, item 16): a fresh server has
// measured no service time, and its 429 advised Retry-After: 1 while the requests holding
// its slots had been running for longer than that. The advice is now bounded below by the
// age of the oldest running request: a client back sooner finds the same requests ahead.
func TestRetryAfterFreshServerBoundedByOldestRunning(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			var started atomic.Int32
			var release *Future[struct{}]
			s, addr := startServer(t, Config{MultiThread: mt, RequestConcurrency: 1, MaxQueueLength: 1}, func(s *Server) {
				release = NewFuture[struct{}](s.loopRef)
				s.Handle("GET /slow", func(c *Ctx) {
					started.Add(1)
					_, _ = release.Await(c, 0)
					c.String(200, "done")
				})
			})
			t.Cleanup(func() { release.Resolve(struct{}{}, nil) })
			running, queued := dial(t, addr), dial(t, addr)
			running.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
			require.Eventually(t, func() bool { return started.Load() == 1 }, 10*time.Second, time.Millisecond)
			queued.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
			require.Eventually(t, func() bool {
				q := make(chan int, 1)
				require.NoError(t, s.Loop(0).Post(func() { q <- s.adm.stats().Queued }))
				return <-q == 1
			}, 10*time.Second, time.Millisecond)
			const held = 1200 * time.Millisecond
			time.Sleep(held) // the running request ages: the figure under test, not an ordering

			resp, _ := dial(t, addr).get("/slow")
			mustStatus(t, resp, 429)
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err)
			t.Logf("Retry-After %d s with the oldest running request %v old and no service time measured", ra, held)
			assert.GreaterOrEqual(t, ra, 2, "Retry-After below the age of the oldest running request")
			assert.LessOrEqual(t, ra, 30)

			release.Resolve(struct{}{}, nil)
			r1, _ := running.read("GET")
			mustStatus(t, r1, 200)
			r2, _ := queued.read("GET")
			mustStatus(t, r2, 200)
		})
	}
}
