package loop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWSConfigValidateNamesTheField(t *testing.T) {
	for field, cfg := range map[string]WSConfig{
		"MaxMessageBytes": {MaxMessageBytes: -1},
		"MaxQueuedBytes":  {MaxQueuedBytes: -1},
		"PongTimeout":     {PongTimeout: -time.Second},
		"CloseTimeout":    {CloseTimeout: -time.Second},
	} {
		err := Config{WebSocket: cfg}.Validate()
		require.ErrorContains(t, err, "loop: Config.WebSocket."+field+" must not be negative")
	}
	require.NoError(t, Config{WebSocket: WSConfig{PingInterval: -1, StallTimeout: -1}}.Validate())
}

func TestWSConfigDefaults(t *testing.T) {
	got := Config{}.withDefaults().WebSocket
	require.Equal(t, WSConfig{
		MaxMessageBytes: DefaultWSMaxMessageBytes, MaxQueuedBytes: DefaultWSMaxQueuedBytes,
		PingInterval: DefaultWSPingInterval, PongTimeout: DefaultWSPongTimeout,
		StallTimeout: DefaultWSStallTimeout, CloseTimeout: DefaultWSCloseTimeout,
		SaturatedLag: DefaultWSSaturatedLag, SaturatedUtilisation: DefaultWSSaturatedUtilisation,
	}, got)
	// Negative (off) stays negative.
	got = Config{WebSocket: WSConfig{PingInterval: -1, StallTimeout: -1}}.withDefaults().WebSocket
	require.Equal(t, time.Duration(-1), got.PingInterval)
	require.Equal(t, time.Duration(-1), got.StallTimeout)
}

func TestWSConfigFromEnv(t *testing.T) {
	env := map[string]string{
		"BATON_WS_MAX_MESSAGE_BYTES":        "65536",
		"BATON_DEFAULT_WS_MAX_QUEUED_BYTES": "131072",
		"BATON_WS_PING_INTERVAL":            "-1s",
		"BATON_WS_STALL_TIMEOUT":            "3s",
	}
	cfg, err := fromLookup(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Equal(t, WSConfig{MaxMessageBytes: 65536, MaxQueuedBytes: 131072, PingInterval: -time.Second, StallTimeout: 3 * time.Second}, cfg.WebSocket)
	env = map[string]string{"BATON_WS_MAX_QUEUED_BYTES": "0"}
	_, err = fromLookup(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.ErrorContains(t, err, "BATON_WS_MAX_QUEUED_BYTES")
}
