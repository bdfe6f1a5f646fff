package promexport

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/ws"
	"github.com/batonrt/baton/offload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// newServer starts a baton server with a few routes whose figures are known, /metrics
// mounted on it, and returns it with its base URL.
func newServer(t *testing.T, cfg loop.Config) (*loop.Server, string) {
	srv := loop.New(looptest.Config(t, cfg))
	srv.Handle("GET /items/{id}", func(c *loop.Ctx) { c.String(200, "item "+c.PathValue("id")) })
	srv.Handle("GET /missing", func(c *loop.Ctx) { c.String(404, "no") })
	srv.Handle("GET /boom", func(c *loop.Ctx) { c.String(500, "boom") })
	srv.Handle("GET /slow", func(c *loop.Ctx) {
		_ = c.Sleep(20 * time.Millisecond)
		c.Bytes(204, "", nil)
	})
	srv.Handle("GET /off", func(c *loop.Ctx) {
		_, _ = offload.Do(c, func(context.Context) (int, error) { return 1, nil })
		c.Bytes(204, "", nil)
	})
	srv.NewGate("uploads", 2, 4)
	srv.Handle("GET /metrics", Handler(Registry(srv)), loop.Exempt())
	return srv, looptest.Start(t, srv)
}

func get(t *testing.T, cl *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := cl.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err, text)
	return mfs
}

// metric returns the metric of family name whose labels include want, failing if there
// is not exactly one.
func metric(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mf := mfs[name]
	require.NotNil(t, mf, "no family %s", name)
	var found *dto.Metric
	for _, m := range mf.Metric {
		ok := true
		for k, v := range want {
			has := false
			for _, lp := range m.Label {
				has = has || (lp.GetName() == k && lp.GetValue() == v)
			}
			ok = ok && has
		}
		if ok {
			require.Nil(t, found, "%s%v matches twice", name, want)
			found = m
		}
	}
	require.NotNil(t, found, "%s%v not found", name, want)
	return found
}

