package recorder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/batonrt/baton/accounting"
)

// TestLoopWindow: Window gives the same figures as a Snapshot's utilisation windows, and
// clamps its length to whole seconds within the ring.
func TestLoopWindow(t *testing.T) {
	l := NewLoop(Config{Epoch: epoch}, epoch)
	for s := range int64(12) {
		l.Busy(s*sec, s*sec+sec/4)
	}
	now := at(12*time.Second + 1)
	snap := l.Snapshot(now)
	for i, w := range accounting.UtilisationWindows {
		assert.Equal(t, snap.Utilisation[i], l.Window(now, w), "window %v", w)
	}
	assert.InDelta(t, 0.25, l.Window(now, 10*time.Second).Utilisation(), 1e-9)
	assert.Equal(t, time.Second, l.Window(now, 0).Length, "at least a second")
	assert.Equal(t, 64*time.Second, l.Window(now, time.Hour).Length, "at most the ring")
}
