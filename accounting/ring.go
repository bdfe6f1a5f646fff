package accounting

// Ring keeps copies of the most recently finished tasks, so a short request that was slow
// can still be seen after it ended. It stores TaskSample values (strings shared, not
// copied): Add never allocates. Loop-confined: call only from the loop goroutine.
type Ring struct {
	buf   []TaskSample
	next  int    // slot of the next Add
	total uint64 // samples ever added
}

// NewRing returns a ring holding the last n samples (DefaultRingSize when n <= 0).
// Any goroutine (the ring then belongs to the loop).
func NewRing(n int) *Ring {
	if n <= 0 {
		n = DefaultRingSize
	}
	return &Ring{buf: make([]TaskSample, n)}
}

// Add stores a copy of *s, evicting the oldest sample when full. It does not allocate.
// Loop-confined.
func (r *Ring) Add(s *TaskSample) {
	*r.Slot() = *s
	r.Commit()
}

// Slot returns the slot the next sample goes into, cleared, so a caller can fill it in
// place (no copy: on a busy loop the samples' cache lines are cold, and writing one sample
// instead of two copies is what matters). It is not part of Snapshot until Commit.
// Loop-confined.
func (r *Ring) Slot() *TaskSample {
	p := &r.buf[r.next]
	*p = TaskSample{}
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

// Len returns the number of samples held (at most Cap). Loop-confined.
func (r *Ring) Len() int { return int(min(r.total, uint64(len(r.buf)))) }

// Cap returns the ring's capacity. Loop-confined.
func (r *Ring) Cap() int { return len(r.buf) }

// Total returns the number of samples ever added. Loop-confined.
func (r *Ring) Total() uint64 { return r.total }

// Snapshot returns copies of the samples held, newest first. It allocates. Loop-confined.
func (r *Ring) Snapshot() []TaskSample {
	n := r.Len()
	out := make([]TaskSample, n)
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
