package harness

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/batonrt/baton/bench/loadgen"
)

// Scenario is a named, documented load test: one or more phases, each run against every
// target in a fresh server process.
//
// To add a scenario, write a Scenario value and Register it from an init function: its
// Phases build the load groups from the Params, After (optional) fetches figures from the
// server, Summarize (optional) turns the runs into headline ratios. Routes go in package
// servers, once per target.
type Scenario struct {
	// Name is what -scenario selects.
	Name string
	// Summary is one line for -h and the report.
	Summary string
	// Spec describes the load and what to read in the results (for docs/bench.md).
	Spec string
	// Needs, when not empty, says what is missing: the scenario is listed but skipped with
	// this reason.
	Needs string
	// External says whether external targets (-targets URL) take part; they must then
	// serve the scenario's routes.
	External bool
	// Process, when set, names the program the scenario runs against instead of the
	// targets (-targets is ignored for it): it is called once per Run, and each phase runs
	// in a fresh process of that program, pinned like the built-in servers. An error skips
	// the scenario with that reason.
	Process func(ctx context.Context, p Params) (*Process, error)
	// Phases returns the phases to run for p.
	Phases func(p Params) []Phase
	// Summarize returns headline figures from the scenario's results (nil: none).
	Summarize func(s *ScenarioResult) []SummaryItem
	// AccountingCost, when both baton and baton-noacct are targets, measures after the
	// phases what accounting costs in interleaved short bursts (see AccountingCost) into
	// ScenarioResult.AccountingCost.
	AccountingCost bool
}

// Params are the options that shape a scenario's load.
type Params struct {
	// Quick selects the short suite's sizes.
	Quick bool
	// Duration and Warmup, when positive (Warmup: non-negative), override every phase's.
	Duration, Warmup time.Duration
	// Conns overrides the connection counts of scenarios that sweep them.
	Conns []int
	// Rate, when positive, is the open-loop rate of the scenario's main load; for
	// plaintext it turns the closed-loop sweep into an open-loop one.
	Rate float64
	// Pipeline is the requests in flight per connection for the main load (default 1).
	Pipeline int
	// IdleConns is the idle-conns scenario's number of idle connections.
	IdleConns int
	// BurstConns, when positive, is the reconnect-burst scenario's number of workers.
	BurstConns int
	// Rooms, when positive, is the rooms scenario's number of rooms.
	Rooms int
	// WSConns, when positive, is the ws-broadcast scenario's number of WebSocket
	// connections (in WSConns/100 rooms).
	WSConns int
	// ArenaPlayers, when not empty, are the arena scenario's player counts, one phase
	// each (rounded up to rooms of 4).
	ArenaPlayers []int
	// GamePlayers, when positive, is the game scenario's number of players (in matches of
	// GameMatchSize); GameServer, when set, the path of a built examples/gameserver binary
	// (else the harness builds it with the go toolchain); GameMatch, when positive, the
	// match length (default FullGameMatch, QuickGameMatch with Quick).
	GamePlayers int
	GameServer  string
	GameMatch   time.Duration
	// AccountingRounds and AccountingBurst, when positive, override the number of rounds
	// and the burst length of the interleaved accounting-cost measurement.
	AccountingRounds int
	AccountingBurst  time.Duration
	// Drain is how long responses to the window's requests are waited for after it
	// (default 2 s); later ones count as timeouts.
	Drain time.Duration
}

// Phase is one load shape of a scenario.
type Phase struct {
	// Name identifies the phase within its scenario (e.g. "c64").
	Name string
	// Description says what the phase does.
	Description string
	// Warmup and Duration are the warm-up and measurement window.
	Warmup, Duration time.Duration
	// Groups returns the load groups for a server at host ("host:port", also sent as the
	// Host header) whose routes live under prefix ("" for built-in targets). Addr is
	// filled in by the runner. Unused when Custom is set.
	Groups func(host, prefix string) []loadgen.Group
	// Custom, when set, drives the phase's load itself instead of Groups (load that is not
	// HTTP request/response: rooms ticking, WebSocket push). It runs on the runner's
	// goroutine with the server up; it must run the warm-up and the window, mark the
	// window with env.MeasureStart and env.MeasureEnd, and return its figures (see Figures).
	// An error fails the run (RunResult.Error).
	Custom func(ctx context.Context, env *Env) (*Figures, error)
	// After, if set, runs once the window has ended, with the server still up; it may
	// fetch figures from base ("http://host:port" + prefix) into run.Extra.
	After func(ctx context.Context, base string, run *RunResult) error
	// RSSPerConnGroup, if set, names the group whose connections are divided into the
	// server's resident memory growth (rss_start - rss_before) for Extra["rss_per_conn"].
	RSSPerConnGroup string
}

var registry = map[string]*Scenario{}

// Register adds s to the scenarios -scenario may name. It panics on a duplicate name.
func Register(s *Scenario) {
	if _, dup := registry[s.Name]; dup {
		panic("harness: scenario registered twice: " + s.Name)
	}
	registry[s.Name] = s
}

// order is the canonical order of scenarios (the numbering); others follow by name.
var order = []string{"plaintext", "json", "slow-flood", "cpu-hog", "reconnect-burst", "idle-conns", "rooms", "ws-broadcast", "arena", "game"}

// Scenarios returns every registered scenario in canonical order.
func Scenarios() []*Scenario {
	rank := map[string]int{}
	for i, n := range order {
		rank[n] = i + 1
	}
	out := make([]*Scenario, 0, len(registry))
	for _, s := range registry {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		ri, rj := rank[out[i].Name], rank[out[j].Name]
		if ri == 0 {
			ri = len(order) + 1
		}
		if rj == 0 {
			rj = len(order) + 1
		}
		if ri != rj {
			return ri < rj
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Lookup returns the scenario named name.
func Lookup(name string) (*Scenario, bool) {
	s, ok := registry[name]
	return s, ok
}

// SelectScenarios resolves a -scenario value: "all", or a comma-separated list of names.
func SelectScenarios(spec string) ([]*Scenario, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "all" {
		return Scenarios(), nil
	}
	var out []*Scenario
	seen := map[string]bool{}
	for _, name := range strings.Split(spec, ",") {
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		s, ok := Lookup(name)
		if !ok {
			var names []string
			for _, s := range Scenarios() {
				names = append(names, s.Name)
			}
			return nil, fmt.Errorf("unknown scenario %q (have %s, or all)", name, strings.Join(names, ", "))
		}
		seen[name] = true
		out = append(out, s)
	}
	return out, nil
}
