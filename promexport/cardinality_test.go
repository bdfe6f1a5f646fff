package promexport

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
)

// adminScrape serves g with promhttp on a net/http listener of its own, as the flagship's
// admin port does, until the test ends, and returns a function that scrapes it once.
func adminScrape(t *testing.T, g prometheus.Gatherer) func() string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	cl := &http.Client{Timeout: 10 * time.Second}
	return func() string {
		t.Helper()
		code, text := get(t, cl, srv.URL)
		require.Equal(t, 200, code, text)
		return text
	}
}

// seriesByRoute counts the series of text, in total and per value of the route label
// ("" for the series without one).
func seriesByRoute(t *testing.T, text string) (total int, byRoute map[string]int) {
	t.Helper()
	byRoute = map[string]int{}
	for fam, mf := range parse(t, text) {
		n := 0
		for _, m := range mf.Metric {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				n = len(m.GetHistogram().GetBucket()) + 2 // le="+Inf" is among the buckets; _sum, _count
			case dto.MetricType_SUMMARY:
				n = len(m.GetSummary().GetQuantile()) + 2
			default:
				n = 1
			}
			route := ""
			for _, lp := range m.Label {
				if lp.GetName() == "route" {
					route = lp.GetValue()
				}
			}
			byRoute[route] += n
			total += n
		}
		_ = fam
	}
	return total, byRoute
}

