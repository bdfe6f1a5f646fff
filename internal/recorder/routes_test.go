package recorder

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return epoch.Add(d) }

// sampleTask is a finished request's figures (accounting's tests use the same one).
func sampleTask() accounting.TaskSample {
	s := accounting.TaskSample{
		ID: 7, Kind: "request", Route: "GET /users/{id}", Method: "GET", Path: "/users/3",
		State: "parked", ParkReason: "sleep", Goroutine: 99,
		Rounds: 3, OnLoop: 123 * time.Microsecond, MaxSlice: 100 * time.Microsecond,
		SlowSlices: 1, SlowTime: 100 * time.Microsecond, QueueDelay: 10 * time.Microsecond,
		FirstRunDelay: 4 * time.Microsecond, Age: 60 * time.Millisecond, Status: 200,
	}
	s.Parked.Sleep = 50 * time.Millisecond
	s.Parked.Offload = 200 * time.Microsecond
	return s
}

func TestRouteCounts(t *testing.T) {
	r := NewRoutes(Config{Epoch: epoch})
	a := r.Route("GET /a")
	require.False(t, r.Route("GET /a") != a, "Route did not return the existing route")
	b := r.Route("DELETE /b")
	for _, st := range []int{200, 204, 404, 429, 500, 503, 0} {
		a.Start()
		a.finishAt(&accounting.TaskSample{Status: st, Age: time.Millisecond}, int64(time.Second))
	}
	a.Start()
	a.Start()
	b.Start()
	snaps := r.Snapshot(at(2 * time.Second))
	require.False(t, len(snaps) != 2 || snaps[0].Route != "DELETE /b" || snaps[1].Route != "GET /a", "snapshots not sorted by key: %+v", snaps)
	s := snaps[1]
	assert.False(t, s.Count != 7 || s.Errors != 2 || s.ClientErrors != 2 || s.InFlight != 2, "count %d errors %d client %d in-flight %d, want 7 2 2 2", s.Count, s.Errors, s.ClientErrors, s.InFlight)
	assert.False(t, s.Recent.Count != 7 || s.Recent.Errors != 2 || s.Recent.ClientErrors != 2, "recent %+v", s.Recent)
	assert.False(t, snaps[0].InFlight != 1 || snaps[0].Count != 0, "b: %+v", snaps[0])
	assert.False(t, len(r.byKey) != 2 || a.key != "GET /a", "routes/key")
}

func TestRouteHistograms(t *testing.T) {
	r := NewRoutes(Config{Epoch: epoch})
	rt := r.Route("GET /h")
	var sum time.Duration
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Millisecond
		sum += d
		s := accounting.TaskSample{Age: d, OnLoop: d / 10, QueueDelay: d / 100}
		s.Parked.Sleep = d / 2
		s.Parked.Offload = d / 4
		rt.finishAt(&s, int64(time.Second))
	}
	snap := r.Snapshot(at(time.Second))[0]
	check := func(name string, got accounting.Summary, scale float64) {
		t.Helper()
		near := func(q string, v time.Duration, want float64) {
			t.Helper()
			w := want * scale * float64(time.Millisecond)
			assert.False(t, math.Abs(float64(v)-w) > 0.011*w, "%s %s = %v, want %v ± 1%%", name, q, v, time.Duration(w))
		}
		assert.False(t, got.Count != 1000, "%s count %d", name, got.Count)
		near("p50", got.P50, 500)
		near("p90", got.P90, 900)
		near("p99", got.P99, 990)
		near("p999", got.P999, 999)
		assert.Equal(t, time.Duration(1000*scale*float64(time.Millisecond)), got.Max, "%s max, exactly", name)
		assert.Equal(t, time.Duration(float64(sum)*scale/1000), got.Mean(), "%s mean, exactly", name)
	}
	for _, c := range []struct {
		name  string
		p     accounting.SummaryPair
		scale float64
	}{{"latency", snap.Latency, 1}, {"on_loop", snap.OnLoop, 0.1}, {"queue", snap.QueueDelay, 0.01}, {"parked", snap.Parked, 0.75}} {
		check(c.name+" cumulative", c.p.Cumulative, c.scale)
		check(c.name+" recent", c.p.Recent, c.scale)
	}
}

func TestRouteHistogramClamp(t *testing.T) {
	r := NewRoutes(Config{Epoch: epoch, HistogramMax: time.Second})
	rt := r.Route("GET /long")
	rt.finishAt(&accounting.TaskSample{Age: time.Hour, OnLoop: -5}, 0)
	s := r.Snapshot(epoch)[0]
	assert.False(t, s.Latency.Cumulative.Max != time.Hour || s.Latency.Cumulative.P99 > time.Hour || s.Latency.Cumulative.P99 < time.Second, "clamped value: %+v", s.Latency.Cumulative)
	assert.False(t, s.OnLoop.Cumulative.Max != 0 || s.OnLoop.Cumulative.Count != 1, "negative value: %+v", s.OnLoop.Cumulative)
}

