package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/batonrt/baton/bench/arena"
	"github.com/batonrt/baton/bench/arenaload"
	"github.com/batonrt/baton/bench/loadgen"
	"github.com/batonrt/baton/bench/servers"
)

// Sizes of the arena scenario (-arena-players overrides both): one phase per player
// count. The full suite's straddle where the shared rig found gorilla's limit (between
// 500 and 1,000 players) and baton's (between 1,500 and 2,000).
var (
	QuickArenaPlayers = []int{400}
	FullArenaPlayers  = []int{500, 1000, 2000}
)

// Windows of the arena scenario: the shared rig's 5 s warm-up and 15 s window in the
// full suite.
const (
	QuickArenaWarmup   = time.Second
	QuickArenaDuration = 3 * time.Second
	FullArenaWarmup    = 5 * time.Second
	FullArenaDuration  = 15 * time.Second
)

func arenaPlayers(p Params) []int {
	switch {
	case len(p.ArenaPlayers) > 0:
		return p.ArenaPlayers
	case p.Quick:
		return QuickArenaPlayers
	}
	return FullArenaPlayers
}

// ArenaExtra is extra.arena of an arena run: the shared rig's figures.
type ArenaExtra struct {
	Rooms     int     `json:"rooms"`
	Players   int     `json:"players"`
	Connected int     `json:"connected"`
	SetupS    float64 `json:"setup_s"`
	// DeliveredPct is the states received in the window over the 20 x players expected.
	DeliveredPct float64 `json:"delivered_pct"`
	// The client-seen tick gap (time between consecutive states at a player), input ->
	// state, and delivery (server stamp -> receipt), in ms.
	GapP50     float64 `json:"gap_p50_ms"`
	GapP99     float64 `json:"gap_p99_ms"`
	GapMax     float64 `json:"gap_max_ms"`
	LatP50     float64 `json:"lat_p50_ms"`
	LatP99     float64 `json:"lat_p99_ms"`
	DelivP50   float64 `json:"deliv_p50_ms"`
	DelivP99   float64 `json:"deliv_p99_ms"`
	InputsSent int64   `json:"inputs_sent"`
	Undecoded  int64   `json:"undecoded"`
}

func init() {
	Register(&Scenario{
		Name:    "arena",
		Summary: "the shared rig's arena: R rooms of 4 WebSocket players, 16-byte inputs at 10 Hz, a 120-byte state per room at 20 Hz; server CPU per player-second (user/kernel), tick gap, input->state, delivered",
		Spec: `The game of ../shared/peers/arena (package arena): each phase pN joins N players (400 with
-quick; 500, 1000 and 2000 in the full suite; or -arena-players), 4 per room, to GET
/arena?room=R&slot=S, 32 rooms at a time; a room is made by its first player. Each player
sends a 16-byte binary input every 100 ms +-10 % from a random phase; each room ticks every
50 ms, applies the inputs it received, steps the simulation, encodes its 120-byte state once
and sends it to its 4 players. baton: a loop/room Room per game room, callback-form
WebSockets (ws.UpgradeTo) whose OnMessage queues the input (Room.Input), the tick drains,
steps, encodes once (NewPrepared) and Broadcasts. nethttp: gorilla/websocket, a goroutine
per connection reading inputs into the room under its mutex, a goroutine per room on a
time.Ticker writing a PreparedMessage to each player with a 5 s deadline. floor: raw
system calls on one thread (epoll, one write per player per tick). The load generator
(package arenaload, the rig's) runs every player from one goroutine around epoll on the
other core. Rows: states (req/s = states received per second, latency = the client-seen
tick gap: 50 ms when all is well), input (latency = input -> state: from sending input n to
the first state acknowledging it, about 25 ms when all is well), delivery (latency = the
state's server stamp to its receipt). srv µs/req is the server's CPU per player-second,
split into user and kernel time in extra.arena and the summary, with each target's ratio
to the floor's. A target holds N players when the gap p99 is at most 60 ms and at least
99 % of the states arrive (the rig's rule).`,
		Phases: func(p Params) []Phase {
			warm, dur := windows(p, QuickArenaWarmup, QuickArenaDuration, FullArenaWarmup, FullArenaDuration)
			var phases []Phase
			for _, n := range arenaPlayers(p) {
				rooms := (n + arena.Players - 1) / arena.Players
				players := rooms * arena.Players
				phases = append(phases, Phase{
					Name:        fmt.Sprintf("p%d", players),
					Description: fmt.Sprintf("%d players in %d rooms of %d: inputs at 10 Hz, states at 20 Hz", players, rooms, arena.Players),
					Warmup:      warm, Duration: dur,
					Custom: func(ctx context.Context, env *Env) (*Figures, error) { return arenaDriver(ctx, env, rooms) },
				})
			}
			return phases
		},
		Summarize: arenaSummary,
	})
}

