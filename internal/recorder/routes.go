package recorder

import (
	"math"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/hdr"
)

// Route metrics, the index of each per-route histogram.
const (
	metLatency    = iota // TaskSample.Age at the end: total latency
	metOnLoop            // TaskSample.OnLoop
	metQueueDelay        // TaskSample.QueueDelay
	metParked            // TaskSample.ParkedTotal()
	numMetrics
)

// Routes is the registry of per-route recorders. Loop-confined: call only from the loop
// goroutine.
//
// Memory: each route keeps 4 figures, each as a cumulative HDR histogram and as the
// 32-bit bucket counters of two recent windows (about 37 KiB and 18 KiB each with the
// defaults), plus an 8 KiB batch: about 300 KiB per route.
//
// A route does not record its finished requests one by one: it counts them at once and
// appends their four figures to a batch, which it records into its histograms when the
// batch is full, when its window ends and before every Snapshot, so readers never see the
// difference. Recording a batch is a tight loop per figure over one set of counters,
// about a third of the instructions of recording each request as it finishes, and with
// the counters' cache lines hot (docs/accounting.md, "Cost, and what is measured where").
type Routes struct {
	cfg    Config
	layout *hdr.Layout
	byKey  map[string]*Route
}

// finishBatch is how many finished requests a route batches before recording them:
// 4 figures of 8 bytes each, 8 KiB, small enough to stay in cache between flushes, and
// recorded in a few microseconds, too short to matter as a pause of the loop.
const finishBatch = 256

// NewRoutes returns an empty registry. It panics if cfg.validate fails. Any goroutine (the
// registry then belongs to the loop).
func NewRoutes(cfg Config) *Routes {
	cfg.mustValidate()
	cfg = cfg.withDefaults(time.Now())
	l := cfg.layout()
	return &Routes{cfg: cfg, layout: l, byKey: make(map[string]*Route)}
}

// Route returns the recorder for key (method + pattern, e.g. "GET /users/{id}"), creating
// it on first use. Creation allocates (about 300 KiB, see Routes); later calls with the
// same key do not. Loop-confined.
func (r *Routes) Route(key string) *Route {
	if rt := r.byKey[key]; rt != nil {
		return rt
	}
	rt := &Route{r: r, key: key, winNo: math.MinInt64, winEnd: math.MinInt64} // no window yet
	for i := range rt.cum {
		rt.cum[i] = newStore(r.layout)
		rt.win[0].h[i] = hdr.NewRecorder(r.layout)
		rt.win[1].h[i] = hdr.NewRecorder(r.layout)
	}
	r.byKey[key] = rt
	return rt
}

// Snapshot returns every route's figures at now, sorted by key. It rotates stale recent
// windows first and allocates: CopyInto and RoutesCopy.Snapshot in one call, for a reader
// on the loop. Loop-confined.
func (r *Routes) Snapshot(now time.Time) []accounting.RouteSnapshot {
	var c RoutesCopy
	r.CopyInto(&c, now)
	return c.Snapshot()
}

// windowOf returns the number of the recent window holding ns: windows are
// [k*RecentWindow, (k+1)*RecentWindow) since Epoch.
func (r *Routes) windowOf(ns int64) int64 {
	w := int64(r.cfg.RecentWindow)
	if ns < 0 {
		return (ns - w + 1) / w
	}
	return ns / w
}

