package accounting

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{RecentWindow: time.Second, HistogramMax: time.Microsecond, HistogramDigits: MaxHistogramDigits, SlowSlice: time.Nanosecond}, ""},
		{Config{RecentWindow: -time.Second}, "accounting: Config.RecentWindow (-1s) must not be negative"},
		{Config{HistogramMax: -1}, "accounting: Config.HistogramMax (-1ns) must be 0 (default 1h0m0s) or at least 1µs"},
		{Config{HistogramMax: time.Nanosecond}, "accounting: Config.HistogramMax (1ns) must be 0 (default 1h0m0s) or at least 1µs"},
		{Config{HistogramDigits: -1}, "accounting: Config.HistogramDigits (-1) must be 0 (default 2) or 1 to 5"},
		{Config{HistogramDigits: 6}, "accounting: Config.HistogramDigits (6) must be 0 (default 2) or 1 to 5"},
		{Config{SlowSlice: -time.Microsecond}, "accounting: Config.SlowSlice (-1µs) must not be negative"},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" {
			assert.NoError(t, err, "%+v", tc.cfg)
			continue
		}
		assert.EqualError(t, err, tc.want)
		assert.PanicsWithError(t, tc.want, func() { NewRoutes(tc.cfg) }, "NewRoutes does not correct a field")
		assert.PanicsWithError(t, tc.want, func() { NewLoop(tc.cfg, epoch) }, "NewLoop does not correct a field")
	}
}

// TestTaskStateNames: the state table is in the scheduler's order (Ready, Running,
// Parked, Done) and spells the JSON names.
func TestTaskStateNames(t *testing.T) {
	assert.Equal(t, [NumTaskStates]string{"ready", "running", "parked", "done"}, TaskStateNames)
	assert.Equal(t, "queued", StateQueued)
}
