package loop

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/batonrt/baton/offload"
	"github.com/batonrt/baton/scheduler"
)

// offloadCloseTimeout bounds how long ListenAndServe waits, after the loop stopped, for
// offloaded functions still running (their contexts are cancelled first).
const offloadCloseTimeout = 10 * time.Second

// Offload returns the server's offload pool, for offload.Do, offload.Copy and pool stats.
// Safe for concurrent use.
func (s *Server) Offload() *offload.Pool { return s.pool }

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

// OffloadKey names the request's route for the offload pool's lane predictor: its method
// and pattern, e.g. "GET /users/{id}". Part of offload.Caller.
func (c *Ctx) OffloadKey() string { return c.pattern }

// OffloadKey names a background task for the lane predictor. Part of offload.Caller.
func (t *Task) OffloadKey() string { return "background" }

// OffloadPool returns the server's pool. Part of offload.Caller.
func (t *Task) OffloadPool() *offload.Pool { return t.srv.pool }

// Suspend prepares one park of the task for the offload package (part of offload.Caller):
// resume may be called from any goroutine, park from the task itself. A task on the loop
// parks its coroutine and is woken through Post; a multi-thread handler blocks its
// goroutine.
func (t *Task) Suspend(why offload.Wait) (resume func(), park func() error) {
	reason := scheduler.ReasonOffload
	if why == offload.WaitToken {
		reason = scheduler.ReasonQueue
	}
	if t.g != nil {
		ch := make(chan struct{})
		var once sync.Once
		ctx := t.Context()
		return func() { once.Do(func() { close(ch) }) },
			func() error { return t.g.block(ctx, reason, 0, ch) }
	}
	wk := t.t.Waker()
	srv := t.srv
	return func() { _ = srv.Post(func() { wk.Wake() }) },
		func() error { return t.t.Park(reason) }
}

var (
	_ offload.Caller = (*Ctx)(nil)
	_ offload.Caller = (*Task)(nil)
)

// offloadStats is what the offload stats page shows.
type offloadStats struct {
	Pool  offload.Stats       `json:"pool"`
	Gates []offload.GateStats `json:"gates"`
}

func (s *Server) snapshotOffload() offloadStats {
	st := offloadStats{Pool: s.pool.Stats()}
	s.gatesMu.Lock()
	for _, g := range s.gates {
		st.Gates = append(st.Gates, g.Stats())
	}
	s.gatesMu.Unlock()
	sort.Slice(st.Gates, func(i, j int) bool { return st.Gates[i].Name < st.Gates[j].Name })
	return st
}

func renderOffload(st offloadStats) ([]byte, error) {
	return json.MarshalIndent(st, "", "  ")
}

// closePool stops the offload pool after the loop has stopped.
func (s *Server) closePool() {
	ctx, cancel := context.WithTimeout(context.Background(), offloadCloseTimeout)
	defer cancel()
	if err := s.pool.Close(ctx); err != nil {
		s.log.Warn("loop: offloaded functions still running after the server stopped", "err", err)
	}
}
