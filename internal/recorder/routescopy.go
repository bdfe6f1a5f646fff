package recorder

import (
	"slices"
	"strings"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/hdr"
)

// RoutesCopy is every route's raw figures at one instant: the counts, and each figure's
// histogram counters as they are, copied on the loop by Routes.CopyInto so that the
// percentiles and buckets, most of a snapshot's work, are computed by Snapshot on the
// reader's goroutine, off the loop. Its buffers are kept and reused by the next CopyInto,
// so a RoutesCopy is meant to be pooled. The zero value is ready to use. Not safe for
// concurrent use: it belongs to the loop while CopyInto runs, then to one reader.
type RoutesCopy struct {
	l       *hdr.Layout
	n       int // routes copied, the first n of routes
	routes  []routeCopy
	scratch *hdr.Histogram
}

// routeCopy is one route's copy: its counts (a RouteSnapshot without summaries) and its
// figures' counters.
type routeCopy struct {
	head accounting.RouteSnapshot
	figs [numMetrics]figureCopy
}

// figureCopy is one figure's counters: the cumulative store's and the two recent windows'
// (previous, current), each cut after its last counter that can be non-zero (the counter
// of its exact maximum), which is usually well short of the layout's 4,608.
type figureCopy struct {
	cum            []uint64
	cumSum, cumMax int64
	win            [2][]uint32
	winSum, winMax int64 // of both windows together
}

// used returns the counters of l up to the one holding mx, the exact maximum of the values
// they count: those above it are zero.
func used[T uint32 | uint64](l *hdr.Layout, counts []T, mx int64) []T {
	return counts[:l.Index(min(max(mx, 0), l.Limit()))+1]
}

// CopyInto copies every route's figures at now into dst, rotating stale recent windows
// first as Snapshot does: the counts, and the counters of each figure's histograms up to
// its maximum (plain copies, no percentiles). dst's buffers are reused; it allocates only
// where they are too small. Loop-confined.
func (r *Routes) CopyInto(dst *RoutesCopy, now time.Time) {
	ns := since(r.cfg.Epoch, now)
	dst.l = r.layout
	dst.n = 0
	if cap(dst.routes) < len(r.byKey) {
		dst.routes = append(dst.routes[:cap(dst.routes)], make([]routeCopy, len(r.byKey)-cap(dst.routes))...)
	}
	dst.routes = dst.routes[:cap(dst.routes)]
	for _, rt := range r.byKey {
		rt.copyInto(&dst.routes[dst.n], ns)
		dst.n++
	}
}

func (rt *Route) copyInto(dst *routeCopy, now int64) {
	rt.flush()
	rt.rotate(now)
	cur, prev := &rt.win[rt.cur], &rt.win[rt.cur^1]
	w := int64(rt.r.cfg.RecentWindow)
	span := now - max((rt.winNo-1)*w, 0) // the view starts at the previous window, or the epoch
	dst.head = accounting.RouteSnapshot{
		Route: rt.key, Count: rt.n, Errors: rt.errors, ClientErrors: rt.client,
		InFlight: rt.inFlight,
		Recent: accounting.RecentCounts{
			Count:        cur.count + prev.count,
			Errors:       cur.errors + prev.errors,
			ClientErrors: cur.client + prev.client,
			Span:         time.Duration(max(span, 0)),
		},
	}
	l := rt.r.layout
	for i := range dst.figs {
		f := &dst.figs[i]
		c := &rt.cum[i]
		f.cum = append(f.cum[:0], used(l, c.h.Counts(), c.max)...)
		f.cumSum, f.cumMax = c.sum, c.max
		f.winSum, f.winMax = 0, 0
		for k, h := range [2]*hdr.Recorder{&prev.h[i], &cur.h[i]} {
			f.win[k] = f.win[k][:0]
			if h.Used() {
				f.win[k] = append(f.win[k], used(l, h.Counts(), h.Max())...)
				f.winSum += h.Sum()
				f.winMax = max(f.winMax, h.Max())
			}
		}
	}
}

// Snapshot returns the copied routes' figures, sorted by key: the same values
// Routes.Snapshot would have returned at the copy's instant. It computes the percentiles
// and buckets and allocates the result (the caller owns it; c's buffers stay c's). Any
// goroutine that owns c, and meant to be called off the loop.
func (c *RoutesCopy) Snapshot() []accounting.RouteSnapshot {
	out := make([]accounting.RouteSnapshot, c.n)
	if c.n == 0 {
		return out
	}
	if c.scratch == nil || c.scratch.Layout() != c.l {
		c.scratch = hdr.New(c.l)
	}
	sc := c.scratch
	for j := range c.n {
		rc := &c.routes[j]
		s := &out[j]
		*s = rc.head
		pairs := [numMetrics]*accounting.SummaryPair{&s.Latency, &s.OnLoop, &s.QueueDelay, &s.Parked}
		for i, p := range pairs {
			f := &rc.figs[i]
			sc.Reset()
			for _, w := range f.win {
				sc.AddCounts32(w)
			}
			p.Recent = quantilesOf(sc, time.Duration(f.winSum), time.Duration(f.winMax))
			// cumulative = retired windows + the recent view
			sc.AddCounts64(f.cum)
			p.Cumulative = summarize(sc, f.cumSum+f.winSum, max(f.cumMax, f.winMax))
		}
	}
	slices.SortFunc(out, func(a, b accounting.RouteSnapshot) int { return strings.Compare(a.Route, b.Route) })
	return out
}
