package ws

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidateNamesTheField(t *testing.T) {
	for field, cfg := range map[string]Config{
		"MaxMessageBytes": {MaxMessageBytes: -1},
		"MaxQueuedBytes":  {MaxQueuedBytes: -1},
		"PongTimeout":     {PongTimeout: -time.Second},
		"CloseTimeout":    {CloseTimeout: -time.Second},
	} {
		require.ErrorContains(t, cfg.Validate(), "ws: Config."+field+" must not be negative", field)
	}
	require.ErrorContains(t, Config{SaturatedUtilisation: 1.5}.Validate(), "ws: Config.SaturatedUtilisation must be at most 1, got 1.5")
	require.NoError(t, Config{PingInterval: -1, StallTimeout: -1}.Validate())
}

func TestConfigDefaults(t *testing.T) {
	got := limitsOf(&Config{})
	assert.Equal(t, limits{maxMessage: 1 << 20, maxQueued: 256 << 10, pingInterval: 30 * time.Second,
		pongTimeout: 15 * time.Second, stall: 10 * time.Second, closeAfter: 2 * time.Second,
		satLag: 100 * time.Millisecond, satUtil: 0.95, compressThreshold: 128}, got)
	assert.Equal(t, 500*time.Millisecond, got.sweepEvery(), "the defaults need no sweep finer than the loop's")
	// Negative (off) stays negative.
	got = limitsOf(&Config{PingInterval: -1, StallTimeout: -1})
	assert.Equal(t, time.Duration(-1), got.pingInterval)
	assert.Equal(t, time.Duration(-1), got.stall)
	assert.Equal(t, 0, limitsOf(&Config{CompressionThreshold: -1}).compressThreshold, "negative: every message")
	fine := limitsOf(&Config{PingInterval: 20 * time.Millisecond})
	assert.Equal(t, 10*time.Millisecond, fine.sweepEvery(), "a quarter of the shortest timeout, at least 10 ms")
}
