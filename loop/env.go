package loop

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// envPrefix and envDefaultPrefix name the two layers.
const (
	envPrefix        = "BATON_"
	envDefaultPrefix = "BATON_DEFAULT_"
)

// FromEnv returns cfg with every setting given in the environment applied, then
// validated. Each setting X is read from BATON_X, else BATON_DEFAULT_X (the deployment sets
// server-wide defaults in BATON_DEFAULT_*, an application overrides them in BATON_*), else
// cfg keeps its own value; an empty variable counts as unset. A value that does not parse
// or is out of range is an error naming the variable; it is never silently replaced.
//
//	variable                   Config field                 value
//	BATON_ADDR (then PORT)     Addr                         host:port; PORT=n means ":n" (all interfaces), as platforms set it
//	BATON_REQUEST_CONCURRENCY  RequestConcurrency           integer >= 0 (0: no limit)
//	BATON_MAX_QUEUE_LENGTH     MaxQueueLength               integer >= 0
//	BATON_USE_SINGLE_THREAD    !MultiThread                 boolean; false with Config.RequireSingleThread is an error
//	BATON_LOCK_OS_THREAD       LockOSThread                 boolean
//	BATON_SHARDS               Shards                       integer 1..256; above 1 with Config.RequireSingleThread is an error
//	BATON_TRUSTED_PROXIES      TrustedProxies               comma-separated addresses or CIDR prefixes
//	BATON_READ_HEADER_TIMEOUT  ReadHeaderTimeout            duration ("10s"); negative: none
//	BATON_IDLE_TIMEOUT         IdleTimeout                  duration; negative: none
//	BATON_HANDLER_TIMEOUT      HandlerTimeout               duration >= 0 (0: none)
//	BATON_WRITE_STALL_TIMEOUT  WriteStallTimeout            duration; negative: never
//	BATON_MAX_BODY_BYTES       Limits.MaxBodyBytes          integer > 0
//	BATON_MAX_HEADER_BYTES     Limits.MaxHeaderBytes        integer > 0 (the request-line limit follows a smaller one down)
//	BATON_MAX_OUTPUT_BYTES     MaxOutputBytes               integer > 0
//	BATON_MAX_BUFFERED_INPUT   MaxBufferedInput             integer > 0
//	BATON_OFFLOAD_TOKENS       Offload.Tokens               integer > 0
//	BATON_OFFLOAD_SLOW_TOKENS  Offload.SlowTokens           integer > 0
//	BATON_OFFLOAD_LANES        !Offload.NoLanes             boolean
//	BATON_STALL_THRESHOLD      StallThreshold               duration; negative: detector off
//	BATON_ACCOUNTING           !NoAccounting                boolean
//	BATON_OS_CLOCK             OSClock                      boolean
//
// Booleans are true/false, 1/0, yes/no or on/off; durations are Go durations (500ms, 2m).
// The BATON_DEFAULT_ form exists for every variable but PORT. Safe for concurrent use.
func FromEnv(cfg Config) (Config, error) {
	return fromLookup(cfg, os.LookupEnv)
}

func fromLookup(cfg Config, lookup func(string) (string, bool)) (Config, error) {
	e := envReader{lookup: lookup}
	if v, _, ok := e.get("ADDR"); ok {
		cfg.Addr = v
	} else if v, ok := lookup("PORT"); ok && strings.TrimSpace(v) != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n < 0 || n > 65535 {
			e.fail("PORT", v, "not a port number")
		} else {
			cfg.Addr = ":" + strconv.Itoa(n)
		}
	}
	e.int("REQUEST_CONCURRENCY", 0, &cfg.RequestConcurrency)
	e.int("MAX_QUEUE_LENGTH", 0, &cfg.MaxQueueLength)
	var single bool
	if from, ok := e.bool("USE_SINGLE_THREAD", &single); ok {
		if !single && cfg.RequireSingleThread {
			e.fail(from, "false", "this application requires single-thread mode (Config.RequireSingleThread): its handlers share state without locks")
		}
		cfg.MultiThread = !single
	}
	e.bool("LOCK_OS_THREAD", &cfg.LockOSThread)
	if e.int("SHARDS", 1, &cfg.Shards) && cfg.Shards > 1 && cfg.RequireSingleThread {
		_, from, _ := e.get("SHARDS")
		e.fail(from, strconv.Itoa(cfg.Shards), "this application requires one loop (Config.RequireSingleThread): its handlers share state without locks, and shards would run them in parallel")
	}
	e.prefixes("TRUSTED_PROXIES", &cfg.TrustedProxies)
	e.duration("READ_HEADER_TIMEOUT", true, &cfg.ReadHeaderTimeout)
	e.duration("IDLE_TIMEOUT", true, &cfg.IdleTimeout)
	e.duration("HANDLER_TIMEOUT", false, &cfg.HandlerTimeout)
	e.duration("WRITE_STALL_TIMEOUT", true, &cfg.WriteStallTimeout)
	var maxBody int
	if e.int("MAX_BODY_BYTES", 1, &maxBody) {
		cfg.Limits.MaxBodyBytes = int64(maxBody)
	}
	e.int("MAX_HEADER_BYTES", 1, &cfg.Limits.MaxHeaderBytes)
	e.int("MAX_OUTPUT_BYTES", 1, &cfg.MaxOutputBytes)
	e.int("MAX_BUFFERED_INPUT", 1, &cfg.MaxBufferedInput)
	e.int("OFFLOAD_TOKENS", 1, &cfg.Offload.Tokens)
	e.int("OFFLOAD_SLOW_TOKENS", 1, &cfg.Offload.SlowTokens)
	var lanes bool
	if _, ok := e.bool("OFFLOAD_LANES", &lanes); ok {
		cfg.Offload.NoLanes = !lanes
	}
	e.duration("STALL_THRESHOLD", true, &cfg.StallThreshold)
	var acct bool
	if _, ok := e.bool("ACCOUNTING", &acct); ok {
		cfg.NoAccounting = !acct
	}
	e.bool("OS_CLOCK", &cfg.OSClock)
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

// prefixes reads a comma-separated list of addresses ("127.0.0.1", a prefix of the full
// length) and CIDR prefixes ("10.0.0.0/8").
func (e *envReader) prefixes(name string, dst *[]netip.Prefix) {
	v, from, ok := e.get(name)
	if !ok {
		return
	}
	var out []netip.Prefix
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				e.fail(from, v, fmt.Sprintf("%q is neither an address nor a CIDR prefix", f))
				return
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p)
	}
	*dst = out
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

// bool reads a boolean, reporting the variable it came from and whether one was set.
func (e *envReader) bool(name string, dst *bool) (from string, ok bool) {
	v, from, ok := e.get(name)
	if !ok {
		return "", false
	}
	switch strings.ToLower(v) {
	case "1", "t", "true", "yes", "y", "on":
		*dst = true
	case "0", "f", "false", "no", "n", "off":
		*dst = false
	default:
		e.fail(from, v, "not a boolean (true/false, 1/0, yes/no, on/off)")
		return from, false
	}
	return from, true
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