// /metrics, served by promhttp on an admin listener and by Handler on the server itself,
// is valid text exposition format with the types, names and values of known traffic, and
// labels routes by pattern only.
func TestMetricsAfterKnownTraffic(t *testing.T) {
	srv, base := newServer(t, loop.Config{})
	cl := &http.Client{Timeout: 10 * time.Second}
	for i := range 10 {
		code, _ := get(t, cl, fmt.Sprintf("%s/items/%d", base, i))
		require.Equal(t, 200, code)
	}
	for range 3 {
		code, _ := get(t, cl, base+"/missing")
		require.Equal(t, 404, code)
	}
	for range 2 {
		code, _ := get(t, cl, base+"/boom")
		require.Equal(t, 500, code)
		code, _ = get(t, cl, base+"/slow")
		require.Equal(t, 204, code)
	}
	code, _ := get(t, cl, base+"/off")
	require.Equal(t, 204, code)

	admin := httptest.NewServer(promhttp.HandlerFor(Registry(srv), promhttp.HandlerOpts{}))
	defer admin.Close()
	code, adminText := get(t, cl, admin.URL)
	require.Equal(t, 200, code)
	code, ownText := get(t, cl, base+"/metrics")
	require.Equal(t, 200, code)

	for name, text := range map[string]string{"admin listener": adminText, "baton handler": ownText} {
		t.Run(name, func(t *testing.T) {
			mfs := parse(t, text)
			for fam, mf := range mfs {
				assert.True(t, strings.HasPrefix(fam, "baton_") || strings.HasPrefix(fam, "go_") || strings.HasPrefix(fam, "process_"), fam)
				switch mf.GetType() {
				case dto.MetricType_COUNTER:
					assert.True(t, strings.HasSuffix(fam, "_total"), "counter %s", fam)
				case dto.MetricType_HISTOGRAM:
					assert.True(t, strings.HasSuffix(fam, "_seconds"), "histogram %s", fam)
				}
				if strings.HasPrefix(fam, "baton_") {
					assert.NotContains(t, fam, "_max", "a maximum since start: %s", fam)
					assert.NotContains(t, fam, "_p99", "a precomputed percentile: %s", fam)
				}
				for _, m := range mf.Metric {
					for _, lp := range m.Label {
						if lp.GetName() == "route" {
							assert.NotContains(t, lp.GetValue(), "/items/1", "a raw path as a label")
						}
					}
				}
			}
			req := "baton_http_requests_total"
			require.Equal(t, dto.MetricType_COUNTER, mfs[req].GetType())
			items := map[string]string{"route": "GET /items/{id}"}
			assert.EqualValues(t, 10, metric(t, mfs, req, map[string]string{"route": "GET /items/{id}", "code": "1xx_3xx"}).GetCounter().GetValue())
			assert.EqualValues(t, 0, metric(t, mfs, req, map[string]string{"route": "GET /items/{id}", "code": "5xx"}).GetCounter().GetValue())
			assert.EqualValues(t, 3, metric(t, mfs, req, map[string]string{"route": "GET /missing", "code": "4xx"}).GetCounter().GetValue())
			assert.EqualValues(t, 2, metric(t, mfs, req, map[string]string{"route": "GET /boom", "code": "5xx"}).GetCounter().GetValue())

			for _, fam := range []string{"baton_http_request_duration_seconds", "baton_http_request_on_loop_seconds",
				"baton_http_request_queue_delay_seconds", "baton_http_request_parked_seconds"} {
				require.Equal(t, dto.MetricType_HISTOGRAM, mfs[fam].GetType(), fam)
				h := metric(t, mfs, fam, items).GetHistogram()
				assert.EqualValues(t, 10, h.GetSampleCount(), fam)
				require.Len(t, h.Bucket, accounting.NumBuckets+1, fam) // the parser adds +Inf
				assert.True(t, math.IsInf(h.Bucket[accounting.NumBuckets].GetUpperBound(), 1))
				prev := uint64(0)
				for k, b := range h.Bucket[:accounting.NumBuckets] {
					assert.InDelta(t, accounting.BucketBounds[k].Seconds(), b.GetUpperBound(), 1e-12)
					assert.GreaterOrEqual(t, b.GetCumulativeCount(), prev, "%s buckets are cumulative", fam)
					prev = b.GetCumulativeCount()
				}
				assert.LessOrEqual(t, prev, h.GetSampleCount())
			}
			// The two 20 ms sleeps: parked and latency about 20 ms each (the timers' clock is
			// coarser than the accounting's), none under 10 ms.
			slow := map[string]string{"route": "GET /slow"}
			for _, fam := range []string{"baton_http_request_duration_seconds", "baton_http_request_parked_seconds"} {
				h := metric(t, mfs, fam, slow).GetHistogram()
				assert.EqualValues(t, 2, h.GetSampleCount(), fam)
				assert.GreaterOrEqual(t, h.GetSampleSum(), 0.038, fam)
				for _, b := range h.Bucket {
					if b.GetUpperBound() <= 0.01 {
						assert.Zero(t, b.GetCumulativeCount(), "%s le=%v", fam, b.GetUpperBound())
					}
				}
			}
			onLoop := metric(t, mfs, "baton_http_request_on_loop_seconds", slow).GetHistogram()
			assert.Less(t, onLoop.GetSampleSum(), 0.04, "sleeping is not time on the loop")

			require.Equal(t, dto.MetricType_GAUGE, mfs["baton_loop_utilisation_ratio"].GetType())
			assert.Len(t, mfs["baton_loop_utilisation_ratio"].Metric, 3)
			for _, w := range []string{"1s", "10s", "60s"} {
				metric(t, mfs, "baton_loop_utilisation_ratio", map[string]string{"window": w})
			}
			for _, m := range mfs["baton_loop_utilisation_ratio"].Metric {
				assert.True(t, m.GetGauge().GetValue() >= 0 && m.GetGauge().GetValue() <= 1)
			}
			lag := metric(t, mfs, "baton_loop_lag_seconds", nil).GetHistogram()
			assert.Positive(t, lag.GetSampleCount())
			assert.Positive(t, metric(t, mfs, "baton_loop_busy_seconds_total", nil).GetCounter().GetValue())
			assert.GreaterOrEqual(t, metric(t, mfs, "baton_loop_tasks_completed_total", nil).GetCounter().GetValue(), 18.0)

			assert.Zero(t, metric(t, mfs, "baton_admission_refused_total", nil).GetCounter().GetValue())
			assert.GreaterOrEqual(t, metric(t, mfs, "baton_http_requests_parsed_total", nil).GetCounter().GetValue(), 18.0)

			var started float64
			for _, lane := range []string{"fast", "slow"} {
				started += metric(t, mfs, "baton_offload_started_total", map[string]string{"lane": lane}).GetCounter().GetValue()
				assert.Equal(t, dto.MetricType_GAUGE, mfs["baton_offload_tokens_in_use"].GetType())
			}
			// The baton handler's own scrape runs in the offload pool too.
			assert.GreaterOrEqual(t, started, 1.0)
			assert.EqualValues(t, 2, metric(t, mfs, "baton_gate_size", map[string]string{"gate": "uploads"}).GetGauge().GetValue())
		})
	}
}

