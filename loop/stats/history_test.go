package stats

import (
	"bufio"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
)

// The hub keeps the history while no page is open: requests made before anyone subscribed
// are in the points a new subscriber gets first (the "history" event), every one counted
// once, with their errors and an interval p99 no lower than the handler's sleep.
func TestDashboardHistoryWithoutSubscribers(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv, addr := startServer(t, m.cfg(loop.Config{}), func(s *loop.Server) {
				Mount(s, "/debug/baton")
				s.Handle("GET /x", func(c *loop.Ctx) { _ = c.Sleep(2 * time.Millisecond); c.String(200, "x") })
				s.Handle("GET /fail", func(c *loop.Ctx) { c.String(500, "no") })
			})
			h := hubOf(srv)
			points := func() []dashPoint {
				h.mu.Lock()
				defer h.mu.Unlock()
				return append([]dashPoint(nil), h.history...)
			}
			require.Eventually(t, func() bool { return len(points()) >= 1 }, 10*time.Second, 10*time.Millisecond,
				"the hub samples with no page open")
			cl := dial(t, addr)
			for range 40 {
				resp, _ := cl.Get("/x")
				mustStatus(t, resp, 200)
			}
			for range 4 {
				resp, _ := cl.Get("/fail")
				mustStatus(t, resp, 500)
			}
			counted := func(ps []dashPoint) (x, fails uint64, p99 float64) {
				for _, p := range ps {
					x += p.Routes["GET /x"].Requests
					fails += p.Routes["GET /fail"].Requests
					p99 = max(p99, p.Routes["GET /x"].P99)
				}
				return
			}
			require.Eventually(t, func() bool {
				x, fails, _ := counted(points())
				return x == 40 && fails == 4
			}, 10*time.Second, 10*time.Millisecond, "every request in one point of the history")

			resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://" + addr + "/debug/baton/events")
			require.NoError(t, err)
			defer resp.Body.Close()
			_, data := nextEvent(t, bufio.NewReader(resp.Body), "history")
			var hist []dashPoint
			require.NoError(t, json.Unmarshal(data, &hist))
			x, fails, p99 := counted(hist)
			assert.EqualValues(t, 40, x, "requests made before the page opened")
			assert.EqualValues(t, 4, fails)
			assert.GreaterOrEqual(t, p99, 0.002, "the interval's p99 bound covers the 2 ms sleep")
			for _, p := range hist {
				if f, ok := p.Routes["GET /fail"]; ok {
					assert.InDelta(t, f.Rate, f.Errors, 1e-9, "every /fail answer is a 5xx")
				}
				if f, ok := p.Routes["GET /x"]; ok {
					assert.Zero(t, f.Errors)
				}
			}
			for i := 1; i < len(hist); i++ {
				assert.Greater(t, hist[i].Time, hist[i-1].Time, "points in time order")
			}
		})
	}
}