func TestRouteRecentRotation(t *testing.T) {
	const w = 10 * time.Second
	r := NewRoutes(Config{Epoch: epoch, RecentWindow: w})
	rt := r.Route("GET /r")
	finish := func(age time.Duration, when time.Duration) {
		rt.finishAt(&accounting.TaskSample{Age: age, Status: 500}, int64(when))
	}
	finish(10*time.Millisecond, 1*time.Second)  // window 0
	finish(20*time.Millisecond, 12*time.Second) // window 1
	steps := []struct {
		now        time.Duration
		count      uint64
		max        time.Duration
		span       time.Duration
		cumulative uint64
	}{
		{15 * time.Second, 2, 20 * time.Millisecond, 15 * time.Second, 2}, // windows 0 and 1
		{19 * time.Second, 2, 20 * time.Millisecond, 19 * time.Second, 2},
		{25 * time.Second, 1, 20 * time.Millisecond, 15 * time.Second, 2}, // windows 1 and 2
		{35 * time.Second, 0, 0, 15 * time.Second, 2},                     // windows 2 and 3
		{95 * time.Second, 0, 0, 15 * time.Second, 2},                     // a long gap
	}
	for _, st := range steps {
		s := r.Snapshot(epoch.Add(st.now))[0]
		rl := s.Latency.Recent
		assert.False(t, rl.Count != st.count || rl.Max != st.max || s.Recent.Count != st.count || s.Recent.Errors != st.count, "at %v: recent count %d (counts %+v) max %v, want %d, %v", st.now, rl.Count, s.Recent, rl.Max, st.count, st.max)
		assert.False(t, s.Recent.Span != st.span, "at %v: span %v, want %v", st.now, s.Recent.Span, st.span)
		assert.False(t, s.Latency.Cumulative.Count != st.cumulative || s.Count != st.cumulative, "at %v: cumulative %d", st.now, s.Latency.Cumulative.Count)
	}
	// After the gap, a new request is the only one in the recent view.
	finish(30*time.Millisecond, 96*time.Second)
	s := r.Snapshot(epoch.Add(101 * time.Second))[0]
	assert.False(t, s.Latency.Recent.Count != 1 || s.Latency.Recent.Max != 30*time.Millisecond || s.Latency.Cumulative.Count != 3, "after gap: %+v", s.Latency)
	assert.InDelta(t, 1.0/11, s.Recent.PerSecond(), 1e-9, "PerSecond")
	assert.False(t, s.Recent.Errors != s.Recent.Count, "recent errors %d of %d, want all", s.Recent.Errors, s.Recent.Count)
}

// TestRouteBatchingIsInvisible: finished requests are batched and recorded later; a
// registry whose routes record every request at once and one that batches must show the
// same figures, across window rotations, gaps and several routes.
func TestRouteBatchingIsInvisible(t *testing.T) {
	w := DefaultRecentWindow
	each := NewRoutes(Config{Epoch: epoch})
	end := NewRoutes(Config{Epoch: epoch})
	keys := []string{"GET /a", "GET /b", "POST /c"}
	now := int64(0)
	for i := range 1000 {
		switch {
		case i == 300:
			now += int64(3 * w) // a gap of several windows
		case i%7 == 0:
			now += int64(w / 13)
		}
		now += int64(i % 5)
		k := keys[i%len(keys)]
		st := []int{200, 404, 503}[i%3]
		v := time.Duration(i*i%9973) * time.Microsecond
		for _, r := range []*Routes{each, end} {
			rt := r.Route(k)
			rt.Start()
			rt.FinishValues(now, st, v, v/3, v/7, v/2)
		}
		each.Route(k).flush() // as if every request were recorded as it finished
	}
	at := epoch.Add(time.Duration(now) + time.Millisecond)
	got, want := end.Snapshot(at), each.Snapshot(at)
	require.False(t, len(got) != len(want), "%d routes, want %d", len(got), len(want))
	for i := range got {
		assert.False(t, got[i] != want[i], "route %s: batched\n%+v\nwant\n%+v", got[i].Route, got[i], want[i])
		assert.False(t, got[i].Count == 0 || got[i].Latency.Cumulative.Count == 0 || got[i].Recent.Count == 0, "route %s: nothing recorded: %+v", got[i].Route, got[i])
	}
}
