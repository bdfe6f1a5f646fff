package loop

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStallLogSaysWhatTellsTheCause (issue 27, item 21): without Config.LockOSThread the
// stall log said cause=unknown and nothing more. Its lines now say what it would take to
// tell a task holding the loop from a thread the machine did not run: the loop locked to
// its OS thread, so that the thread's CPU time can be read.
func TestStallLogSaysWhatTellsTheCause(t *testing.T) {
	var logs syncBuffer
	_, addr := startServer(t, Config{StallThreshold: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(s *Server) {
		s.Handle("GET /spin", func(c *Ctx) {
			spinFor(150 * time.Millisecond)
			c.String(200, "spun")
		})
	})
	resp, _ := dial(t, addr).get("/spin")
	mustStatus(t, resp, 200)
	var warn, end string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			switch {
			case strings.Contains(l, "a task is holding the loop"):
				warn = l
			case strings.Contains(l, "a stalled task gave the loop back"):
				end = l
			}
		}
		return warn != "" && end != ""
	}, 10*time.Second, 5*time.Millisecond)
	for _, l := range []string{warn, end} {
		assert.Contains(t, l, "cause=unknown")
		assert.Contains(t, l, "cause_needs=")
		assert.Contains(t, l, "LockOSThread")
		assert.Contains(t, l, "BATON_LOCK_OS_THREAD")
	}
}
