package recorder

import "github.com/batonrt/baton/accounting"

// Ring keeps copies of the most recently finished tasks, so a short request that was slow
// can still be seen after it ended. It stores TaskSample values (strings shared, not
// copied): filling a Slot and committing it never allocates. Loop-confined: call only from
// the loop goroutine.
type Ring struct {
	buf   []accounting.TaskSample
	next  int    // slot of the next sample
	total uint64 // samples ever added
}

// NewRing returns a ring holding the last n samples (defaultRingSize when n <= 0).
// Any goroutine (the ring then belongs to the loop).
func NewRing(n int) *Ring {
	if n <= 0 {
		n = defaultRingSize
	}
	return &Ring{buf: make([]accounting.TaskSample, n)}
}

// Slot returns the slot the next sample goes into, cleared, so a caller can fill it in
// place (no copy: on a busy loop the samples' cache lines are cold, and writing one sample
// instead of two copies is what matters). It is not part of Snapshot until Commit.
// Loop-confined.
func (r *Ring) Slot() *accounting.TaskSample {
	p := &r.buf[r.next]
	*p = accounting.TaskSample{}
	return p
}

// Commit adds the sample written into Slot. Loop-confined.
func (r *Ring) Commit() {
	r.next++
	if r.next == len(r.buf) {
		r.next = 0
	}
	r.total++
}

// held returns the number of samples held (at most the ring's size). Loop-confined.
func (r *Ring) held() int { return int(min(r.total, uint64(len(r.buf)))) }

// Total returns the number of samples ever added. Loop-confined.
func (r *Ring) Total() uint64 { return r.total }

// Snapshot returns copies of the samples held, newest first. It allocates. Loop-confined.
func (r *Ring) Snapshot() []accounting.TaskSample {
	n := r.held()
	out := make([]accounting.TaskSample, n)
	i := r.next
	for k := range n {
		i--
		if i < 0 {
			i = len(r.buf) - 1
		}
		out[k] = r.buf[i]
	}
	return out
}
