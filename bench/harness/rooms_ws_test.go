package harness

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/bench/servers"
)

// TestRoomsScenario runs rooms at a tiny scale against both targets: every run reports
// tick rows (ticks per second near the rooms' rate, lateness), the inputs row, CPU per
// tick, and in the heavy phase the heavy room's row; baton names the heavy room from
// /debug/baton/rooms and reports its loop utilisation, net/http says it cannot.
func TestRoomsScenario(t *testing.T) {
	res, err := Run(context.Background(), Options{
		Scenarios: "rooms",
		Targets:   []Target{{Name: "baton", Builtin: true}, {Name: "nethttp", Builtin: true}},
		// A warm-up over a second: the rooms page ranks by loop share over complete seconds.
		Params: Params{Duration: 500 * time.Millisecond, Warmup: 1200 * time.Millisecond, Rooms: 8, Drain: 500 * time.Millisecond},
		Out:    t.TempDir(),
	})
	require.NoError(t, err)
	sc := res.Scenarios[0]
	require.Len(t, sc.Phases, 2)
	for _, ph := range sc.Phases {
		for _, r := range ph.Runs {
			where := ph.Name + " " + r.Target
			require.Empty(t, r.Error, where)
			ticks, inputs := r.Group("ticks"), r.Group("inputs")
			require.NotNil(t, ticks, where)
			require.NotNil(t, inputs, where)
			assert.Equal(t, "tick", ticks.Mode, where)
			// Never more ticks than deadlines; fewer on a loaded machine (deadlines skipped),
			// far fewer in the heavy phase, whose heavy room wants 60% of a core.
			assert.Positive(t, ticks.Requests, where)
			assert.LessOrEqual(t, ticks.RPS, 8*20*1.1, where)
			assert.Equal(t, ticks.Latency.Count, int64(ticks.Requests), where)
			assert.Positive(t, inputs.Requests, where)
			require.NotNil(t, r.Server, where)
			assert.Equal(t, "tick", r.Server.Unit, where)
			assert.Positive(t, r.Server.CPUUsPerUnit, where)
			ex, ok := r.Extra["rooms"].(RoomsExtra)
			require.True(t, ok, where)
			assert.Equal(t, 8, ex.Rooms)
			assert.Positive(t, ex.Iters)
			assert.Positive(t, ex.PacedIters, where)
			assert.Contains(t, ex.CalibratedOn, "the load generator's CPUs", "not pinned: calibrated here")
			if ph.Name == "heavy" {
				require.NotNil(t, r.Group("heavy"), where)
				assert.Positive(t, ex.HeavyTickUs, where)
			} else {
				assert.Nil(t, r.Group("heavy"), where)
			}
			if r.Target == servers.Baton {
				assert.Greater(t, ex.LoopUtil, 0.0, where)
				if ph.Name == "heavy" {
					assert.Equal(t, servers.HeavyRoomName, ex.Named, "%s: %s", where, ex.NamedNote)
				}
			} else {
				assert.Empty(t, ex.Named, where)
				assert.Equal(t, -1.0, ex.LoopUtil, where)
			}
		}
	}
	var names []string
	for _, it := range res.Summary {
		names = append(names, it.Name)
	}
	all := strings.Join(names, "\n")
	for _, want := range []string{"rooms light: baton tick lateness p99", "rooms light: baton/nethttp server CPU per tick",
		"rooms heavy: baton light rooms' tick lateness p99 with the heavy room / without", "rooms heavy: baton names the heavy room",
		"rooms heavy: nethttp names the heavy room"} {
		assert.Contains(t, all, want)
	}
}

