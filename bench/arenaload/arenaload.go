// Package arenaload is the arena scenario's load generator, a port of the shared rig's
// (../shared/peers/arena/loadgen): 4 x R WebSocket players, each sending a 16-byte input
// (arena.Input) at 10 Hz, every 100 ms +-10 % from a random phase, and reading every
// state its room sends (20 Hz). The players join R rooms at a time; from the first join
// one goroutine, locked to its thread, runs them all around epoll (level-triggered): one
// read(2) per readiness, frames parsed in place, each input written in one write(2).
// The load generator must cost less than the servers it drives, on a core of its own:
// no goroutine per connection, no locks and no allocation per message once running.
//
// After every player joined and a warm-up it measures a window:
//
//   - states delivered, against the 20 x players expected;
//   - the client-seen tick gap: time between consecutive states at each player (50 ms
//     when all is well);
//   - input -> state: from sending input n to receiving the first state whose
//     acknowledgement for this player is n or more (up to a period of waiting for the next
//     tick is part of it: p50 about 25 ms when all is well);
//   - delivery: from the server's stamp in the state (its wall clock at encoding; same
//     machine, same clock) to the receipt;
//   - errors: players that failed to join, connections closed or failed before the end.
//
// Linux only (epoll); elsewhere Run returns an error. Loopback addresses only.
package arenaload

import (
	"context"
	"errors"
	"fmt"

	"net"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/batonrt/baton/bench/arena"
	"github.com/batonrt/baton/bench/loadgen"
)

// Defaults of Config.
const (
	DefaultInputHz      = 10
	DefaultConc         = 32
	DefaultSetupTimeout = 90 * time.Second
)

// Config describes a run.
type Config struct {
	// Addr is the server's "host:port"; it must be a loopback address.
	Addr string
	// Path returns the upgrade path of player slot of room (default Path).
	Path func(room, slot int) string
	// Rooms is the number of rooms (4 players each).
	Rooms int
	// Warmup and Duration are the warm-up after every player joined and the window.
	Warmup, Duration time.Duration
	// InputHz is each player's input rate (default DefaultInputHz).
	InputHz float64
	// Conc is how many rooms join at once during the setup (default DefaultConc).
	Conc int
	// SetupTimeout bounds the setup (default DefaultSetupTimeout).
	SetupTimeout time.Duration
	// OnWindow, when set, is called at the window's start (true) and end (false), on
	// the load generator's loop goroutine: the harness samples CPU times there.
	OnWindow func(start bool)
}

// Path is the default Config.Path: GET /arena?room=R&slot=S, the bench servers' route.
func Path(room, slot int) string { return fmt.Sprintf("/arena?room=%d&slot=%d", room, slot) }

// Result is what a run measured. Histograms are in microseconds.
type Result struct {
	Players, Connected int
	Setup, Window      time.Duration
	// States counts the states received in the window; Expected what 20 Hz to every
	// player would have delivered.
	States   int64
	Expected float64
	// Gap is the client-seen tick gap, Lat input -> state, Deliv stamp -> receipt.
	Gap, Lat, Deliv *hdrhistogram.Histogram
	// InputsSent counts the inputs sent in the window.
	InputsSent int64
	// Undecoded counts data messages that were not a state.
	Undecoded int64
	// Errors counts failed joins and connections that ended before the end, by kind.
	Errors map[string]uint64
}

// DeliveredRatio returns States / Expected (0 when nothing was expected).
func (r *Result) DeliveredRatio() float64 {
	if r.Expected <= 0 {
		return 0
	}
	return float64(r.States) / r.Expected
}

// Run joins the players, runs the warm-up and the window and returns the figures. The
// players are closed when it returns. ctx cancels it.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Rooms <= 0 {
		return nil, fmt.Errorf("arenaload: Rooms must be positive, got %d", cfg.Rooms)
	}
	if cfg.Duration <= 0 {
		return nil, fmt.Errorf("arenaload: Duration must be positive, got %v", cfg.Duration)
	}
	if err := loopbackOnly(cfg.Addr); err != nil {
		return nil, err
	}
	if cfg.Path == nil {
		cfg.Path = Path
	}
	if cfg.InputHz <= 0 {
		cfg.InputHz = DefaultInputHz
	}
	if cfg.Conc <= 0 {
		cfg.Conc = DefaultConc
	}
	if cfg.SetupTimeout <= 0 {
		cfg.SetupTimeout = DefaultSetupTimeout
	}
	return run(ctx, cfg)
}

func loopbackOnly(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("arenaload: %w", err)
	}
	ips, err := net.DefaultResolver.LookupIP(context.Background(), "ip", host)
	if err != nil {
		return fmt.Errorf("arenaload: %w", err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("arenaload: %s resolves to %s: only loopback addresses are loaded", host, ip)
		}
	}
	return nil
}

// errors records error kinds from any goroutine.
type errorSet struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (e *errorSet) add(kind string) {
	e.mu.Lock()
	e.m[kind]++
	e.mu.Unlock()
}

var errClosed = errors.New("close frame")

// errKind folds an error into a short kind for Result.Errors.
func errKind(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "connection reset"):
		return "reset"
	case strings.Contains(s, "refused"):
		return "refused"
	case strings.Contains(s, "timeout"):
		return "timeout"
	case errors.Is(err, errClosed):
		return s
	case strings.Contains(s, "EOF"), strings.Contains(s, "eof"):
		return "eof"
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

func newHist() *hdrhistogram.Histogram { return loadgen.NewHistogram() }

// record adds ns as µs to h, clamped to the histogram's bounds.
func record(h *hdrhistogram.Histogram, ns int64) {
	_ = h.RecordValue(min(max(ns/1000, loadgen.HistLowestUs), loadgen.HistHighestUs))
}

// checkState is the arena state's own checksum check (the last 4 bytes), so that a
// state garbled on the way counts as undecoded.
func checkState(p []byte) bool {
	if len(p) != arena.StateSize {
		return false
	}
	var sum uint32
	for _, c := range p[:arena.StateSize-4] {
		sum = sum*31 + uint32(c)
	}
	return sum == uint32(p[116])|uint32(p[117])<<8|uint32(p[118])<<16|uint32(p[119])<<24
}
