package loop

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by FromEnv. Each BATON_X falls back to BATON_DEFAULT_X: the
// deployment sets server-wide defaults in BATON_DEFAULT_*, and an application overrides
// them for itself in BATON_*. A variable that is set wins over the value passed in (the
// code's own default); an empty variable counts as unset.
const (
	EnvRequestConcurrency = "REQUEST_CONCURRENCY" // Config.RequestConcurrency, integer >= 0 (0: no limit)
	EnvMaxQueueLength     = "MAX_QUEUE_LENGTH"    // Config.MaxQueueLength, integer >= 0
	EnvUseSingleThread    = "USE_SINGLE_THREAD"   // !Config.MultiThread: true or false (also 1/0, yes/no, on/off)
	EnvLockOSThread       = "LOCK_OS_THREAD"      // Config.LockOSThread, boolean
	EnvReadHeaderTimeout  = "READ_HEADER_TIMEOUT" // Config.ReadHeaderTimeout, Go duration ("10s"); negative: none
	EnvIdleTimeout        = "IDLE_TIMEOUT"        // Config.IdleTimeout, duration
	EnvHandlerTimeout     = "HANDLER_TIMEOUT"     // Config.HandlerTimeout, duration >= 0 (0: none)
	EnvWriteStallTimeout  = "WRITE_STALL_TIMEOUT" // Config.WriteStallTimeout, duration
	EnvMaxBodyBytes       = "MAX_BODY_BYTES"      // Config.Limits.MaxBodyBytes, integer > 0
	EnvMaxHeaderBytes     = "MAX_HEADER_BYTES"    // Config.Limits.MaxHeaderBytes, integer > 0
	EnvMaxOutputBytes     = "MAX_OUTPUT_BYTES"    // Config.MaxOutputBytes, integer > 0
	EnvMaxBufferedInput   = "MAX_BUFFERED_INPUT"  // Config.MaxBufferedInput, integer > 0
	EnvOffloadTokens      = "OFFLOAD_TOKENS"      // Config.Offload.Tokens, integer > 0
	EnvOffloadSlowTokens  = "OFFLOAD_SLOW_TOKENS" // Config.Offload.SlowTokens, integer > 0
	EnvOffloadLanes       = "OFFLOAD_LANES"       // !Config.Offload.NoLanes, boolean
	EnvStallThreshold     = "STALL_THRESHOLD"     // Config.StallThreshold, duration; negative: off
	EnvAccounting         = "ACCOUNTING"          // !Config.NoAccounting, boolean
	EnvOSClock            = "OS_CLOCK"            // Config.OSClock, boolean
)

// envPrefix and envDefaultPrefix name the two layers.
const (
	envPrefix        = "BATON_"
	envDefaultPrefix = "BATON_DEFAULT_"
)

// FromEnv returns cfg with every setting given in the environment applied (see the Env*
// constants: BATON_X, else BATON_DEFAULT_X, else cfg's own value), then validated. A value
// that does not parse or is out of range is an error naming the variable; it is never
// silently replaced. Safe for concurrent use.
func FromEnv(cfg Config) (Config, error) {
	return fromLookup(cfg, os.LookupEnv)
}

func fromLookup(cfg Config, lookup func(string) (string, bool)) (Config, error) {
	e := envReader{lookup: lookup}
	e.int(EnvRequestConcurrency, 0, &cfg.RequestConcurrency)
	e.int(EnvMaxQueueLength, 0, &cfg.MaxQueueLength)
	var single bool
	if e.bool(EnvUseSingleThread, &single) {
		cfg.MultiThread = !single
	}
	e.bool(EnvLockOSThread, &cfg.LockOSThread)
	e.duration(EnvReadHeaderTimeout, true, &cfg.ReadHeaderTimeout)
	e.duration(EnvIdleTimeout, true, &cfg.IdleTimeout)
	e.duration(EnvHandlerTimeout, false, &cfg.HandlerTimeout)
	e.duration(EnvWriteStallTimeout, true, &cfg.WriteStallTimeout)
	var maxBody int
	if e.int(EnvMaxBodyBytes, 1, &maxBody) {
		cfg.Limits.MaxBodyBytes = int64(maxBody)
	}
	e.int(EnvMaxHeaderBytes, 1, &cfg.Limits.MaxHeaderBytes)
	e.int(EnvMaxOutputBytes, 1, &cfg.MaxOutputBytes)
	e.int(EnvMaxBufferedInput, 1, &cfg.MaxBufferedInput)
	e.int(EnvOffloadTokens, 1, &cfg.Offload.Tokens)
	e.int(EnvOffloadSlowTokens, 1, &cfg.Offload.SlowTokens)
	var lanes bool
	if e.bool(EnvOffloadLanes, &lanes) {
		cfg.Offload.NoLanes = !lanes
	}
	e.duration(EnvStallThreshold, true, &cfg.StallThreshold)
	var acct bool
	if e.bool(EnvAccounting, &acct) {
		cfg.NoAccounting = !acct
	}
	e.bool(EnvOSClock, &cfg.OSClock)
	if e.err != nil {
		return cfg, e.err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w (after applying the environment)", err)
	}
	return cfg, nil
}

// envReader reads the two-layer variables and keeps the first error.
type envReader struct {
	lookup func(string) (string, bool)
	err    error
}

// get returns the value of BATON_name, else BATON_DEFAULT_name, and the variable it came from.
func (e *envReader) get(name string) (value, from string, ok bool) {
	for _, p := range []string{envPrefix, envDefaultPrefix} {
		if v, set := e.lookup(p + name); set && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v), p + name, true
		}
	}
	return "", "", false
}

func (e *envReader) fail(from, v, why string) {
	if e.err == nil {
		e.err = fmt.Errorf("loop: %s=%q: %s", from, v, why)
	}
}

func (e *envReader) int(name string, minimum int, dst *int) bool {
	v, from, ok := e.get(name)
	if !ok {
		return false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.fail(from, v, "not an integer")
		return false
	}
	if n < minimum {
		e.fail(from, v, fmt.Sprintf("must be at least %d", minimum))
		return false
	}
	*dst = n
	return true
}

func (e *envReader) bool(name string, dst *bool) bool {
	v, from, ok := e.get(name)
	if !ok {
		return false
	}
	switch strings.ToLower(v) {
	case "1", "t", "true", "yes", "y", "on":
		*dst = true
	case "0", "f", "false", "no", "n", "off":
		*dst = false
	default:
		e.fail(from, v, "not a boolean (true/false, 1/0, yes/no, on/off)")
		return false
	}
	return true
}

func (e *envReader) duration(name string, negativeOK bool, dst *time.Duration) bool {
	v, from, ok := e.get(name)
	if !ok {
		return false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.fail(from, v, "not a duration (e.g. 500ms, 10s, 2m)")
		return false
	}
	if d < 0 && !negativeOK {
		e.fail(from, v, "must not be negative")
		return false
	}
	*dst = d
	return true
}