// TestCalibrateOnServerCPUs: the calibration child pinned with taskset answers a plausible
// number of iterations (the simulation's speed on those CPUs), as in-process calibration
// does; a bad CPU list is an error, not a silent fallback.
func TestCalibrateOnServerCPUs(t *testing.T) {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("taskset not installed")
	}
	n, err := calibrateOn("0", taskset, RoomTickWork)
	require.NoError(t, err)
	local := servers.CalibrateSim(RoomTickWork)
	assert.Positive(t, n)
	// Same machine, same work: within a factor of 4 of this process's own figure (CPUs
	// differ, and a loaded machine slows either).
	ratio := float64(n) / float64(local)
	assert.True(t, ratio > 0.25 && ratio < 4, "child %d iterations, here %d", n, local)
	_, err = calibrateOn("9999", taskset, RoomTickWork)
	assert.Error(t, err)
}

// TestWSBroadcastScenario runs ws-broadcast at a tiny scale against both targets: every
// connection joins, the delivery row counts about connections x 20 messages per second
// with their latency, and CPU is reported per delivered message for server and client.
func TestWSBroadcastScenario(t *testing.T) {
	res, err := Run(context.Background(), Options{
		Scenarios: "ws-broadcast",
		Targets:   []Target{{Name: "baton", Builtin: true}, {Name: "nethttp", Builtin: true}},
		Params:    Params{Duration: 600 * time.Millisecond, Warmup: 200 * time.Millisecond, WSConns: 30},
		Out:       t.TempDir(),
	})
	require.NoError(t, err)
	sc := res.Scenarios[0]
	require.Len(t, sc.Phases, 1)
	assert.Equal(t, "c30", sc.Phases[0].Name)
	for _, r := range sc.Phases[0].Runs {
		require.Empty(t, r.Error, r.Target)
		g := r.Group("delivery")
		require.NotNil(t, g, r.Target)
		assert.Equal(t, "push", g.Mode)
		assert.InDelta(t, 30*20, g.RPS, 30*20*0.5, r.Target)
		assert.Equal(t, g.Latency.Count, int64(g.Requests), r.Target)
		assert.Empty(t, g.Errors, r.Target)
		require.NotNil(t, r.Server, r.Target)
		assert.Equal(t, "msg", r.Server.Unit)
		ex, ok := r.Extra["ws"].(WSExtra)
		require.True(t, ok, r.Target)
		assert.Equal(t, 30, ex.Connected)
		assert.Equal(t, 1, ex.Rooms)
		assert.Positive(t, ex.ServerSent)
		assert.Positive(t, ex.ClientCPUPerMsgUs)
	}
	var found int
	for _, it := range res.Summary {
		if strings.HasPrefix(it.Name, "ws-broadcast: ") {
			found++
		}
	}
	assert.Equal(t, 4, found, "client CPU per target, CPU ratio, p99 ratio: %+v", res.Summary)
}

// TestRoomsSummaryGivesTheFloorsLateness: the lateness item names the other targets' p99
// from the same window, the floor's among them (what the machine allowed in it), and
// judges baton's alone.
func TestRoomsSummaryGivesTheFloorsLateness(t *testing.T) {
	run := func(target string, p99 int64) *RunResult {
		return &RunResult{Target: target, Groups: []*GroupStats{{Name: "ticks", Latency: Latency{Count: 100, P99: p99}}}}
	}
	for _, c := range []struct {
		runs []*RunResult
		note string
		pass bool
	}{
		{[]*RunResult{run("baton", 745), run("nethttp", 2270), run("floor", 1480)}, "net/http 2.27ms, floor 1.48ms", true},
		{[]*RunResult{run("baton", 2780), run("floor", 896)}, "floor 896µs", false},
		{[]*RunResult{run("baton", 999)}, "", true},
	} {
		sc := &ScenarioResult{Name: "rooms", Phases: []*PhaseResult{{Name: "light", Runs: c.runs}}}
		var got *SummaryItem
		for _, it := range roomsSummary(sc) {
			if it.Name == "rooms light: baton tick lateness p99" {
				got = &it
			}
		}
		require.NotNil(t, got, c.note)
		assert.Equal(t, c.note, got.Note)
		require.NotNil(t, got.Pass)
		assert.Equal(t, c.pass, *got.Pass, c.note)
		assert.InDelta(t, float64(c.runs[0].Groups[0].Latency.P99)/1e3, got.Value, 1e-9)
	}
}
