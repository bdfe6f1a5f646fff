package offload

import (
	"math"
	"strings"
	"time"
)

// keyEntry is the predictor's state for one route key. Guarded by Pool.mu.
type keyEntry struct {
	key    string
	ewma   float64   // estimated run time in ns, as of last
	last   time.Time // time of the last update of ewma
	slow   bool      // current lane (with hysteresis)
	seeded bool      // matches Config.SlowKeys: always slow
	dead   bool      // evicted from the LRU
	calls  uint64
	flips  uint64
	mid    uint64 // promotions by mid-flight learning
	stamp  uint64 // Stats: already reported in this snapshot

	// Per-key cap (Config.MaxKeyShare).
	inUse       [numLanes]int      // running calls of the key, per lane
	held        [numLanes]callList // calls waiting because the key holds its cap, per lane
	cappedWaits uint64             // calls that waited at the cap

	prev, next *keyEntry // LRU list, most recent first
}

// predictor chooses a lane per route key. All methods need Pool.mu.
type predictor struct {
	max        int
	m          map[string]*keyEntry
	head, tail *keyEntry
	exact      map[string]bool
	prefixes   []string
	promote    float64 // ns
	demote     float64 // ns
	halfLife   float64 // ns
	evicted    uint64
	slowSet    map[*keyEntry]struct{} // entries with slow set (for Stats)
	stamp      uint64                 // Stats snapshots taken
}

func (pr *predictor) init(maxKeys int, promote, demote, halfLife time.Duration, seeds []string) {
	pr.max = maxKeys
	pr.m = make(map[string]*keyEntry)
	pr.slowSet = make(map[*keyEntry]struct{})
	pr.exact = make(map[string]bool)
	pr.promote, pr.demote, pr.halfLife = float64(promote), float64(demote), float64(halfLife)
	for _, s := range seeds {
		if p, ok := strings.CutSuffix(s, "*"); ok {
			pr.prefixes = append(pr.prefixes, p)
		} else {
			pr.exact[s] = true
		}
	}
}

func (pr *predictor) seeded(key string) bool {
	if pr.exact[key] {
		return true
	}
	for _, p := range pr.prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// get returns key's entry, creating it (fast, or slow if seeded) and evicting the least
// recently used entry beyond the bound; it marks the entry most recently used.
func (pr *predictor) get(key string, now time.Time) *keyEntry {
	e := pr.m[key]
	if e != nil {
		if pr.head != e {
			pr.unlink(e)
			pr.pushFront(e)
		}
		return e
	}
	e = &keyEntry{key: key, last: now, seeded: pr.seeded(key)}
	if e.seeded {
		e.slow = true
		pr.slowSet[e] = struct{}{}
	}
	pr.m[key] = e
	pr.pushFront(e)
	// Busy entries are moved to the front instead (they are in use); if every entry is
	// busy the map exceeds the bound until calls finish (at most one entry per call).
	for tries := len(pr.m); len(pr.m) > pr.max && tries > 0; tries-- {
		old := pr.tail
		pr.unlink(old)
		if old.busy() {
			pr.pushFront(old)
			continue
		}
		delete(pr.m, old.key)
		delete(pr.slowSet, old)
		old.dead = true
		pr.evicted++
	}
	return e
}

// busy reports whether calls of e are running or held: such an entry is not evicted,
// because its counts keep the key's cap.
func (e *keyEntry) busy() bool {
	return e.heldN() > 0 || e.inUse != [numLanes]int{}
}

// heldN is the number of calls held at the cap, all lanes.
func (e *keyEntry) heldN() int {
	n := 0
	for i := range e.held {
		n += e.held[i].n
	}
	return n
}

func (pr *predictor) pushFront(e *keyEntry) {
	e.prev, e.next = nil, pr.head
	if pr.head != nil {
		pr.head.prev = e
	} else {
		pr.tail = e
	}
	pr.head = e
}

func (pr *predictor) unlink(e *keyEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		pr.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		pr.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// estimate returns e's estimate at now: the EWMA decayed towards zero (an unknown route)
// with the half-life since its last update.
func (pr *predictor) estimate(e *keyEntry, now time.Time) float64 {
	dt := float64(now.Sub(e.last))
	if dt <= 0 || e.ewma == 0 {
		return e.ewma
	}
	return e.ewma * math.Exp2(-dt/pr.halfLife)
}

// slowLocked returns whether e's route should use the slow lane now, applying decay and
// the demote threshold first.
func (pr *predictor) slowLocked(p *Pool, e *keyEntry, now time.Time, rs *resumes) bool {
	if e.slow && !e.seeded && pr.estimate(e, now) < pr.demote {
		pr.setSlow(p, e, false, now, rs)
	}
	return e.slow
}

// observeLocked feeds one run time d of e's route into its estimate and moves the route
// between lanes when the estimate crosses a threshold (hysteresis: promote above
// PromoteAfter, demote below DemoteBelow). A censored sample (the call was cancelled, so
// it would have run longer) counts only if it raises the estimate.
func (pr *predictor) observeLocked(p *Pool, e *keyEntry, now time.Time, d time.Duration, censored bool, rs *resumes) {
	if e == nil || e.dead {
		return
	}
	est := pr.estimate(e, now)
	if censored && float64(d) <= est {
		return
	}
	e.ewma = est + sampleWeight*(float64(d)-est)
	e.last = now
	switch {
	case e.seeded:
	case !e.slow && e.ewma > pr.promote:
		pr.setSlow(p, e, true, now, rs)
	case e.slow && e.ewma < pr.demote:
		pr.setSlow(p, e, false, now, rs)
	}
}

// promoteLocked is mid-flight learning: a call of e's route has been running for elapsed
// (at least PromoteAfter), so the route is slow now, before the call returns.
func (pr *predictor) promoteLocked(p *Pool, e *keyEntry, now time.Time, elapsed time.Duration, rs *resumes) {
	if e == nil || e.dead || e.slow {
		return
	}
	e.ewma = max(pr.estimate(e, now), float64(elapsed), pr.promote)
	e.last = now
	e.mid++
	pr.setSlow(p, e, true, now, rs)
}

// setSlow moves e's route to the slow (or fast) lane. Calls of the route still waiting in
// the other lane's queue move with it (to the back of the new lane's queue), and the new
// lane starts what its free tokens allow. Calls already running keep their token.
func (pr *predictor) setSlow(p *Pool, e *keyEntry, slow bool, now time.Time, rs *resumes) {
	if e.slow == slow {
		return
	}
	e.slow = slow
	e.flips++
	if slow {
		pr.slowSet[e] = struct{}{}
	} else {
		delete(pr.slowSet, e)
	}
	if !p.lanesOn {
		return
	}
	from, to := laneFast, laneSlow
	if !slow {
		from, to = laneSlow, laneFast
	}
	src, dst := &p.lanes[from], &p.lanes[to]
	moved := false
	for cl := e.held[from].head; cl != nil; {
		next := cl.next
		p.unholdLocked(cl)
		cl.lane = to
		dst.q.insert(cl)
		dst.migratedIn++
		moved = true
		cl = next
	}
	for cl := src.q.head; cl != nil; {
		next := cl.next
		if cl.key == e || cl.keyStr == e.key {
			src.q.remove(cl)
			cl.lane = to
			dst.q.push(cl)
			dst.migratedIn++
			moved = true
		}
		cl = next
	}
	if moved {
		p.pumpLocked(to, now, rs)
	}
}
