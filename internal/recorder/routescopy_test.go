package recorder

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/hdr"
)

// refSnapshot is how Routes.Snapshot read the routes before RoutesCopy: every counter of
// every histogram folded on the spot, nothing cut. The copy must give the same figures.
func refSnapshot(r *Routes, now time.Time) []accounting.RouteSnapshot {
	ns := since(r.cfg.Epoch, now)
	sc := hdr.New(r.layout)
	var out []accounting.RouteSnapshot
	for _, rt := range r.byKey {
		rt.flush()
		rt.rotate(ns)
		cur, prev := &rt.win[rt.cur], &rt.win[rt.cur^1]
		w := int64(r.cfg.RecentWindow)
		span := ns - max((rt.winNo-1)*w, 0)
		s := accounting.RouteSnapshot{
			Route: rt.key, Count: rt.n, Errors: rt.errors, ClientErrors: rt.client, InFlight: rt.inFlight,
			Recent: accounting.RecentCounts{Count: cur.count + prev.count, Errors: cur.errors + prev.errors,
				ClientErrors: cur.client + prev.client, Span: time.Duration(max(span, 0))},
		}
		pairs := [numMetrics]*accounting.SummaryPair{&s.Latency, &s.OnLoop, &s.QueueDelay, &s.Parked}
		for i, p := range pairs {
			p.Recent = summaryOf(sc, &prev.h[i], &cur.h[i])
			cum := &rt.cum[i]
			sc.Merge(cum.h)
			p.Cumulative = summarize(sc, cum.sum+int64(p.Recent.Sum), max(cum.max, int64(p.Recent.Max)))
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b accounting.RouteSnapshot) int { return strings.Compare(a.Route, b.Route) })
	return out
}

// TestRoutesCopyMatchesDirectRead reuses one RoutesCopy over rounds in which routes are
// added, windows rotate and retire, and the values range from 0 past the histograms'
// limit, shrinking and growing the copied counters: every round's figures must be those
// of a direct read of every counter.
func TestRoutesCopyMatchesDirectRead(t *testing.T) {
	const win = time.Second
	r := NewRoutes(Config{Epoch: epoch, RecentWindow: win})
	rng := rand.New(rand.NewPCG(1, 2))
	var c RoutesCopy
	now := time.Duration(0)
	for round := range 30 {
		for k := range round%7 + 1 { // routes appear over the rounds
			rt := r.Route(fmt.Sprintf("GET /r%d", (round+k)%9))
			scale := []time.Duration{0, time.Microsecond, time.Millisecond, time.Second, 2 * defaultHistogramMax}[rng.IntN(5)]
			for range rng.IntN(600) {
				rt.Start()
				v := time.Duration(rng.Int64N(int64(scale) + 1))
				rt.FinishValues(int64(now), 200+rng.IntN(4)*100, v, v/3, -v/7+time.Duration(rng.IntN(1000)), v/2)
			}
		}
		now += time.Duration(rng.Int64N(int64(3 * win))) // sometimes a window, sometimes several
		want := refSnapshot(r, at(now))
		r.CopyInto(&c, at(now))
		require.Equal(t, len(want), c.n, "round %d", round)
		require.Equal(t, want, c.Snapshot(), "round %d", round)
	}
}

// TestRoutesCopyOffLoop takes copies on one goroutine (the loop) while readers compute
// their snapshots on others, each copy used by one goroutine at a time as the contract
// says, through a pool as the server uses them: run with -race.
func TestRoutesCopyOffLoop(t *testing.T) {
	r := NewRoutes(Config{Epoch: epoch})
	for i := range 5 {
		r.Route(fmt.Sprintf("GET /r%d", i))
	}
	pool := sync.Pool{New: func() any { return new(RoutesCopy) }}
	results := make(chan []accounting.RouteSnapshot, 64)
	var wg sync.WaitGroup
	for n := range 200 { // the loop: records, copies, hands the copy to a reader
		rt := r.Route(fmt.Sprintf("GET /r%d", n%5))
		rt.Start()
		rt.FinishValues(int64(time.Second), 200, time.Duration(n)*time.Microsecond, 0, 0, 0)
		c := pool.Get().(*RoutesCopy)
		r.CopyInto(c, at(time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := c.Snapshot()
			pool.Put(c)
			results <- s
		}()
		if n%32 == 31 {
			wg.Wait()
			for len(results) > 0 {
				<-results
			}
		}
	}
	wg.Wait()
	close(results)
	var last []accounting.RouteSnapshot
	for s := range results {
		last = s
	}
	require.Len(t, last, 5)
	final := r.Snapshot(at(time.Second))
	var total uint64
	for _, s := range final {
		total += s.Count
		require.Equal(t, s.Count, s.Latency.Cumulative.Count, s.Route)
	}
	require.Equal(t, uint64(200), total)
}
