package loop

import (
	"math"
	"time"

	"github.com/batonrt/baton/accounting"
)

// retryAfterMax caps the Retry-After advice: beyond a minute the estimate is noise and
// clients should back off on their own schedule.
const retryAfterMax = 60

// serviceWeight is how far one finished request moves the mean service time (EWMA alpha):
// the estimate follows a change of load within a few dozen requests.
const serviceWeight = 0.05

// verdict is admission's answer for a request.
type verdict uint8

const (
	admitNow     verdict = iota // run it: a slot was free (or there is no limit)
	admitQueued                 // it waits in the FIFO queue for a slot
	admitRefused                // the queue is full: answer 429 with Retry-After
)

// admission caps the request handlers in flight (Config.RequestConcurrency): past the cap
// requests wait in a FIFO queue of Config.MaxQueueLength, past that they are refused with
// 429 and a Retry-After estimated from the queue ahead and the measured service time of
// admitted requests. Exempt routes never pass through it. It reads no clock: callers pass
// the loop's readings, so tests drive it with a fake clock. Loop-confined.
type admission struct {
	limit      int // 0: no limit
	queueLimit int

	active int    // admitted requests holding a slot
	queue  []*Ctx // waiting for a slot, oldest first

	admitted uint64 // requests given a slot, at once or from the queue
	queued   uint64 // requests that had to wait in the queue
	refused  uint64 // requests answered 429

	// meanService is the exponentially weighted mean time from admission to finish of
	// admitted requests, in nanoseconds; 0 until the first one finishes. Time spent
	// waiting in the queue is not part of it, and idle periods do not move it.
	meanService float64

	// oldestAge is the age (since arrival) of the oldest request holding a slot, in
	// nanoseconds, as the server last measured it (Server.noteOldestRunning): it bounds the
	// advice below while active > 0. oldestAt and scannedAt cache that measurement.
	oldestAge, oldestAt, scannedAt int64
}

// oldestScanEvery bounds how often the server looks for the oldest running request (a pass
// over its connections) while refusing: a flood of refusals costs one pass per interval.
const oldestScanEvery = int64(50 * time.Millisecond)

func newAdmission(limit, queueLimit int) admission {
	return admission{limit: limit, queueLimit: queueLimit}
}

// enabled reports whether a limit is configured.
func (a *admission) enabled() bool { return a.limit > 0 }

// arrive decides for a new request c: run now (taking a slot), queue, or refuse.
func (a *admission) arrive(c *Ctx) verdict {
	if a.active < a.limit && len(a.queue) == 0 {
		a.active++
		a.admitted++
		return admitNow
	}
	if len(a.queue) >= a.queueLimit {
		a.refused++
		return admitRefused
	}
	a.queue = append(a.queue, c)
	a.queued++
	return admitQueued
}

// finish releases the slot of an admitted request that ran for service nanoseconds and
// returns the next queued request, now holding the slot, or nil.
func (a *admission) finish(service int64) *Ctx {
	a.active--
	if service > 0 {
		if a.meanService == 0 {
			a.meanService = float64(service)
		} else {
			a.meanService += serviceWeight * (float64(service) - a.meanService)
		}
	}
	return a.next()
}

// next hands a free slot to the oldest queued request, if any.
func (a *admission) next() *Ctx {
	if len(a.queue) == 0 || a.active >= a.limit {
		return nil
	}
	c := a.queue[0]
	copy(a.queue, a.queue[1:])
	a.queue[len(a.queue)-1] = nil
	a.queue = a.queue[:len(a.queue)-1]
	a.active++
	a.admitted++
	return c
}

// remove takes c out of the queue (its client left before it got a slot), reporting
// whether it was there.
func (a *admission) remove(c *Ctx) bool {
	for i, q := range a.queue {
		if q == c {
			copy(a.queue[i:], a.queue[i+1:])
			a.queue[len(a.queue)-1] = nil
			a.queue = a.queue[:len(a.queue)-1]
			return true
		}
	}
	return false
}

// retryAfter estimates, in whole seconds, when a refused client would find a slot: every
// request queued ahead of it, and itself, needs one service time on one of the limit slots.
// It is never below the age of the oldest running request: a client back sooner finds the
// same requests ahead of it, and a fresh server, with no service time measured yet, would
// otherwise advise 1 s while its slots are held far longer (issue 27). Clamped to
// [1, retryAfterMax].
func (a *admission) retryAfter() int {
	wait := 0.0
	if a.active > 0 {
		wait = float64(a.oldestAge) / float64(time.Second)
	}
	if a.meanService > 0 && a.limit > 0 {
		wait = max(wait, float64(len(a.queue)+1)*a.meanService/float64(a.limit)/float64(time.Second))
	}
	return int(min(max(math.Ceil(wait), 1), retryAfterMax))
}

// noteOldestRunning updates s.adm.oldestAge at loop clock now, looking for the oldest
// request holding a slot at most every oldestScanEvery. Loop-confined.
func (s *Server) noteOldestRunning(now int64) {
	a := &s.adm
	if a.scannedAt == 0 || now-a.scannedAt >= oldestScanEvery {
		a.scannedAt, a.oldestAt = now, 0
		for _, cs := range s.conns.all {
			if c := cs.ctx; c != nil && c.counted && (a.oldestAt == 0 || c.arrivedAt < a.oldestAt) {
				a.oldestAt = c.arrivedAt
			}
		}
	}
	a.oldestAge = 0
	if a.oldestAt != 0 && now > a.oldestAt {
		a.oldestAge = now - a.oldestAt
	}
}

func (a *admission) stats() accounting.AdmissionStats {
	return accounting.AdmissionStats{
		Limit: a.limit, QueueLimit: a.queueLimit, Active: a.active, Queued: len(a.queue),
		AdmittedTotal: a.admitted, QueuedTotal: a.queued, RefusedTotal: a.refused,
		MeanServiceSeconds: a.meanService / float64(time.Second), RetryAfterSeconds: a.retryAfter(),
	}
}
