package stats

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
)

// A history point is its interval's own: counts and rates from the difference of two
// snapshots, a p99 bound from the difference of their buckets, counters of a section's
// series as rates (from the new value when one falls), gauges as read.
func TestHistoryPointIsTheIntervals(t *testing.T) {
	srv := loop.New(loop.Config{})
	t.Cleanup(func() { _ = srv.Close() })
	take := func(*loop.Loop, url.Values) (any, error) { return nil, nil }
	require.NoError(t, srv.AddStats(loop.StatsSection{Name: "game", Take: take,
		Series: func(v any) map[string]float64 { return v.(map[string]float64) }}))

	bucketsUpTo := func(k int, n uint64) (b accounting.Buckets) { // n values in bucket k
		for i := k; i < accounting.NumBuckets; i++ {
			b[i] = n
		}
		return b
	}
	at := time.Unix(1000, 0)
	snap := func(count, errs uint64, lat accounting.Buckets, game map[string]float64, dt time.Duration) *Snapshot {
		s := &Snapshot{Taken: at.Add(dt), Sections: map[string]any{"game": game}}
		s.Routes = []accounting.RouteSnapshot{{Route: "GET /x", Count: count, Errors: errs}}
		s.Routes[0].Latency.Cumulative.Buckets = lat
		return s
	}
	var st sampleState
	p0 := st.point(1, snap(100, 1, bucketsUpTo(3, 100), map[string]float64{"kills_total": 50, "players": 7}, 0), srv)
	assert.Empty(t, p0.Routes, "the first point has no interval")
	assert.Equal(t, map[string]float64{"players": 7}, p0.Series["game"], "gauges from the first point, rates from the second")

	// Two seconds later: 40 more requests, 10 of them 5xx; 39 in bucket 3, one in bucket 9.
	lat := bucketsUpTo(3, 139)
	for i := 9; i < accounting.NumBuckets; i++ {
		lat[i]++
	}
	p1 := st.point(2, snap(140, 11, lat, map[string]float64{"kills_total": 10, "players": 9}, 2*time.Second), srv)
	r := p1.Routes["GET /x"]
	assert.EqualValues(t, 40, r.Requests)
	assert.InDelta(t, 20, r.Rate, 1e-9)
	assert.InDelta(t, 5, r.Errors, 1e-9)
	assert.Equal(t, accounting.BucketBounds[9].Seconds(), r.P99, "1 of 40 above bucket 3 is more than 1 %")
	assert.Equal(t, map[string]float64{"players": 9, "kills_per_second": 5}, p1.Series["game"],
		"a counter that fell counts from its new value: 10 in 2 s")

	// One second later, no request: the route has no point.
	p2 := st.point(3, snap(140, 11, lat, map[string]float64{"kills_total": 13}, 3*time.Second), srv)
	assert.Empty(t, p2.Routes)
	assert.Equal(t, map[string]float64{"kills_per_second": 3}, p2.Series["game"])
}

// A websockets section without Series of its own (registered by a package that does not
// give one) is charted from its page's JSON: open connections, messages in and out.
func TestWSSeriesFromTheSectionsJSON(t *testing.T) {
	doc := map[string]any{"open": 4, "upgrades_total": 9, "routes": []map[string]any{
		{"route": "GET /ws", "messages_in": 30, "messages_out": 60}, {"route": "GET /chat", "messages_in": 5, "messages_out": 1}}}
	assert.Equal(t, map[string]float64{"open": 4, "messages_in_total": 35, "messages_out_total": 61}, wsSeries(doc))
	assert.Nil(t, wsSeries(map[string]any{"routes": nil}), "no open count: not the WebSocket page")
	assert.Nil(t, wsSeries(func() {}), "not JSON")
}
