package offload

import (
	"cmp"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Dist summarises a distribution of durations (from an HDR histogram with 2 significant
// digits, so values are within 1%; recorded in microseconds from 1 us to 1 h).
type Dist struct {
	Count int64
	Mean  time.Duration
	P50   time.Duration
	P90   time.Duration
	P99   time.Duration
	Max   time.Duration
}

// hist is an HDR histogram of durations in microseconds. Guarded by its owner's mutex.
type hist struct{ h *hdrhistogram.Histogram }

const histMax = int64(time.Hour / time.Microsecond)

func (h *hist) init() { h.h = hdrhistogram.New(1, histMax, 2) }

func (h *hist) record(d time.Duration) {
	us := int64(d / time.Microsecond)
	_ = h.h.RecordValue(min(max(us, 0), histMax))
}

// snapshot copies the counts (a few microseconds) so that the quantiles can be computed
// after the owner's mutex is released.
func (h *hist) snapshot() *hdrhistogram.Snapshot {
	if h.h.TotalCount() == 0 {
		return nil
	}
	return h.h.Export()
}

func distOf(s *hdrhistogram.Snapshot) Dist {
	if s == nil {
		return Dist{}
	}
	h := hdrhistogram.Import(s)
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Dist{
		Count: h.TotalCount(),
		Mean:  time.Duration(h.Mean() * float64(time.Microsecond)),
		P50:   us(h.ValueAtQuantile(50)),
		P90:   us(h.ValueAtQuantile(90)),
		P99:   us(h.ValueAtQuantile(99)),
		Max:   us(h.Max()),
	}
}

// Stats is a snapshot of a pool, from Pool.Stats.
type Stats struct {
	Tokens       int  // total tokens, all lanes
	LanesEnabled bool // false with Config.NoLanes (or Tokens < 2): one lane has every token
	Closed       bool
	Workers      int    // live worker goroutines (at most Tokens)
	IdleWorkers  int    // of which idle
	Nested       uint64 // calls refused with ErrNested
	Lanes        [NumLanes]LaneStats
	Keys         []KeyStats // the StatsKeys most recent routes plus up to StatsKeys slow ones; slow lane first, then by estimate
	KeysTotal    int        // routes the predictor knows (at most MaxKeys)
	KeysEvicted  uint64     // routes dropped by the LRU bound
}

// StatsKeys bounds the routes Stats reports: the StatsKeys most recently used ones plus up
// to StatsKeys others that are in the slow lane. A server has far fewer routes; the bound
// keeps the pool mutex held for a few microseconds even when MaxKeys routes are known.
const StatsKeys = 256

// LaneStats describes one lane. Counters are totals since New.
type LaneStats struct {
	Tokens    int // the lane's budget
	InUse     int // tokens held by running functions
	Waiting   int // calls queued for a token
	Started   uint64
	Completed uint64 // functions that returned (or panicked)
	Rejected  uint64 // ErrQueueFull
	Cancelled uint64 // callers that left while queued or running
	TimedOut  uint64 // calls whose Timeout passed
	Panicked  uint64
	Migrated  uint64 // queued calls moved here when their route changed lanes
	Wait      Dist   // admission to start (zero for calls that found a free token)
	Run       Dist   // start to return
}

// KeyStats is the predictor's state for one route.
type KeyStats struct {
	Key      string
	Estimate time.Duration // EWMA of run time, decayed to now
	Lane     Lane          // the lane the next call will use (LaneSlow even with lanes off)
	Seeded   bool          // matches Config.SlowKeys
	Calls    uint64
	Flips    uint64 // lane changes
	Midway   uint64 // promotions by mid-flight learning
}

// Stats returns a snapshot of the pool. The pool's mutex is held only while raw state is
// copied (a few microseconds: at most 2 x StatsKeys routes); quantiles, estimates and
// sorting are computed afterwards. Meant for a stats endpoint, not for every request.
// Any goroutine.
func (p *Pool) Stats() Stats {
	var snaps [NumLanes][2]*hdrhistogram.Snapshot
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
			Tokens: ls.tokens, InUse: ls.inUse, Waiting: ls.q.n,
			Started: ls.started, Completed: ls.completed, Rejected: ls.rejected,
			Cancelled: ls.cancelled, TimedOut: ls.timedOut, Panicked: ls.panicked,
			Migrated: ls.migratedIn,
		}
		snaps[i] = [2]*hdrhistogram.Snapshot{ls.wait.snapshot(), ls.run.snapshot()}
	}
	st.KeysTotal = len(p.pred.m)
	raw := make([]keyEntry, 0, 2*StatsKeys)
	add := func(e *keyEntry) {
		raw = append(raw, keyEntry{key: e.key, ewma: e.ewma, last: e.last, slow: e.slow,
			seeded: e.seeded, calls: e.calls, flips: e.flips, mid: e.mid})
	}
	p.pred.stamp++
	stamp := p.pred.stamp
	for e := p.pred.head; e != nil && len(raw) < StatsKeys; e = e.next {
		e.stamp = stamp
		add(e)
	}
	nslow := 0
	for e := range p.pred.slowSet {
		if nslow == StatsKeys {
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
		st.Lanes[i].Wait, st.Lanes[i].Run = distOf(snaps[i][0]), distOf(snaps[i][1])
	}
	st.Keys = make([]KeyStats, len(raw))
	for i := range raw {
		e := &raw[i]
		est := pr.estimate(e, now)
		lane := LaneFast
		if e.seeded || (e.slow && est >= pr.demote) {
			lane = LaneSlow
		}
		st.Keys[i] = KeyStats{Key: e.key, Estimate: time.Duration(est), Lane: lane, Seeded: e.seeded,
			Calls: e.calls, Flips: e.flips, Midway: e.mid}
	}
	slices.SortStableFunc(st.Keys, func(a, b KeyStats) int {
		return cmp.Or(cmp.Compare(b.Lane, a.Lane), cmp.Compare(b.Estimate, a.Estimate))
	})
	return st
}

// Key returns the stats of one route and whether the predictor knows it. Any goroutine.
func (s *Stats) Key(key string) (KeyStats, bool) {
	for _, k := range s.Keys {
		if k.Key == key {
			return k, true
		}
	}
	return KeyStats{}, false
}
