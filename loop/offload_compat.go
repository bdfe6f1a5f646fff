package loop

import "github.com/batonrt/baton/offload"

// OffloadKey names the task for the offload pool's lane predictor. Part of offload.Caller.
func (t *Task) OffloadKey() string { return t.offloadKey() }

// OffloadPool returns the server's pool. Part of offload.Caller.
func (t *Task) OffloadPool() *offload.Pool { return t.srv.pool }

// Suspend prepares one park of the task for the offload package. Part of offload.Caller.
func (t *Task) Suspend(why offload.Wait) (resume func(), park func() error) { return t.suspend(why) }
