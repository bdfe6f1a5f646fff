package offload

import (
	"cmp"
	"slices"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/hdr"
)

// hist is a distribution of durations: an HDR histogram in microseconds (2 significant
// digits, 1 us to 1 h) for the percentiles, and the exact count, sum and maximum. The zero
// value is empty. Guarded by its owner's mutex.
type hist struct {
	h        *hdr.Histogram // created by the first record
	n        uint64
	sum, max time.Duration
}

// histSnap is a copy of a hist, taken under the owner's mutex and read after.
type histSnap struct {
	h        *hdr.Histogram // a copy; nil when empty
	n        uint64
	sum, max time.Duration
}

const histMax = int64(time.Hour / time.Microsecond)

// histLayout is the layout of every hist (shared: a Layout is immutable).
var histLayout = hdr.NewLayout(histMax, 2)

func (h *hist) record(d time.Duration) {
	d = max(d, 0)
	if h.h == nil {
		h.h = hdr.New(histLayout)
	}
	h.n++
	h.sum += d
	h.max = max(h.max, d)
	h.h.Record(int64(d / time.Microsecond)) // counted at histMax beyond it
}

// snapshot copies the counts so that the percentiles can be computed after the owner's
// mutex is released.
func (h *hist) snapshot() histSnap {
	if h.n == 0 {
		return histSnap{}
	}
	return histSnap{h: h.h.Clone(), n: h.n, sum: h.sum, max: h.max}
}

// summary returns the snapshot as an accounting.Summary: exact Count, Sum and Max,
// percentiles from the histogram (never above Max).
func (s histSnap) summary() accounting.Summary {
	if s.n == 0 {
		return accounting.Summary{}
	}
	return hdr.SummaryOf(s.h, time.Microsecond, s.sum, s.max)
}

// Stats is a snapshot of a pool, from Pool.Stats.
type Stats struct {
	Tokens       int  // total tokens, all lanes
	LanesEnabled bool // false with Config.NoLanes (or Tokens < 2): one lane has every token
	Closed       bool
	Workers      int                 // live worker goroutines (at most Tokens)
	IdleWorkers  int                 // of which idle
	Nested       uint64              // calls refused with ErrNested
	Lanes        [numLanes]LaneStats // [0] the fast lane, [1] the slow one (LaneStats.Lane names it)
	Keys         []KeyStats          // the 256 most recent routes plus up to 256 slow ones; slow lane first, then by estimate
	KeysTotal    int                 // routes the predictor knows (at most MaxKeys)
	KeysEvicted  uint64              // routes dropped by the LRU bound
}

// statsKeys bounds the routes Stats reports: the statsKeys most recently used ones plus up
// to statsKeys others that are in the slow lane. A server has far fewer routes; the bound
// keeps the time the pool mutex is held short and bounded even when MaxKeys routes are
// known.
const statsKeys = 256

// LaneStats describes one lane. Counters are totals since New.
type LaneStats struct {
	Lane        string // "fast" or "slow"
	Tokens      int    // the lane's budget
	KeyCap      int    // tokens one route may hold at once (Config.MaxKeyShare)
	InUse       int    // tokens held by running functions
	Waiting     int    // calls queued for a token, Capped included
	Capped      int    // of which waiting because their route holds its KeyCap
	CappedWaits uint64 // calls that have waited at their route's KeyCap
	Started     uint64
	Completed   uint64 // functions that returned (or panicked)
	Rejected    uint64 // ErrQueueFull
	Cancelled   uint64 // callers that left while queued or running
	TimedOut    uint64 // calls whose Timeout passed
	Panicked    uint64
	Migrated    uint64             // queued calls moved here when their route changed lanes
	Wait        accounting.Summary // admission to start (zero for calls that found a free token)
	Run         accounting.Summary // start to return
}

