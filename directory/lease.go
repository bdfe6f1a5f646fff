package directory

import (
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
