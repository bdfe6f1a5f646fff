package recorder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/batonrt/baton/internal/hdr"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{RecentWindow: time.Second, HistogramMax: time.Microsecond, HistogramDigits: hdr.MaxDigits, SlowSlice: time.Nanosecond}, ""},
		{Config{RecentWindow: -time.Second}, "recorder: Config.RecentWindow (-1s) must not be negative"},
		{Config{HistogramMax: -1}, "recorder: Config.HistogramMax (-1ns) must be 0 (default 1h0m0s) or at least 1µs"},
		{Config{HistogramMax: time.Nanosecond}, "recorder: Config.HistogramMax (1ns) must be 0 (default 1h0m0s) or at least 1µs"},
		{Config{HistogramDigits: -1}, "recorder: Config.HistogramDigits (-1) must be 0 (default 2) or 1 to 5"},
		{Config{HistogramDigits: 6}, "recorder: Config.HistogramDigits (6) must be 0 (default 2) or 1 to 5"},
		{Config{SlowSlice: -time.Microsecond}, "recorder: Config.SlowSlice (-1µs) must not be negative"},
	} {
		err := tc.cfg.validate()
		if tc.want == "" {
			assert.NoError(t, err, "%+v", tc.cfg)
			continue
		}
		assert.EqualError(t, err, tc.want)
		assert.PanicsWithError(t, tc.want, func() { NewRoutes(tc.cfg) }, "NewRoutes does not correct a field")
		assert.PanicsWithError(t, tc.want, func() { NewLoop(tc.cfg, epoch) }, "NewLoop does not correct a field")
	}
}
