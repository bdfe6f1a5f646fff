package stats

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
)

// The dashboard's history: one point per FrameInterval, kept by the hub for dashHistory
// points whether or not a page is open. A point holds what happened in its interval,
// computed from the difference between two snapshots' cumulative figures (counts and
// histogram buckets), so that a point is the interval's own and not a running average.

// dashPoint is one sample of the history.
type dashPoint struct {
	Time        float64 `json:"t"`           // unix seconds
	Utilisation float64 `json:"utilisation"` // the loops' busy share over the last complete second
	LagMean     float64 `json:"lag_mean_seconds"`
	LagP99      float64 `json:"lag_p99_seconds"` // the bucket bound holding 99% of the interval's slices
	Slices      uint64  `json:"slices"`
	// Routes holds, by route, the routes that served requests in the interval.
	Routes map[string]routePoint `json:"routes,omitempty"`
	// OffloadQueued is how many offloaded calls waited for a token when sampled;
	// OffloadWaitP99 the bucket bound holding 99% of the interval's waits, all lanes.
	OffloadQueued  int     `json:"offload_queued"`
	OffloadWaitP99 float64 `json:"offload_wait_p99_seconds"`
	// Series holds, by section, the figures its Series returned: counters ("_total") as a
	// rate per second over the interval (named without "_total", with "_per_second"),
	// gauges as read.
	Series map[string]map[string]float64 `json:"series,omitempty"`
}

// routePoint is one route's interval.
type routePoint struct {
	Requests uint64  `json:"requests"` // finished in the interval
	Rate     float64 `json:"requests_per_second"`
	Errors   float64 `json:"errors_per_second"` // 5xx
	P99      float64 `json:"p99_seconds"`       // the bucket bound holding 99% of the interval's requests
}

// sampleState is what the next point is computed against: the previous snapshot's
// cumulative figures. The hub's goroutine only.
type sampleState struct {
	at      time.Time
	lag     accounting.Summary
	routes  map[string]routeCum
	offWait accounting.Buckets
	offN    uint64
	series  map[string]map[string]float64
}

type routeCum struct {
	count, errors uint64
	latency       accounting.Buckets
}

// point computes the point of the interval that ends with snap.
func (st *sampleState) point(t float64, snap *Snapshot, srv *loop.Server) dashPoint {
	l := &snap.Loop
	p := dashPoint{Time: t, Utilisation: l.Utilisation[0].Utilisation()}
	secs := 0.0
	if !st.at.IsZero() {
		secs = snap.Taken.Sub(st.at).Seconds()
	}
	// The loop's lag.
	prev := st.lag
	if prev.Count > l.Lag.Count {
		prev = accounting.Summary{}
	}
	if n := l.Lag.Count - prev.Count; n > 0 {
		p.Slices = n
		p.LagMean = (l.Lag.Sum - prev.Sum).Seconds() / float64(n)
		p.LagP99 = p99Of(&l.Lag.Buckets, &prev.Buckets, n)
	}
	st.lag = l.Lag
	// The routes.
	routes := make(map[string]routeCum, len(snap.Routes))
	for _, r := range snap.Routes {
		c := routeCum{count: r.Count, errors: r.Errors, latency: r.Latency.Cumulative.Buckets}
		routes[r.Route] = c
		old, ok := st.routes[r.Route]
		if !ok || old.count > c.count || secs <= 0 {
			continue
		}
		n := c.count - old.count
		if n == 0 {
			continue
		}
		if p.Routes == nil {
			p.Routes = map[string]routePoint{}
		}
		p.Routes[r.Route] = routePoint{Requests: n, Rate: float64(n) / secs, Errors: float64(c.errors-min(old.errors, c.errors)) / secs,
			P99: p99Of(&c.latency, &old.latency, n)}
	}
	st.routes = routes
	// The offload pool: waiting now, and the interval's waits over every lane.
	var wait accounting.Buckets
	var waits uint64
	for _, ln := range snap.Offload.Pool.Lanes {
		p.OffloadQueued += ln.Waiting
		waits += ln.Wait.Count
		for k := range wait {
			wait[k] += ln.Wait.Buckets[k]
		}
	}
	if waits > st.offN && !st.at.IsZero() {
		p.OffloadWaitP99 = p99Of(&wait, &st.offWait, waits-st.offN)
	}
	st.offWait, st.offN = wait, waits
	// The sections' series.
	series := map[string]map[string]float64{}
	for _, sec := range srv.StatsSections() {
		v, ok := snap.Sections[sec.Name]
		if !ok {
			continue
		}
		var cur map[string]float64
		switch {
		case sec.Series != nil:
			cur = sec.Series(v)
		case sec.Name == "websockets":
			cur = wsSeries(v)
		}
		if len(cur) == 0 {
			continue
		}
		series[sec.Name] = cur
		out := map[string]float64{}
		for k, x := range cur {
			name, counter := strings.CutSuffix(k, "_total")
			if !counter {
				out[k] = x
				continue
			}
			old, ok := st.series[sec.Name][k]
			if !ok || secs <= 0 {
				continue
			}
			if old > x { // the counter fell (a room ended): count from its new value
				old = 0
			}
			out[name+"_per_second"] = (x - old) / secs
		}
		if p.Series == nil {
			p.Series = map[string]map[string]float64{}
		}
		p.Series[sec.Name] = out
	}
	st.series = series
	st.at = snap.Taken
	return p
}

// p99Of returns the bucket bound under which 99% of the n values recorded between two
// readings of cumulative buckets fall (the last bound when none does).
func p99Of(cur, prev *accounting.Buckets, n uint64) float64 {
	for k, bound := range accounting.BucketBounds {
		if float64(cur[k]-min(prev[k], cur[k])) >= 0.99*float64(n) {
			return bound.Seconds()
		}
	}
	return accounting.BucketBounds[accounting.NumBuckets-1].Seconds()
}

// wsSeries reads the WebSocket section's chart figures from its page's JSON (open
// connections, messages in and out), for a "websockets" section without Series of its own.
func wsSeries(v any) map[string]float64 {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var d struct {
		Open   *int `json:"open"`
		Routes []struct {
			In  uint64 `json:"messages_in"`
			Out uint64 `json:"messages_out"`
		} `json:"routes"`
	}
	if json.Unmarshal(b, &d) != nil || d.Open == nil {
		return nil
	}
	out := map[string]float64{"open": float64(*d.Open)}
	var in, o uint64
	for _, r := range d.Routes {
		in += r.In
		o += r.Out
	}
	out["messages_in_total"], out["messages_out_total"] = float64(in), float64(o)
	return out
}
