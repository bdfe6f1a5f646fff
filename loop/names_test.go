package loop

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/scheduler"
)

// One name table per concept: the scheduler names park reasons and task states, accounting
// keeps the same names (park reasons in the same order: the loop maps them by index).
func TestNameTablesAgree(t *testing.T) {
	require.EqualValues(t, scheduler.NumReasons, accounting.NumParkReasons)
	for r := scheduler.Reason(0); r < scheduler.NumReasons; r++ {
		require.Equal(t, r.String(), accounting.ParkReasonNames[r], "reason %d", r)
		require.Equal(t, r.String(), reasonName(r))
	}
	// The loop names a task's state with the scheduler's String: accounting's constants
	// must spell the same words.
	require.Equal(t, []string{accounting.StateReady, accounting.StateRunning, accounting.StateParked, accounting.StateDone},
		[]string{scheduler.Ready.String(), scheduler.Running.String(), scheduler.Parked.String(), scheduler.Done.String()})
}
