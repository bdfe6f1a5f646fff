package directory

import (
	"sync/atomic"
	"time"
)

// Lease is a node's local view of its lease (Directory.Lease).
type Lease struct {
	ID  int64         // the backend's lease ID
	TTL time.Duration // the TTL the backend granted
	// Margin is subtracted from Deadline in the validity check (Config.Margin).
	Margin time.Duration
	// Deadline is the earliest the backend may drop the lease, as far as this node knows:
	// when the last successful renewal (or the grant) was sent, plus TTL. It carries a
	// monotonic clock reading, so comparing it with time.Now() ignores wall clock jumps.
	Deadline time.Time
	// Expired is set once the backend said the lease is gone or the handle was closed.
	Expired bool
}

// ValidUntil is the end of the lease's validity for rooms: Deadline minus Margin. Any
// goroutine.
func (l Lease) ValidUntil() time.Time { return l.Deadline.Add(-l.Margin) }

// LeaseClock keeps a node's lease deadline by the local monotonic clock, for backends:
// Renewed after each grant or renewal, Expire when the backend reports the lease gone,
// Valid from rooms before each tick. Safe for concurrent use; Valid and Lease never block
// and do not allocate.
type LeaseClock struct {
	id     int64
	margin time.Duration
	base   time.Time // the monotonic origin of deadline

	deadline atomic.Int64 // nanoseconds after base; only grows
	ttl      atomic.Int64 // the last TTL granted, nanoseconds
	expired  atomic.Bool
}

// NewLeaseClock returns the clock of lease id, granted with ttl by a request sent at sent
// (so the backend's deadline is no earlier than sent+ttl), with the given safety margin.
// Any goroutine.
func NewLeaseClock(id int64, sent time.Time, ttl, margin time.Duration) *LeaseClock {
	c := &LeaseClock{id: id, margin: margin, base: sent}
	c.deadline.Store(int64(ttl))
	c.ttl.Store(int64(ttl))
	return c
}

// Renewed records a renewal sent at sent that the backend granted ttl, and returns the
// deadline. The deadline never moves back: a late answer to an older renewal leaves it.
// Any goroutine.
func (c *LeaseClock) Renewed(sent time.Time, ttl time.Duration) time.Time {
	d := int64(sent.Sub(c.base) + ttl)
	c.ttl.Store(int64(ttl))
	for {
		old := c.deadline.Load()
		if d <= old || c.deadline.CompareAndSwap(old, d) {
			break
		}
	}
	return c.Deadline()
}

// Expire marks the lease gone for good: Valid is false from now on. Any goroutine.
func (c *LeaseClock) Expire() { c.expired.Store(true) }

// Deadline returns the lease's deadline (Lease.Deadline). Any goroutine.
func (c *LeaseClock) Deadline() time.Time {
	return c.base.Add(time.Duration(c.deadline.Load()))
}

// Valid reports whether the lease is valid now by the monotonic clock: not expired, and
// now before the deadline minus the margin. Any goroutine; called on every tick.
func (c *LeaseClock) Valid() bool {
	return !c.expired.Load() && time.Since(c.base) < time.Duration(c.deadline.Load())-c.margin
}

// Lease returns the lease as this clock knows it. Any goroutine.
func (c *LeaseClock) Lease() Lease {
	return Lease{
		ID:       c.id,
		TTL:      time.Duration(c.ttl.Load()),
		Margin:   c.margin,
		Deadline: c.Deadline(),
		Expired:  c.expired.Load(),
	}
}
