package offload

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
		msg   string // Error()
	}{
		{Config{Tokens: -1}, "Tokens", "offload: Config.Tokens (-1) must not be negative (0 means the default)"},
		{Config{SlowTokens: -2}, "SlowTokens", "offload: Config.SlowTokens (-2) must not be negative (0 means the default)"},
		{Config{Tokens: 8, SlowTokens: 9}, "SlowTokens",
			"offload: Config.SlowTokens (9) must be below Config.Tokens (8): the fast lane needs a token"},
		{Config{Tokens: 8, SlowTokens: 8}, "SlowTokens",
			"offload: Config.SlowTokens (8) must be below Config.Tokens (8): the fast lane needs a token"},
		{Config{SlowTokens: 64}, "SlowTokens",
			"offload: Config.SlowTokens (64) must be below Config.Tokens (64): the fast lane needs a token"},
		{Config{NoLanes: true, SlowTokens: 2}, "SlowTokens",
			"offload: Config.SlowTokens (2) is set but Config.NoLanes is true: there is no slow lane"},
		{Config{Tokens: 1, SlowTokens: 1}, "SlowTokens",
			"offload: Config.SlowTokens (1) is set but Config.Tokens (1) is below 2: there are no lanes"},
		{Config{DemoteBelow: 50 * time.Millisecond}, "DemoteBelow",
			"offload: Config.DemoteBelow (50ms) must be below Config.PromoteAfter (50ms)"},
		{Config{PromoteAfter: time.Millisecond, DemoteBelow: 2 * time.Millisecond}, "DemoteBelow",
			"offload: Config.DemoteBelow (2ms) must be below Config.PromoteAfter (1ms)"},
		{Config{MaxKeyShare: 1.5}, "MaxKeyShare",
			"offload: Config.MaxKeyShare (1.5) must be between 0 and 1 (0 means the default, 0.5)"},
		{Config{MaxKeyShare: math.NaN()}, "MaxKeyShare",
			"offload: Config.MaxKeyShare (NaN) must be between 0 and 1 (0 means the default, 0.5)"},
		{Config{MaxKeyShare: -0.1}, "MaxKeyShare",
			"offload: Config.MaxKeyShare (-0.1) must be between 0 and 1 (0 means the default, 0.5)"},
		{Config{IdleTimeout: -1}, "IdleTimeout", "offload: Config.IdleTimeout (-1ns) must not be negative (0 means the default)"},
		{Config{PromoteAfter: -1}, "PromoteAfter", "offload: Config.PromoteAfter (-1ns) must not be negative (0 means the default)"},
		{Config{DemoteBelow: -1}, "DemoteBelow", "offload: Config.DemoteBelow (-1ns) must not be negative (0 means the default)"},
		{Config{HalfLife: -1}, "HalfLife", "offload: Config.HalfLife (-1ns) must not be negative (0 means the default)"},
		{Config{MaxKeys: -1}, "MaxKeys", "offload: Config.MaxKeys (-1) must not be negative (0 means the default)"},
		{Config{DefaultTimeout: -1}, "DefaultTimeout", "offload: Config.DefaultTimeout (-1ns) must not be negative (0 means the default)"},
	} {
		err := tc.cfg.Validate()
		require.Error(t, err, "%+v", tc.cfg)
		assert.Equal(t, tc.msg, err.Error())
		var ce *ConfigError
		require.True(t, errors.As(err, &ce))
		assert.Equal(t, tc.field, ce.Field)
		assert.PanicsWithError(t, tc.msg, func() { New(tc.cfg) }, "New must panic with the Validate error")
	}
}

// ConfigError.Describe names every field under the caller's path (loop nests Config).
func TestConfigErrorDescribe(t *testing.T) {
	var ce *ConfigError
	require.True(t, errors.As(Config{Tokens: 8, SlowTokens: 9}.Validate(), &ce))
	assert.Equal(t, "Config.Offload.SlowTokens (9) must be below Config.Offload.Tokens (8): the fast lane needs a token",
		ce.Describe("Config.Offload."))
}

// Zero fields take their defaults; nothing given is changed.
func TestConfigDefaults(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Tokens: 1},                          // one token: no lanes
		{Tokens: 2, SlowTokens: 1},           // the smallest split
		{MaxWaiting: -1},                     // no queue
		{MaxKeyShare: 1},                     // no cap
		{PromoteAfter: 5 * time.Millisecond}, // the default DemoteBelow (10 ms) is not below: PromoteAfter/5
	} {
		require.NoError(t, cfg.Validate(), "%+v", cfg)
	}
	s, err := Config{PromoteAfter: 5 * time.Millisecond}.settings()
	require.NoError(t, err)
	assert.Equal(t, time.Millisecond, s.demote)

	p := New(Config{})
	st := p.Stats()
	assert.Equal(t, defaultTokens, st.Tokens)
	assert.Equal(t, defaultTokens/4, st.Lanes[laneSlow].Tokens)
	require.NoError(t, p.Close(context.Background()))
}

// A Hook without a pool or a Suspend is a bug in the Caller: Do says so at once.
func TestHookIncomplete(t *testing.T) {
	p := newPool(t, Config{})
	fn := func(context.Context) (int, error) { return 0, nil }
	assert.PanicsWithValue(t, "offload: Caller.OffloadHook returned a Hook with a nil Pool", func() {
		_, _ = Do(hookCaller{Hook{Suspend: NewGoCaller(context.Background(), p, "k").OffloadHook().Suspend}}, fn)
	})
	assert.PanicsWithValue(t, "offload: Caller.OffloadHook returned a Hook with a nil Suspend", func() {
		_, _ = Do(hookCaller{Hook{Pool: p}}, fn)
	})
}

// hookCaller is a Caller with a fixed hook.
type hookCaller struct{ h Hook }

func (c hookCaller) Context() context.Context { return context.Background() }
func (c hookCaller) OffloadHook() Hook        { return c.h }