// Refusals with 429 show in baton_admission_refused_total.
func TestMetricsCountRefusals(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	srv := loop.New(looptest.Config(t, loop.Config{RequestConcurrency: 1}))
	srv.Handle("GET /hold", func(c *loop.Ctx) {
		held <- struct{}{}
		for {
			select {
			case <-release:
				c.Bytes(204, "", nil)
				return
			default:
			}
			if c.Sleep(time.Millisecond) != nil {
				return
			}
		}
	})
	srv.Handle("GET /metrics", Handler(Registry(srv)), loop.Exempt())
	base := looptest.Start(t, srv)
	cl := &http.Client{Timeout: 10 * time.Second}
	done := make(chan int, 1)
	go func() {
		resp, err := cl.Get(base + "/hold")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-held
	for range 3 {
		code, _ := get(t, cl, base+"/hold")
		require.Equal(t, 429, code)
	}
	_, text := get(t, cl, base+"/metrics")
	mfs := parse(t, text)
	assert.EqualValues(t, 3, metric(t, mfs, "baton_admission_refused_total", nil).GetCounter().GetValue())
	assert.EqualValues(t, 1, metric(t, mfs, "baton_admission_active", nil).GetGauge().GetValue())
	assert.EqualValues(t, 1, metric(t, mfs, "baton_admission_limit", nil).GetGauge().GetValue())
	close(release)
	require.Equal(t, 204, <-done)
}

// percentile returns the q-th percentile (0..1) of ds, which it sorts.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(int(q*float64(len(ds))), len(ds)-1)]
}

