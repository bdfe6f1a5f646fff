package offload

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The defaults, documented on Config's fields; docs/offload.md explains each with Little's
// law.
const (
	defaultTokens = 64
	// DefaultMaxWaiting is the default Config.MaxWaiting, per lane: 1,024 waiting calls is
	// 16 service times of a full 64-token lane, past which waiting longer is worse for the
	// client than a quick 503. Exported for configurations derived from it (health's
	// readiness bound on the offload queue).
	DefaultMaxWaiting   = 1024
	defaultIdleTimeout  = 10 * time.Second
	defaultPromoteAfter = 50 * time.Millisecond
	defaultDemoteBelow  = 10 * time.Millisecond
	defaultHalfLife     = time.Minute
	defaultMaxKeys      = 10000
	defaultMaxKeyShare  = 0.5
	// sampleWeight is how far one sample moves the estimate (EWMA alpha).
	sampleWeight = 0.25
)

// Config configures a Pool. The zero value gives the defaults; a zero field takes its
// default (as documented on the field), nothing else is changed: Validate reports every
// value that New cannot use as given.
type Config struct {
	// Tokens is the number of functions that may run at once (the pool's bound), fast and
	// slow lanes together. Default 64: tokens held = arrival rate x time held, so 64 tokens
	// carry 6,400 calls/s of 10 ms each, or 64,000 of 1 ms, with no queueing, about 2-3x
	// what one loop typically offloads, while staying below the connection limit of a
	// typical database (Postgres defaults to 100) so a burst cannot crush it. Below 2 there
	// are no lanes (one token cannot be split): every call uses one lane.
	Tokens int

	// SlowTokens is the slow lane's share of Tokens; it must be below Tokens so that the
	// fast lane keeps at least one token. Default Tokens/4 (at least 1): fast calls are
	// most calls but hold a token briefly, slow ones hold it 100x longer, so a quarter of
	// the pool carries the usual slow traffic while a slow flood can never take more than
	// a quarter. Setting it without lanes (NoLanes, or Tokens < 2) is an error.
	SlowTokens int

	// NoLanes turns the lanes off: every call uses one FIFO queue and all the tokens. The
	// predictor still learns (Stats shows what it would choose).
	NoLanes bool

	// MaxWaiting bounds each lane's queue of calls waiting for a token, and each route's
	// queue of calls waiting at its MaxKeyShare cap; one more gets ErrQueueFull. Default
	// DefaultMaxWaiting. Negative: no queue (a call that finds no token gets ErrQueueFull
	// at once).
	MaxWaiting int

	// MaxKeyShare is the largest share of a lane's tokens that running calls of one route
	// key may hold at once: cap = max(1, floor(MaxKeyShare x lane tokens)). A call of a
	// route at its cap waits in that route's own queue, which never delays other routes'
	// calls queued behind it. So one route whose functions hang (ignore their context)
	// can starve only itself. Between 0 and 1; 0 means the default, 0.5: a route whose
	// functions hang leaves at least half of the lane to every other route, while a route
	// that is most of the traffic still gets half the lane without queueing behind its own
	// cap. 1 turns the cap off. Raise it when one route is most of the offloaded traffic.
	MaxKeyShare float64

	// DefaultTimeout bounds every call that has no Timeout option, queueing included (see
	// Timeout). 0, the default, means none: a call waits as long as its caller's context
	// allows. A function that ignores its context keeps its token until it returns either
	// way; MaxKeyShare bounds how many tokens such a route can hold.
	DefaultTimeout time.Duration

	// IdleTimeout is how long an idle worker goroutine waits for work before it exits.
	// At most Tokens workers exist. Default 10 s: starting a goroutine is cheap
	// (docs/offload.md has the figure), so idle ones are kept only to ride out bursts.
	IdleTimeout time.Duration

	// PromoteAfter: a route whose estimated run time rises above it moves to the slow
	// lane, and a call running longer than it moves its route at once (mid-flight).
	// Default 50 ms: 10-50x a typical indexed query, and the longest a route unknown to be
	// slow holds a fast token before mid-flight learning moves it to the slow lane.
	PromoteAfter time.Duration

	// DemoteBelow: a slow route whose estimate falls below it returns to the fast lane.
	// Must be below PromoteAfter (hysteresis). Default 10 ms, a factor 5 under the default
	// PromoteAfter so that a route near a threshold does not flip at every sample, or
	// PromoteAfter/5 when PromoteAfter is 10 ms or less.
	DemoteBelow time.Duration

	// HalfLife: the estimate of a route halves every HalfLife without samples, so an idle
	// slow route drifts back to fast. Default a minute: a slow route that stopped being
	// called is treated as unknown (fast) after a few minutes.
	HalfLife time.Duration

	// MaxKeys bounds the predictor's routes (least recently used are dropped).
	// Default 10,000 routes (about 1 MB), far more than any server's route table; the bound
	// protects against keys built from raw paths.
	MaxKeys int

	// SlowKeys are routes that always use the slow lane: exact keys ("GET /export"), or
	// prefixes ending in '*' ("GET /reports/*").
	SlowKeys []string
}

