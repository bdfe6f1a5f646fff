package loop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestFromEnvLayers(t *testing.T) {
	base := Config{RequestConcurrency: 7, MaxQueueLength: 3, HandlerTimeout: time.Second}
	cfg, err := fromLookup(base, envMap(map[string]string{
		"BATON_DEFAULT_REQUEST_CONCURRENCY": "100", // deployment default
		"BATON_REQUEST_CONCURRENCY":         "10",  // the application's own wins
		"BATON_DEFAULT_MAX_QUEUE_LENGTH":    "20",  // only the default: it applies
		"BATON_DEFAULT_USE_SINGLE_THREAD":   "true",
		"BATON_USE_SINGLE_THREAD":           "false",
		"BATON_IDLE_TIMEOUT":                "90s",
		"BATON_DEFAULT_MAX_BODY_BYTES":      "1024",
		"BATON_HANDLER_TIMEOUT":             " ", // empty counts as unset
		"BATON_DEFAULT_OS_CLOCK":            "on",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RequestConcurrency != 10 || cfg.MaxQueueLength != 20 || !cfg.MultiThread ||
		cfg.IdleTimeout != 90*time.Second || cfg.Limits.MaxBodyBytes != 1024 || cfg.HandlerTimeout != time.Second ||
		!cfg.OSClock {
		t.Fatalf("got %+v", cfg)
	}
	// Nothing set: the code's values stay.
	cfg, err = fromLookup(base, envMap(nil))
	if err != nil || cfg.RequestConcurrency != 7 || cfg.MaxQueueLength != 3 || cfg.MultiThread || cfg.OSClock {
		t.Fatalf("got %+v, %v", cfg, err)
	}
}

func TestFromEnvErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BATON_REQUEST_CONCURRENCY": "lots"}, `BATON_REQUEST_CONCURRENCY="lots": not an integer`},
		{map[string]string{"BATON_DEFAULT_MAX_QUEUE_LENGTH": "-1"}, `BATON_DEFAULT_MAX_QUEUE_LENGTH="-1": must be at least 0`},
		{map[string]string{"BATON_USE_SINGLE_THREAD": "maybe"}, `BATON_USE_SINGLE_THREAD="maybe": not a boolean`},
		{map[string]string{"BATON_IDLE_TIMEOUT": "10"}, `BATON_IDLE_TIMEOUT="10": not a duration`},
		{map[string]string{"BATON_HANDLER_TIMEOUT": "-1s"}, `BATON_HANDLER_TIMEOUT="-1s": must not be negative`},
		{map[string]string{"BATON_MAX_BODY_BYTES": "0"}, `BATON_MAX_BODY_BYTES="0": must be at least 1`},
		{map[string]string{"BATON_MAX_QUEUE_LENGTH": "5"}, `Config.MaxQueueLength (5) needs Config.RequestConcurrency`},
	} {
		_, err := fromLookup(Config{}, envMap(tc.env))
		if assert.Error(t, err, "%v", tc.env) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
}

func TestFromEnvReadsProcessEnvironment(t *testing.T) {
	t.Setenv("BATON_DEFAULT_REQUEST_CONCURRENCY", "42")
	cfg, err := FromEnv(Config{})
	require.NoError(t, err)
	require.Equal(t, 42, cfg.RequestConcurrency)
}

func TestFromEnvAddrAndPort(t *testing.T) {
	cfg, err := fromLookup(Config{}, envMap(map[string]string{"PORT": "9090"}))
	require.NoError(t, err)
	require.Equal(t, ":9090", cfg.Addr)
	cfg, err = fromLookup(Config{}, envMap(map[string]string{"PORT": "9090", "BATON_ADDR": "127.0.0.1:7070"}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:7070", cfg.Addr, "BATON_ADDR wins over PORT")
	cfg, err = fromLookup(Config{}, envMap(map[string]string{"BATON_DEFAULT_ADDR": "127.0.0.1:6060"}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:6060", cfg.Addr)
	_, err = fromLookup(Config{}, envMap(map[string]string{"PORT": "http"}))
	require.ErrorContains(t, err, `PORT="http": not a port number`)
}

// An application that declares it needs single-thread mode refuses an environment asking
// for multi-thread mode, naming the variable, instead of switching into data races.
func TestFromEnvRequireSingleThread(t *testing.T) {
	_, err := fromLookup(Config{RequireSingleThread: true}, envMap(map[string]string{"BATON_DEFAULT_USE_SINGLE_THREAD": "false"}))
	require.ErrorContains(t, err, "BATON_DEFAULT_USE_SINGLE_THREAD")
	require.ErrorContains(t, err, "RequireSingleThread")
	cfg, err := fromLookup(Config{RequireSingleThread: true}, envMap(map[string]string{"BATON_USE_SINGLE_THREAD": "true"}))
	require.NoError(t, err)
	require.False(t, cfg.MultiThread)
	require.ErrorContains(t, Config{RequireSingleThread: true, MultiThread: true}.Validate(), "Config.MultiThread")
}

// An application that relies on one loop (RequireSingleThread) refuses a shard count above
// 1 from the environment, naming the variable: shards run handlers in parallel, so its
// lock-free shared state would race (issue 27, item 7). One shard stays allowed.
func TestFromEnvRequireSingleThreadRefusesShards(t *testing.T) {
	for _, name := range []string{"BATON_SHARDS", "BATON_DEFAULT_SHARDS"} {
		_, err := fromLookup(Config{RequireSingleThread: true}, envMap(map[string]string{name: "2"}))
		require.Error(t, err, name)
		require.ErrorContains(t, err, name+`="2"`)
		require.ErrorContains(t, err, "RequireSingleThread")
	}
	cfg, err := fromLookup(Config{RequireSingleThread: true}, envMap(map[string]string{"BATON_SHARDS": "1"}))
	require.NoError(t, err)
	require.Equal(t, 1, cfg.Shards)
	cfg, err = fromLookup(Config{}, envMap(map[string]string{"BATON_SHARDS": "2"}))
	require.NoError(t, err, "without the declaration shards are the deployment's choice")
	require.Equal(t, 2, cfg.Shards)
	err = Config{RequireSingleThread: true, Shards: 2}.Validate()
	require.ErrorContains(t, err, "Config.Shards (2)")
	require.ErrorContains(t, err, "RequireSingleThread")
}

func TestConfigValidateDelegatesWithPrefix(t *testing.T) {
	err := Config{Limits: httpcodecConfigWithNegativeHeader()}.Validate()
	require.ErrorContains(t, err, "loop: Config.Limits.MaxHeaderBytes")
	require.ErrorContains(t, Config{StallThreshold: time.Microsecond}.Validate(), "Config.StallThreshold")
}

func httpcodecConfigWithNegativeHeader() (c httpcodec.Config) {
	c.MaxHeaderBytes = -1
	return c
}
