package loop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
)

// Tasks started by Every count in the loop's started/live counts, and end.
func TestEveryTasksAreCounted(t *testing.T) {
	ticked := make(chan struct{}, 1)
	var h *TaskHandle
	s, addr := startServer(t, Config{}, func(s *Server) {
		h = s.Loop(0).Every("tick", time.Millisecond, func(t *Task) {
			select {
			case ticked <- struct{}{}:
			default:
			}
		})
		s.HandleStats("/debug/baton")
	})
	<-ticked
	snap := make(chan accounting.LoopSnapshot, 1)
	require.NoError(t, s.Loop(0).Post(func() { snap <- s.snapshotLoop() }))
	before := <-snap
	require.GreaterOrEqual(t, before.LiveTasks(), int64(1))
	h.Stop()
	waitDone(t, "stopped Every", h.Done())
	require.NoError(t, s.Loop(0).Post(func() { snap <- s.snapshotLoop() }))
	after := <-snap
	require.Equal(t, before.LiveTasks()-1, after.LiveTasks())
	_, body := dial(t, addr).get("/debug/baton/tasks")
	require.NotContains(t, body, `"tick"`, "a stopped task is not live")
}
