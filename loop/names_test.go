package loop

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/scheduler"
)

// One name table per concept: the scheduler names park reasons and task states, accounting
// keeps the same names in the same order, and the loop maps one to the other by index.
func TestNameTablesAgree(t *testing.T) {
	require.EqualValues(t, scheduler.NumReasons, accounting.NumParkReasons)
	for r := scheduler.Reason(0); r < scheduler.NumReasons; r++ {
		require.Equal(t, r.String(), accounting.ParkReasonNames[r], "reason %d", r)
		require.Equal(t, r.String(), reasonName(r))
	}
	require.EqualValues(t, scheduler.Done+1, accounting.NumTaskStates)
	for st := scheduler.Ready; st <= scheduler.Done; st++ {
		require.Equal(t, st.String(), accounting.TaskStateNames[st], "state %d", st)
	}
}