// Route records the requests of one route. Loop-confined: call only from the loop
// goroutine.
//
// Each figure is kept twice: cumulative (since the route was created) and recent. A value
// is recorded once, into the current window; windows that leave the recent view are merged
// into the cumulative histograms, and a snapshot adds the recent view to those. Time
// since Config.Epoch is cut into windows of Config.RecentWindow, [k*W, (k+1)*W); the route
// keeps the current window and the one before it, and the recent view at time t in window
// k holds the requests that finished in windows k-1 and k, that is in [(k-1)*W, t]: between
// one and two windows of history (RouteSnapshot.RecentSpan says how much). Windows rotate
// lazily, at the first FinishValues or Snapshot in a later window: the older histogram set is
// reset and becomes the current one (both are reset after a gap of two windows or more).
type Route struct {
	// Written at every request: kept together at the front.
	inFlight int64
	n        uint64 // requests finished
	errors   uint64
	client   uint64
	winEnd   int64 // first ns after the current window (math.MinInt64 before the first)
	cur      int   // index of the current window in win
	np       int   // figures waiting in pend

	r     *Routes
	key   string
	winNo int64 // number of the current window (math.MinInt64 before the first)
	win   [2]window
	cum   [numMetrics]store
	pend  [numMetrics][finishBatch]int64 // for win[cur], by figure
}

type window struct {
	count  uint64
	errors uint64
	client uint64
	h      [numMetrics]hdr.Recorder
}

func (w *window) reset() {
	for i := range w.h {
		w.h[i].Reset()
	}
	w.count, w.errors, w.client = 0, 0, 0
}

// Start records that a request for this route started (in-flight + 1). Loop-confined.
func (rt *Route) Start() { rt.inFlight++ }

// finishAt is FinishValues with a TaskSample's figures: s.Status, s.Age (latency),
// s.OnLoop, s.QueueDelay and s.ParkedTotal(). Loop-confined.
func (rt *Route) finishAt(s *accounting.TaskSample, now int64) {
	rt.FinishValues(now, s.Status, s.Age, s.OnLoop, s.QueueDelay, s.ParkedTotal())
}

// FinishValues records the end of a request of this route at now (ns since Config.Epoch):
// the count, an error if status >= 500 or a client error if 400 <= status < 500, in-flight
// - 1, and the latency (accept to end), the time on the loop, the queue delay and the total
// parked time into the cumulative and the recent histograms. It neither allocates nor
// locks, rotation included. Loop-confined.
func (rt *Route) FinishValues(now int64, status int, latency, onLoop, queueDelay, parked time.Duration) {
	rt.inFlight--
	if now >= rt.winEnd {
		rt.rotate(now) // records the batch into the window it belongs to first
	}
	w := &rt.win[rt.cur]
	rt.n++
	w.count++
	switch {
	case status >= 500:
		rt.errors++
		w.errors++
	case status >= 400:
		rt.client++
		w.client++
	}
	i := rt.np
	rt.pend[metLatency][i] = int64(latency)
	rt.pend[metOnLoop][i] = int64(onLoop)
	rt.pend[metQueueDelay][i] = int64(queueDelay)
	rt.pend[metParked][i] = int64(parked)
	if rt.np = i + 1; rt.np == finishBatch {
		rt.flush()
	}
}

// flush records the batch into the current window.
func (rt *Route) flush() {
	n := rt.np
	if n == 0 {
		return
	}
	rt.np = 0
	w := &rt.win[rt.cur]
	for m := range w.h {
		w.h[m].RecordAll(rt.pend[m][:n])
	}
}

// retire folds a window that leaves the recent view into the cumulative histograms and
// resets it. Recording each value once (into its window) and merging windows here halves
// the per-request histogram work; a merge walks the buckets, once per window per route.
func (rt *Route) retire(w *window) {
	for i := range w.h {
		rt.cum[i].add(&w.h[i])
	}
	w.reset()
}

// rotate makes win[cur] the window holding now.
func (rt *Route) rotate(now int64) {
	if now < rt.winEnd {
		return // the current window (or a clock reading from the past: keep it there)
	}
	rt.flush() // the batch belongs to the window ending now
	k := rt.r.windowOf(now)
	switch {
	case k <= rt.winNo:
		return // same window (or a clock reading from the past: keep it in the current)
	case k == rt.winNo+1:
		rt.cur ^= 1
		rt.retire(&rt.win[rt.cur])
	default:
		rt.retire(&rt.win[0])
		rt.retire(&rt.win[1])
	}
	rt.winNo = k
	rt.winEnd = (k + 1) * int64(rt.r.cfg.RecentWindow)
}
