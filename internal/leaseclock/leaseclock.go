// Package leaseclock keeps a directory node's lease by the local monotonic clock: the
// deadline a backend's grant and renewals set, checked by rooms before every tick. It is
// shared by package directory's embedded backend and by directory/etcd (a nested module of
// the same repository), and is not part of the API: a backend of another repository keeps
// its lease its own way.
package leaseclock

import (
	"sync/atomic"
	"time"
)

// Lease is a node's lease as a Clock knows it: field for field a directory.Lease, which
// converts from it (directory.Lease(c.Lease())). Plain data.
type Lease struct {
	ID       int64
	TTL      time.Duration
	Margin   time.Duration
	Deadline time.Time
	Expired  bool
}

// Clock keeps a node's lease deadline by the local monotonic clock, for directory
// backends (directory's embedded one and directory/etcd):
// Renewed after each grant or renewal, Expire when the backend reports the lease gone,
// Valid from rooms before each tick. Safe for concurrent use; Valid and Lease never block
// and do not allocate.
type Clock struct {
	id     int64
	margin time.Duration
	base   time.Time // the monotonic origin of deadline

	deadline atomic.Int64 // nanoseconds after base; only grows
	ttl      atomic.Int64 // the last TTL granted, nanoseconds
	expired  atomic.Bool
}

// New returns the clock of lease id, granted with ttl by a request sent at sent
// (so the backend's deadline is no earlier than sent+ttl), with the given safety margin.
// Any goroutine.
func New(id int64, sent time.Time, ttl, margin time.Duration) *Clock {
	c := &Clock{id: id, margin: margin, base: sent}
	c.deadline.Store(int64(ttl))
	c.ttl.Store(int64(ttl))
	return c
}

// Renewed records a renewal sent at sent that the backend granted ttl, and returns the
// deadline. The deadline never moves back: a late answer to an older renewal leaves it.
// Any goroutine.
func (c *Clock) Renewed(sent time.Time, ttl time.Duration) time.Time {
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
func (c *Clock) Expire() { c.expired.Store(true) }

// Deadline returns the lease's deadline (directory.Lease.Deadline). Any goroutine.
func (c *Clock) Deadline() time.Time {
	return c.base.Add(time.Duration(c.deadline.Load()))
}

// Valid reports whether the lease is valid now by the monotonic clock: not expired, and
// now before the deadline minus the margin. Any goroutine; called on every tick.
func (c *Clock) Valid() bool {
	return !c.expired.Load() && time.Since(c.base) < time.Duration(c.deadline.Load())-c.margin
}

// Lease returns the lease as this clock knows it, as a directory.Lease converts from it.
// Any goroutine.
func (c *Clock) Lease() Lease {
	return Lease{
		ID:       c.id,
		TTL:      time.Duration(c.ttl.Load()),
		Margin:   c.margin,
		Deadline: c.Deadline(),
		Expired:  c.expired.Load(),
	}
}
