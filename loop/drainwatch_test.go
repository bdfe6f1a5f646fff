package loop

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// withoutDrainWatch makes s's drain watch unavailable, as it is off Linux (a watch already
// started that has no poller). Call it before the server starts.
func withoutDrainWatch(s *Server) { s.drains.started = true }

// Without a drain watch, a stream parked on backpressure is woken by its own park timeout
// (streamPoll) and finishes once the client reads, in both modes.
func TestDrainWatchUnavailableStream(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := streamBackpressure(t, m, withoutDrainWatch)
			var poller *drainPoller
			watched := -1
			inLoop(t, s, func() { poller, watched = s.drainPoll.Load(), len(s.drains.entries) })
			require.Nil(t, poller, "a drain poller was created")
			require.Zero(t, watched)
		})
	}
}