// ConfigError reports an invalid Config field. Field and every other field the message
// names are relative to Config, so that a configuration embedding Config can report them
// under its own path: Error gives "offload: Config.SlowTokens (9) must be below
// Config.Tokens (8): the fast lane needs a token", and Describe("Config.Offload.") gives
// "Config.Offload.SlowTokens (9) must be below Config.Offload.Tokens (8): the fast lane
// needs a token".
type ConfigError struct {
	// Field is the invalid field, e.g. "SlowTokens".
	Field string
	// msg is the message with pathMark where a field path goes.
	msg string
}

// pathMark stands for the path of Config in ConfigError.msg.
const pathMark = "\x1f"

func configErr(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, msg: pathMark + field + " " + fmt.Sprintf(format, args...)}
}

// Error returns "offload: Config.FIELD ...". Any goroutine.
func (e *ConfigError) Error() string { return "offload: " + e.Describe("Config.") }

// Describe returns the message (without the "offload: " prefix) with path in front of
// every field it names, e.g. path "Config.Offload.". Any goroutine.
func (e *ConfigError) Describe(path string) string {
	return strings.ReplaceAll(e.msg, pathMark, path)
}

// field names another field in a ConfigError message.
func field(name string) string { return pathMark + name }

// settings are a Config with the defaults filled in.
type settings struct {
	tokens, slowTokens, maxWaiting, maxKeys int
	lanes                                   bool
	keyShare                                float64
	defTimeout, idle                        time.Duration
	promote, demote, halfLife               time.Duration
}

