package loop

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/scheduler"
)

// lagSampleEvery is how often a loop samples its own lag: a timer due every 100 ms and how
// late it runs (Vitals.Lag). Ten timer callbacks a second cost the loop microseconds; a
// hog of a few tens of milliseconds is caught within a second.
const lagSampleEvery = 100 * time.Millisecond

// utilisationWindow is the window of Vitals.Utilisation: ten complete seconds, so that one
// busy second (a burst, a collection) does not swing it.
const utilisationWindow = 10 * time.Second

// Vitals returns what the loop publishes about itself now. It never waits for the loop.
// Any goroutine.
func (l *Loop) Vitals() accounting.Vitals {
	s := l.srv
	v := accounting.Vitals{Utilisation: -1, OffloadQueued: s.pool.Queued(), LagSampleEvery: lagSampleEvery, UtilisationWindow: utilisationWindow}
	v.Phase = l.Phase()
	v.Overdue = s.lag.overdue(s.nanotimeAny())
	v.Lag = max(time.Duration(s.lag.lag.Load()), v.Overdue)
	v.LagHeld = time.Duration(s.lag.held.Load())
	if u := math.Float64frombits(s.lag.util.Load()); !math.IsNaN(u) {
		v.Utilisation = u
	}
	if id, elapsed, running := s.sched.Running(); running {
		name, _ := s.acct.current.Describe(id)
		// The name is this task's only if its slice still runs after Describe: the loop
		// cannot publish another while stuck. Otherwise the slice ended meanwhile and the
		// loop turned.
		if id2, el2, ok2 := s.sched.Running(); ok2 && id2 == id && el2 >= elapsed {
			v.Running, v.Task, v.TaskID, v.SliceFor = true, name, id, el2
		}
	}
	return v
}

// lagSampler measures the loop's lag for Vitals: a timer due every lagSampleEvery records
// how late it ran, and the loop's utilisation, and publishes both.
type lagSampler struct {
	// Safe for concurrent use.
	due  atomic.Int64  // loop clock when the next sample is due; 0 before the first
	lag  atomic.Int64  // largest sample lateness over the current and the previous second, ns
	held atomic.Int64  // the lateness both seconds reached (LagHeld), ns
	util atomic.Uint64 // math.Float64bits of the utilisation over utilisationWindow; NaN when unmeasured

	// Loop-owned.
	timer    *scheduler.Timer
	fn       func()
	dueAt    int64
	winStart int64 // the current lag second's start
	curMax   int64
	prevMax  int64
}

// initLag prepares the sampler. Called by New.
func (s *Server) initLag() {
	s.lag.util.Store(math.Float64bits(math.NaN()))
	s.lag.fn = s.lagSample
}

// startLag starts the loop's lag sampler. Loop-confined (called once the loop runs).
func (s *Server) startLag() {
	h := &s.lag
	now := s.nanotime()
	h.winStart = now
	h.dueAt = now + int64(lagSampleEvery)
	h.due.Store(h.dueAt)
	h.timer = s.sched.AfterFunc(lagSampleEvery, h.fn)
}

// lagSample runs on the loop every lagSampleEvery: it records how late it ran and the
// loop's utilisation, and publishes both. Loop-confined.
func (s *Server) lagSample() {
	h := &s.lag
	now := s.nanotime()
	late := max(now-h.dueAt, 0)
	if now-h.winStart >= int64(time.Second) {
		h.prevMax, h.curMax, h.winStart = h.curMax, 0, now
	}
	h.curMax = max(h.curMax, late)
	h.lag.Store(max(h.curMax, h.prevMax))
	if now-h.winStart < int64(3*lagSampleEvery) {
		h.held.Store(h.prevMax) // this second is too young to tell: the previous one's
	} else {
		h.held.Store(min(h.curMax, h.prevMax))
	}
	if s.acct.on {
		w := s.acct.loop.Window(s.timeAt(now), utilisationWindow)
		u := math.NaN()
		if w.Elapsed > 0 {
			u = w.Utilisation()
		}
		h.util.Store(math.Float64bits(u))
	}
	if s.life.load() < stateStopping {
		h.dueAt = now + int64(lagSampleEvery)
		h.due.Store(h.dueAt)
		h.timer.Reset(lagSampleEvery)
	}
}

// overdue is how late the next lag sample is at now (any clock reading on the loop's
// clock): 0 when it is not due yet or the sampler does not run. Any goroutine.
func (h *lagSampler) overdue(now int64) time.Duration {
	due := h.due.Load()
	if due == 0 {
		return 0
	}
	return time.Duration(max(now-due, 0))
}
