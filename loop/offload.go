package loop

import (
	"context"
	"sort"

	"github.com/batonrt/baton/offload"
)

// NewGate returns a gate of the offload package (a named non-blocking semaphore for a hot
// endpoint: TryEnter answers "busy" at once) and registers it so the offload stats
// endpoint shows it. Safe for concurrent use.
func (s *Server) NewGate(name string, n, maxQueue int) *offload.Gate {
	g := offload.NewGate(name, n, maxQueue)
	s.gatesMu.Lock()
	s.gates = append(s.gates, g)
	s.gatesMu.Unlock()
	return g
}

// snapshotOffload reads the offload pool and the gates. Any goroutine.
func (s *Server) snapshotOffload() offload.Report {
	st := offload.Report{Pool: s.pool.Stats()}
	s.gatesMu.Lock()
	for _, g := range s.gates {
		st.Gates = append(st.Gates, g.Stats())
	}
	s.gatesMu.Unlock()
	sort.Slice(st.Gates, func(i, j int) bool { return st.Gates[i].Name < st.Gates[j].Name })
	return st
}

// closePool stops the offload pool after the loop has stopped, waiting for functions
// still running until ctx ends (their contexts are cancelled first).
func (s *Server) closePool(ctx context.Context) {
	if err := s.pool.Close(ctx); err != nil {
		s.log.Warn("loop: offloaded functions still running after the server stopped", "err", err)
	}
}
