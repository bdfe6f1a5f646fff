package invariants

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAssert(t *testing.T) {
	require.NotPanics(t, func() { Assert(true, "never %d", 1) })
	defer func() {
		v, ok := recover().(Violation)
		require.True(t, ok, "Assert panics with a Violation")
		assert.Equal(t, "invariant violated: room: Stats off the loop (loop 1)", v.Error())
	}()
	Assert(false, "room: Stats off the loop (loop %d)", 1)
}

// TestEnabledFollowsTheBuild: go test -race turns the checks on, a plain build leaves them
// off (raceEnabled comes from a file with the race build tag).
func TestEnabledFollowsTheBuild(t *testing.T) {
	if raceEnabled {
		assert.True(t, Enabled, "a race build runs the invariants checks")
	}
}
