package loop

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/scheduler"
)

// One name table per concept: the scheduler names park reasons and task states, and
// accounting's figures use the same names.
func TestNameTablesAgree(t *testing.T) {
	// Each scheduler reason's parked time lands in the ParkedByReason field whose JSON key
	// is the reason's name (the name TaskSample.ParkReason gives it), and in no other.
	require.Equal(t, int(scheduler.NumReasons), reflect.TypeFor[accounting.ParkedByReason]().NumField(),
		"a scheduler reason without its ParkedByReason field")
	for r := scheduler.Reason(0); r < scheduler.NumReasons; r++ {
		require.Equal(t, r.String(), reasonName(r))
		var st scheduler.Stats
		st.Parked[r] = time.Second
		var smp accounting.TaskSample
		fillFigures(&smp, &st)
		require.Equal(t, time.Second, smp.ParkedTotal(), "reason %s", r)
		b, err := json.Marshal(smp)
		require.NoError(t, err)
		var doc struct {
			By map[string]float64 `json:"parked_by_reason_seconds"`
		}
		require.NoError(t, json.Unmarshal(b, &doc))
		for name, v := range doc.By {
			if name == r.String() {
				require.Equal(t, 1.0, v, "reason %s", r)
			} else {
				require.Zero(t, v, "reason %s's time under %s", r, name)
			}
		}
		require.Contains(t, doc.By, r.String())
	}
	// The loop names a task's state with the scheduler's String: the words
	// accounting.TaskSample.State documents, and the loop's own for the states it sets.
	require.Equal(t, []string{"ready", sampleRunning, "parked", sampleDone},
		[]string{scheduler.Ready.String(), scheduler.Running.String(), scheduler.Parked.String(), scheduler.Done.String()})
}
