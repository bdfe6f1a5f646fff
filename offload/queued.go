package offload

// Queued returns the calls waiting for a token now, all lanes together (the sum of
// LaneStats.Waiting, capped calls included). Unlike Stats it copies nothing and does not
// allocate: it is meant for a check polled often, such as a readiness probe. Any
// goroutine.
func (p *Pool) Queued() int {
	p.mu.Lock()
	n := 0
	for i := range p.lanes {
		n += p.lanes[i].q.n + p.lanes[i].held
	}
	p.mu.Unlock()
	return n
}