// orDefault returns v, or def when v is zero.
func orDefault[T int | float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Validate reports the first field New cannot use as given, as a *ConfigError naming it
// (and any other field involved), or nil. Zero fields take their documented defaults
// and are never an error by themselves. Any goroutine.
func (cfg Config) Validate() error {
	_, err := cfg.settings()
	return err
}

// settings validates cfg and fills in the defaults.
func (cfg Config) settings() (settings, error) {
	var s settings
	for _, f := range []struct {
		name string
		v    int
	}{{"Tokens", cfg.Tokens}, {"SlowTokens", cfg.SlowTokens}, {"MaxKeys", cfg.MaxKeys}} {
		if f.v < 0 {
			return s, configErr(f.name, "(%d) must not be negative (0 means the default)", f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"DefaultTimeout", cfg.DefaultTimeout}, {"IdleTimeout", cfg.IdleTimeout},
		{"PromoteAfter", cfg.PromoteAfter}, {"DemoteBelow", cfg.DemoteBelow},
		{"HalfLife", cfg.HalfLife},
	} {
		if f.v < 0 {
			return s, configErr(f.name, "(%v) must not be negative (0 means the default)", f.v)
		}
	}
	s.tokens = orDefault(cfg.Tokens, defaultTokens)
	s.lanes = !cfg.NoLanes && s.tokens >= 2
	switch {
	case cfg.SlowTokens > 0 && cfg.NoLanes:
		return s, configErr("SlowTokens", "(%d) is set but %s is true: there is no slow lane",
			cfg.SlowTokens, field("NoLanes"))
	case cfg.SlowTokens > 0 && !s.lanes:
		return s, configErr("SlowTokens", "(%d) is set but %s (%d) is below 2: there are no lanes",
			cfg.SlowTokens, field("Tokens"), s.tokens)
	case s.lanes && cfg.SlowTokens >= s.tokens:
		return s, configErr("SlowTokens", "(%d) must be below %s (%d): the fast lane needs a token",
			cfg.SlowTokens, field("Tokens"), s.tokens)
	}
	if s.lanes {
		s.slowTokens = orDefault(cfg.SlowTokens, max(1, s.tokens/4))
	}
	switch {
	case cfg.MaxWaiting == 0:
		s.maxWaiting = DefaultMaxWaiting
	case cfg.MaxWaiting > 0:
		s.maxWaiting = cfg.MaxWaiting
	}
	if math.IsNaN(cfg.MaxKeyShare) || cfg.MaxKeyShare < 0 || cfg.MaxKeyShare > 1 {
		return s, configErr("MaxKeyShare", "(%v) must be between 0 and 1 (0 means the default, %v)",
			cfg.MaxKeyShare, defaultMaxKeyShare)
	}
	s.keyShare = orDefault(cfg.MaxKeyShare, defaultMaxKeyShare)
	s.defTimeout = cfg.DefaultTimeout
	s.idle = orDefault(cfg.IdleTimeout, defaultIdleTimeout)
	s.promote = orDefault(cfg.PromoteAfter, defaultPromoteAfter)
	switch {
	case cfg.DemoteBelow > 0 && cfg.DemoteBelow >= s.promote:
		return s, configErr("DemoteBelow", "(%v) must be below %s (%v)", cfg.DemoteBelow,
			field("PromoteAfter"), s.promote)
	case cfg.DemoteBelow > 0:
		s.demote = cfg.DemoteBelow
	case defaultDemoteBelow < s.promote:
		s.demote = defaultDemoteBelow
	default:
		s.demote = s.promote / 5
	}
	s.halfLife = orDefault(cfg.HalfLife, defaultHalfLife)
	s.maxKeys = orDefault(cfg.MaxKeys, defaultMaxKeys)
	return s, nil
}

// keyCap is the per-key cap of a lane of n tokens.
func keyCap(share float64, n int) int { return max(1, int(share*float64(n))) }

// New returns a pool configured by cfg (zero fields take the defaults). It panics with the
// *ConfigError of cfg.Validate if cfg is invalid: a configuration is a program's
// constant, so servers validate it first and report the error (loop.Config.Validate does).
// Any goroutine.
func New(cfg Config) *Pool {
	s, err := cfg.settings()
	if err != nil {
		panic(err)
	}
	p := &Pool{
		tokens:      s.tokens,
		lanesOn:     s.lanes,
		maxWaiting:  s.maxWaiting,
		idleTimeout: s.idle,
		promote:     s.promote,
		defTimeout:  s.defTimeout,
		keyShare:    s.keyShare,
		now:         time.Now,
		afterFunc:   realAfterFunc,
		inflight:    make(map[Caller]*call),
		heldKeys:    make(map[*keyEntry]struct{}),
		quit:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	if p.lanesOn {
		p.lanes[laneFast].tokens = p.tokens - s.slowTokens
		p.lanes[laneSlow].tokens = s.slowTokens
	} else {
		p.lanes[laneFast].tokens = p.tokens
	}
	for i := range p.lanes {
		ls := &p.lanes[i]
		ls.keyCap = keyCap(s.keyShare, ls.tokens)
	}
	p.pred.init(s.maxKeys, s.promote, s.demote, s.halfLife, cfg.SlowKeys)
	return p
}