// waitFor scrapes until cond holds for the parsed families, or fails after 10 s.
func waitFor(t *testing.T, scrape func() string, what string, cond func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mfs := parse(t, scrape())
		if cond(mfs) {
			return mfs
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// value returns the value of the one counter or gauge of family name with labels want,
// or -1 when there is none.
func value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	mf := mfs[name]
	if mf == nil {
		return -1
	}
	for _, m := range mf.Metric {
		ok := true
		for k, v := range want {
			has := false
			for _, lp := range m.Label {
				has = has || (lp.GetName() == k && lp.GetValue() == v)
			}
			ok = ok && has
		}
		if !ok {
			continue
		}
		if m.Counter != nil {
			return m.Counter.GetValue()
		}
		return m.Gauge.GetValue()
	}
	return -1
}

// The flagship-shaped server's exposition: the admin routes (stats pages, dashboard, health
// probes) are gone unless asked for, each game route has the same series, and the
// WebSocket route has its session histogram instead of the four request histograms. The
// counts are logged (go test -v -run SeriesOfTheFlagship).
func TestSeriesOfTheFlagship(t *testing.T) {
	f := newFlagship(t)
	f.play(t, 3)
	def := adminScrape(t, Registry(f.srv))
	withAdmin := adminScrape(t, Registry(f.srv, IncludeAdminRoutes()))
	bare := adminScrape(t, Registry(f.srv, WithoutRuntimeCollectors()))
	ws := map[string]string{"route": "GET /ws"}
	// The session ends on the server a moment after the client saw the close.
	waitFor(t, def, "the WebSocket session counted", func(mfs map[string]*dto.MetricFamily) bool {
		mf := mfs["baton_websocket_session_seconds"]
		return mf != nil && len(mf.Metric) == 1 && mf.Metric[0].GetHistogram().GetSampleCount() == 1
	})

	total, byRoute := seriesByRoute(t, def())
	totalAdmin, byRouteAdmin := seriesByRoute(t, withAdmin())
	totalBare, _ := seriesByRoute(t, bare())

	perRoute := 3 + 1 + 4*(accounting.NumBuckets+3) // codes, in flight, four histograms
	perWS := 3 + (len(sessionBounds) + 3) + 10      // codes, session histogram, WebSocket figures
	admin := 0
	for route, n := range byRouteAdmin {
		if AdminRoute(route) {
			admin++
			assert.Equal(t, perRoute, n, "%s with IncludeAdminRoutes", route)
			assert.Zero(t, byRoute[route], "%s by default", route)
		}
	}
	for route := range byRoute {
		assert.False(t, AdminRoute(route), "admin route %s exported by default", route)
	}
	assert.Equal(t, 5, admin, "the stats pages (one route, /debug/baton/{section}), dashboard, events, health probes: %v", byRouteAdmin)
	for _, route := range flagshipRoutes {
		want := perRoute
		if route == "GET /ws" {
			want = perWS
		}
		assert.Equal(t, want, byRoute[route], route)
	}
	assert.Len(t, byRoute, len(flagshipRoutes)+1, "the game routes and the series without a route: %v", byRoute)
	assert.Equal(t, admin*perRoute, totalAdmin-total, "what IncludeAdminRoutes adds")
	runtimeSeries := total - totalBare
	assert.Positive(t, runtimeSeries)
	t.Logf("flagship-shaped server: %d series (%d of them go_* and process_*, %d per game route, %d for /ws, %d without a route); "+
		"with IncludeAdminRoutes %d (%d admin routes x %d)",
		total, runtimeSeries, perRoute, byRoute["GET /ws"], byRoute[""], totalAdmin, admin, perRoute)

	mfs := parse(t, def())
	for _, fam := range []string{"baton_http_request_duration_seconds", "baton_http_request_on_loop_seconds",
		"baton_http_request_queue_delay_seconds", "baton_http_request_parked_seconds", "baton_http_requests_in_flight"} {
		for _, m := range mfs[fam].GetMetric() {
			for _, lp := range m.Label {
				assert.False(t, lp.GetName() == "route" && lp.GetValue() == "GET /ws", "%s has the WebSocket route", fam)
			}
		}
	}
	h := metric(t, mfs, "baton_websocket_session_seconds", ws).GetHistogram()
	assert.EqualValues(t, 1, h.GetSampleCount())
	require.Len(t, h.Bucket, len(sessionBounds)+1)
	assert.InDelta(t, 0.01, h.Bucket[0].GetUpperBound(), 1e-12)
	assert.InDelta(t, 10, h.Bucket[len(sessionBounds)-1].GetUpperBound(), 1e-12)
	assert.EqualValues(t, 1, metric(t, mfs, "baton_http_requests_total", map[string]string{"route": "GET /ws", "code": "1xx_3xx"}).GetCounter().GetValue(),
		"the session's 101")
}

// SkipRoutes leaves out routes of the program's own choosing, besides the admin routes.
func TestSkipRoutes(t *testing.T) {
	f := newFlagship(t)
	scrape := adminScrape(t, Registry(f.srv, SkipRoutes(func(route string) bool {
		return strings.HasPrefix(route, "GET /rooms")
	})))
	_, byRoute := seriesByRoute(t, scrape())
	assert.Zero(t, byRoute["GET /rooms"])
	assert.Zero(t, byRoute["GET /rooms/{id}/state"])
	assert.Zero(t, byRoute["GET /debug/baton/rooms"])
	assert.Positive(t, byRoute["POST /rooms/{id}/input"])
	assert.Positive(t, byRoute["GET /leaderboard"])
}

func TestAdminRoute(t *testing.T) {
	for route, want := range map[string]bool{
		"GET /debug/baton/":         true,
		"GET /debug/baton/events":   true,
		"GET /debug/baton/rooms":    true,
		"GET /debug/pprof/{name}":   true,
		"GET /healthz":              true,
		"GET /readyz":               true,
		"GET /livez":                true,
		"GET /metrics":              true,
		"GET admin.local/metrics":   true,
		"GET /":                     false,
		"GET /debugger":             false,
		"GET /metrics/{id}":         false,
		"POST /tickets":             false,
		"GET /players/{id}/healthz": false,
	} {
		assert.Equal(t, want, AdminRoute(route), route)
	}
}

// Registry holds the Go runtime's and the process's collectors unless told otherwise,
// and baton_build_info and baton_start_time_seconds follow the conventions: 1 with the
// versions as labels, the start as Unix time, the same at every scrape.
func TestRuntimeAndBuildInfo(t *testing.T) {
	before := time.Now()
	f := newFlagship(t)
	after := time.Now()
	scrape := adminScrape(t, Registry(f.srv))
	bare := adminScrape(t, Registry(f.srv, WithoutRuntimeCollectors()))
	mfs := parse(t, scrape())
	assert.Positive(t, metric(t, mfs, "go_goroutines", nil).GetGauge().GetValue())
	if runtime.GOOS == "linux" {
		assert.Positive(t, metric(t, mfs, "process_open_fds", nil).GetGauge().GetValue())
		assert.Positive(t, metric(t, mfs, "process_resident_memory_bytes", nil).GetGauge().GetValue())
	}
	for fam := range parse(t, bare()) {
		assert.True(t, strings.HasPrefix(fam, "baton_"), "WithoutRuntimeCollectors: %s", fam)
	}

	bi := metric(t, mfs, "baton_build_info", map[string]string{"goversion": runtime.Version(), "version": "(devel)"})
	assert.Equal(t, 1.0, bi.GetGauge().GetValue())
	start := metric(t, mfs, "baton_start_time_seconds", nil).GetGauge().GetValue()
	assert.GreaterOrEqual(t, start, float64(before.UnixMilli())/1e3-0.001)
	assert.LessOrEqual(t, start, float64(after.UnixMilli())/1e3+0.001)
	f.play(t, 1)
	assert.Equal(t, start, metric(t, parse(t, scrape()), "baton_start_time_seconds", nil).GetGauge().GetValue())
	assert.Nil(t, mfs["baton_loop_uptime_seconds"])
}