// Scraping /metrics every 100 ms under load does not stall the loop. Phases of load alone
// and of load with a scrape every 100 ms alternate; in each, a probe task on the loop
// sleeps 1 ms over and over and records how late it wakes (the loop lag as a task sees it:
// whatever holds the loop, a snapshot copy included, delays it), and the load's clients
// record their latencies. The figures are logged (go test -v -run ScrapeLoopLag).
func TestScrapeLoopLag(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	srv, base := newServer(t, loop.Config{})
	var mu sync.Mutex
	var lags, latencies []time.Duration // of the current phase
	probe := srv.Loop(0).Go("lag-probe", func(task *loop.Task) {
		for {
			start := time.Now()
			if task.Sleep(time.Millisecond) != nil {
				return
			}
			late := time.Since(start) - time.Millisecond
			mu.Lock()
			lags = append(lags, late)
			mu.Unlock()
		}
	})
	defer probe.Stop()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Timeout: 10 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				resp, err := cl.Get(fmt.Sprintf("%s/items/%d", base, w*1_000_000+i))
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d := time.Since(start)
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	admin := httptest.NewServer(promhttp.HandlerFor(Registry(srv), promhttp.HandlerOpts{}))
	defer admin.Close()

	type figures struct {
		requests, wakes                int
		lagP50, lagP99, lagMax, latP99 time.Duration
	}
	phase := func(scrape bool) (figures, int) {
		mu.Lock()
		lags, latencies = nil, nil
		mu.Unlock()
		scrapes := 0
		end := time.Now().Add(time.Second)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(end) {
			<-tick.C
			if scrape {
				code, body := get(t, http.DefaultClient, admin.URL)
				require.Equal(t, 200, code)
				require.Contains(t, body, "baton_loop_lag_seconds_bucket")
				scrapes++
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return figures{requests: len(latencies), wakes: len(lags), lagP50: percentile(lags, 0.5),
			lagP99: percentile(lags, 0.99), lagMax: percentile(lags, 1), latP99: percentile(latencies, 0.99)}, scrapes
	}
	var worst time.Duration
	for round := range 3 {
		quiet, _ := phase(false)
		loud, scrapes := phase(true)
		t.Logf("round %d: load only: %d requests (p99 %v), probe lag p50 %v p99 %v max %v over %d wakes; "+
			"with %d scrapes: %d requests (p99 %v), probe lag p50 %v p99 %v max %v over %d wakes",
			round, quiet.requests, quiet.latP99, quiet.lagP50, quiet.lagP99, quiet.lagMax, quiet.wakes,
			scrapes, loud.requests, loud.latP99, loud.lagP50, loud.lagP99, loud.lagMax, loud.wakes)
		require.Positive(t, loud.wakes)
		worst = max(worst, loud.lagP50)
	}
	// A scrape holds the loop for one copy of its figures (microseconds per route); were it
	// to hold it for a good part of the interval, the probe's typical wake would show it.
	assert.Less(t, worst, 50*time.Millisecond, "median probe lag while scraping")
}

// Rooms and WebSockets have metrics: the rooms alive as gauges (no per-room label: rooms
// come and go), WebSocket counters per upgrade route.
func TestRoomAndWebSocketMetrics(t *testing.T) {
	srv := loop.New(looptest.Config(t, loop.Config{}))
	srv.Handle("GET /ws", func(c *loop.Ctx) {
		conn, err := ws.Upgrade(c, ws.Config{})
		if err != nil {
			return
		}
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			_ = conn.WriteText(data)
		}
	})
	srv.Handle("GET /metrics", Handler(Registry(srv)), loop.Exempt())
	base := looptest.Start(t, srv)
	made := make(chan error, 1)
	require.NoError(t, srv.Loop(0).Post(func() {
		for _, name := range []string{"arena-1", "arena-2"} {
			if _, err := room.New(srv.Loop(0), room.Config[int]{Name: name, Period: 10 * time.Millisecond,
				Tick: func(*room.Room[int], *room.Tick[int]) {}}); err != nil {
				made <- err
				return
			}
		}
		made <- nil
	}))
	require.NoError(t, <-made)

	conn, _, err := websocket.DefaultDialer.Dial(strings.Replace(base, "http://", "ws://", 1)+"/ws", nil)
	require.NoError(t, err)
	defer conn.Close()
	for i := range 3 {
		msg := fmt.Sprintf("hello %d", i)
		require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte(msg)))
		_, got, err := conn.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, msg, string(got))
	}

	cl := &http.Client{Timeout: 10 * time.Second}
	code, text := get(t, cl, base+"/metrics")
	require.Equal(t, 200, code)
	mfs := parse(t, text)
	assert.Equal(t, 2.0, metric(t, mfs, "baton_rooms", nil).GetGauge().GetValue())
	assert.Equal(t, dto.MetricType_GAUGE, mfs["baton_rooms_loop_share_ratio"].GetType())
	assert.Len(t, mfs["baton_rooms_loop_share_ratio"].GetMetric(), 3, "one per window")
	ws := map[string]string{"route": "GET /ws"}
	assert.Equal(t, 1.0, metric(t, mfs, "baton_websocket_connections", ws).GetGauge().GetValue())
	assert.Equal(t, 1.0, metric(t, mfs, "baton_websocket_upgrades_total", ws).GetCounter().GetValue())
	assert.Equal(t, 3.0, metric(t, mfs, "baton_websocket_messages_total", map[string]string{"route": "GET /ws", "direction": "in"}).GetCounter().GetValue())
	assert.Equal(t, 3.0, metric(t, mfs, "baton_websocket_messages_total", map[string]string{"route": "GET /ws", "direction": "out"}).GetCounter().GetValue())
	assert.Equal(t, float64(3*len("hello 0")), metric(t, mfs, "baton_websocket_payload_bytes_total", map[string]string{"route": "GET /ws", "direction": "in"}).GetCounter().GetValue())
}