// arenaDriver joins the players, runs the warm-up and the window, and reports the rig's
// figures.
func arenaDriver(ctx context.Context, env *Env, rooms int) (*Figures, error) {
	res, err := arenaload.Run(ctx, arenaload.Config{
		Addr: env.Host, Rooms: rooms, Warmup: env.Warmup, Duration: env.Duration,
		Path: func(room, slot int) string {
			return fmt.Sprintf("%s%s?room=%d&slot=%d", env.Prefix, servers.ArenaPath, room, slot)
		},
		OnWindow: func(start bool) {
			if start {
				env.MeasureStart()
			} else {
				env.MeasureEnd()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	if res.Connected == 0 {
		return nil, fmt.Errorf("no player joined: %v", res.Errors)
	}
	players := res.Players
	states := &loadgen.GroupResult{Name: "states", Conns: players, Rate: float64(players) * float64(time.Second/arena.Period),
		Duration: res.Window, Sent: uint64(res.Expected), Requests: uint64(res.States), Latency: res.Gap, Errors: res.Errors}
	input := &loadgen.GroupResult{Name: "input", Conns: players, Rate: float64(players) * arenaload.DefaultInputHz,
		Duration: res.Window, Sent: uint64(res.InputsSent), Requests: uint64(res.Lat.TotalCount()), Latency: res.Lat}
	deliv := &loadgen.GroupResult{Name: "delivery", Conns: players, Duration: res.Window, Requests: uint64(res.States), Latency: res.Deliv}
	ms := func(q float64, h interface{ ValueAtQuantile(float64) int64 }) float64 {
		return float64(h.ValueAtQuantile(q)) / 1e3
	}
	ex := ArenaExtra{
		Rooms: rooms, Players: players, Connected: res.Connected, SetupS: res.Setup.Seconds(),
		DeliveredPct: 100 * res.DeliveredRatio(),
		GapP50:       ms(50, res.Gap), GapP99: ms(99, res.Gap), GapMax: float64(res.Gap.Max()) / 1e3,
		LatP50: ms(50, res.Lat), LatP99: ms(99, res.Lat), DelivP50: ms(50, res.Deliv), DelivP99: ms(99, res.Deliv),
		InputsSent: res.InputsSent, Undecoded: res.Undecoded,
	}
	return &Figures{
		Groups: []*loadgen.GroupResult{states, input, deliv},
		Modes:  map[string]string{"states": "tick-gap", "input": "in->state", "delivery": "push"},
		WorkF:  float64(res.Connected) * res.Window.Seconds(), Unit: "player-s",
		Extra: map[string]any{"arena": ex},
	}, nil
}

// ArenaHolds is the rig's rule for a target holding its players: client-seen p99 tick
// gap at most 60 ms and at least 99 % of the states delivered.
func ArenaHolds(ex ArenaExtra) bool { return ex.GapP99 <= 60 && ex.DeliveredPct >= 99 }

func arenaSummary(s *ScenarioResult) []SummaryItem {
	var out []SummaryItem
	for _, ph := range s.Phases {
		floor := ph.Run(servers.Floor)
		for _, r := range ph.Runs {
			ex, ok := r.Extra["arena"].(ArenaExtra)
			if !ok || r.Server == nil || r.Server.CPUUsPerUnit <= 0 {
				continue
			}
			st := r.Server
			it := SummaryItem{
				Name:  fmt.Sprintf("arena %s: %s server CPU per player-second", ph.Name, r.Target),
				Value: st.CPUUsPerUnit, Unit: "µs",
				Note: fmt.Sprintf("user %.0f + kernel %.0f µs; gap p99 %.1f ms, input->state p50/p99 %.1f/%.1f ms, %.2f%% delivered (%s); load %.1f, others on the server's CPUs %s",
					st.CPUUserUsPerUnit, st.CPUSysUsPerUnit, ex.GapP99, ex.LatP50, ex.LatP99, ex.DeliveredPct,
					map[bool]string{true: "holds", false: "does not hold"}[ArenaHolds(ex)], st.Load1, fmtOthers(st.OthersOnCPUs)),
			}
			out = append(out, it)
			if r.Target != servers.Floor && floor != nil && floor.Server != nil && floor.Server.CPUUsPerUnit > 0 {
				f := floor.Server
				v := st.CPUUsPerUnit / f.CPUUsPerUnit
				ratio := SummaryItem{Name: fmt.Sprintf("arena %s: %s/floor server CPU per player-second", ph.Name, r.Target), Value: v, Unit: "x",
					Note: fmt.Sprintf("%.0f vs %.0f µs; user %.0f vs %.0f, kernel %.0f vs %.0f", st.CPUUsPerUnit, f.CPUUsPerUnit,
						st.CPUUserUsPerUnit, f.CPUUserUsPerUnit, st.CPUSysUsPerUnit, f.CPUSysUsPerUnit)}
				if r.Target == servers.Baton {
					ok := v <= 1.2
					ratio.Goal, ratio.Pass = "<= 1.2 (issue 30)", &ok
				}
				out = append(out, ratio)
			}
		}
	}
	return out
}

func fmtOthers(v float64) string {
	if v < 0 {
		return "unknown (not pinned)"
	}
	return fmt.Sprintf("%.0f%% of a core", 100*v)
}

// floorRatios returns each built-in target's CPU per unit over the floor's in ph, for
// the summaries of the scenarios the floor serves.
func floorRatios(label string, ph *PhaseResult, goals map[string]float64) []SummaryItem {
	floor := ph.Run(servers.Floor)
	if floor == nil || floor.Server == nil || floor.Server.CPUUsPerUnit <= 0 {
		return nil
	}
	f := floor.Server
	var out []SummaryItem
	for _, r := range ph.runs() {
		if r.Target == servers.Floor || r.Server == nil || r.Server.CPUUsPerUnit <= 0 {
			continue
		}
		st := r.Server
		v := st.CPUUsPerUnit / f.CPUUsPerUnit
		it := SummaryItem{Name: fmt.Sprintf("%s: %s/floor server CPU per %s", label, r.Target, strings.TrimSpace(st.Unit)), Value: v, Unit: "x",
			Note: fmt.Sprintf("%.2f vs %.2f µs; user %.2f vs %.2f, kernel %.2f vs %.2f", st.CPUUsPerUnit, f.CPUUsPerUnit,
				st.CPUUserUsPerUnit, f.CPUUserUsPerUnit, st.CPUSysUsPerUnit, f.CPUSysUsPerUnit)}
		if g, ok := goals[r.Target]; ok {
			pass := v <= g
			it.Goal, it.Pass = fmt.Sprintf("<= %g (issue 30)", g), &pass
		}
		out = append(out, it)
	}
	return out
}