// KeyStats is the predictor's state for one route.
type KeyStats struct {
	Key      string
	Estimate time.Duration // EWMA of run time, decayed to now
	Lane     string        // the lane the next call will use, "fast" or "slow" ("slow" even with lanes off)
	Seeded   bool          // matches Config.SlowKeys
	Calls    uint64
	Flips    uint64 // lane changes
	Midway   uint64 // promotions by mid-flight learning
	// Per-key cap (Config.MaxKeyShare).
	InUse       int    // running calls of the route (tokens it holds), all lanes
	Capped      int    // calls of the route waiting now because it holds its cap
	CappedWaits uint64 // calls of the route that have waited at its cap
}

// Stats returns a snapshot of the pool. The pool's mutex is held only while raw state is
// copied (at most 2 x statsKeys routes and the lanes' histograms); quantiles, estimates and
// sorting are computed afterwards. Meant for a stats endpoint, not for every request.
// Any goroutine.
func (p *Pool) Stats() Stats {
	var snaps [numLanes][2]histSnap
	p.mu.Lock()
	now := p.now()
	st := Stats{
		Tokens:       p.tokens,
		LanesEnabled: p.lanesOn,
		Closed:       p.closed,
		Workers:      p.workers,
		IdleWorkers:  len(p.idle),
		Nested:       p.nested,
		KeysEvicted:  p.pred.evicted,
	}
	for i := range p.lanes {
		ls := &p.lanes[i]
		st.Lanes[i] = LaneStats{
			Tokens: ls.tokens, KeyCap: ls.keyCap, InUse: ls.inUse, Waiting: ls.q.n + ls.held,
			Capped: ls.held, CappedWaits: ls.cappedWaits,
			Started: ls.started, Completed: ls.completed, Rejected: ls.rejected,
			Cancelled: ls.cancelled, TimedOut: ls.timedOut, Panicked: ls.panicked,
			Migrated: ls.migratedIn,
		}
		snaps[i] = [2]histSnap{ls.wait.snapshot(), ls.run.snapshot()}
	}
	st.KeysTotal = len(p.pred.m)
	raw := make([]rawKey, 0, 2*statsKeys)
	add := func(e *keyEntry) {
		r := rawKey{keyEntry: keyEntry{key: e.key, ewma: e.ewma, last: e.last, slow: e.slow,
			seeded: e.seeded, calls: e.calls, flips: e.flips, mid: e.mid,
			cappedWaits: e.cappedWaits}, capped: e.heldN()}
		for _, n := range e.inUse {
			r.inUse += n
		}
		raw = append(raw, r)
	}
	p.pred.stamp++
	stamp := p.pred.stamp
	for e := p.pred.head; e != nil && len(raw) < statsKeys; e = e.next {
		e.stamp = stamp
		add(e)
	}
	nslow := 0
	for e := range p.pred.slowSet {
		if nslow == statsKeys {
			break
		}
		if e.stamp != stamp {
			add(e)
			nslow++
		}
	}
	pr := predictor{demote: p.pred.demote, halfLife: p.pred.halfLife}
	p.mu.Unlock()

	for i := range st.Lanes {
		st.Lanes[i].Lane = lane(i).String()
		st.Lanes[i].Wait, st.Lanes[i].Run = snaps[i][0].summary(), snaps[i][1].summary()
	}
	st.Keys = make([]KeyStats, len(raw))
	for i := range raw {
		e := &raw[i].keyEntry
		est := pr.estimate(e, now)
		lane := laneFast
		if e.seeded || (e.slow && est >= pr.demote) {
			lane = laneSlow
		}
		st.Keys[i] = KeyStats{Key: e.key, Estimate: time.Duration(est), Lane: lane.String(), Seeded: e.seeded,
			Calls: e.calls, Flips: e.flips, Midway: e.mid,
			InUse: raw[i].inUse, Capped: raw[i].capped, CappedWaits: e.cappedWaits}
	}
	slices.SortStableFunc(st.Keys, func(a, b KeyStats) int {
		return cmp.Or(cmp.Compare(b.Lane, a.Lane), cmp.Compare(b.Estimate, a.Estimate))
	})
	return st
}

// rawKey is a key's state copied under the pool's mutex.
type rawKey struct {
	keyEntry
	inUse, capped int
}
