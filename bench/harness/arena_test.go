package harness

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/bench/servers"
)

// TestArenaScenario runs the arena at a tiny scale (3 rooms, 12 players) against baton,
// the gorilla baseline and the floor: every player joins, the states row counts about
// players x 20 states per second with the tick gap as its latency, the input row the
// input -> state times, and the server's CPU is reported per player-second and split
// into user and kernel time.
func TestArenaScenario(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("arenaload and the floor are Linux only")
	}
	res, err := Run(context.Background(), Options{
		Scenarios: "arena",
		Targets:   []Target{{Name: servers.Baton, Builtin: true}, {Name: servers.NetHTTP, Builtin: true}, {Name: servers.Floor, Builtin: true}},
		Params:    Params{Duration: time.Second, Warmup: 200 * time.Millisecond, ArenaPlayers: []int{10}},
		Out:       t.TempDir(),
	})
	require.NoError(t, err)
	sc := res.Scenarios[0]
	require.Len(t, sc.Phases, 1)
	assert.Equal(t, "p12", sc.Phases[0].Name, "10 players round up to 3 rooms of 4")
	require.Len(t, sc.Phases[0].Runs, 3)
	for _, r := range sc.Phases[0].Runs {
		require.Empty(t, r.Error, r.Target)
		st := r.Group("states")
		require.NotNil(t, st, r.Target)
		assert.Equal(t, "tick-gap", st.Mode)
		assert.InDelta(t, 12*20, st.RPS, 12*20*0.5, r.Target)
		assert.Empty(t, st.Errors, r.Target)
		assert.InDelta(t, 50_000, st.Latency.P50, 25_000, "%s: the median gap is a tick period", r.Target)
		in := r.Group("input")
		require.NotNil(t, in, r.Target)
		assert.Positive(t, in.Latency.Count, "%s: inputs acknowledged", r.Target)
		assert.Less(t, in.Latency.P50, int64(150_000), r.Target)
		require.NotNil(t, r.Group("delivery"), r.Target)

		ex, ok := r.Extra["arena"].(ArenaExtra)
		require.True(t, ok, r.Target)
		assert.Equal(t, 12, ex.Connected, r.Target)
		assert.Equal(t, 3, ex.Rooms)
		assert.Zero(t, ex.Undecoded, r.Target)
		assert.Greater(t, ex.DeliveredPct, 50.0, r.Target)

		s := r.Server
		require.NotNil(t, s, r.Target)
		assert.InDelta(t, s.CPUSeconds, s.CPUUserS+s.CPUSysS, 1e-9, "%s: user + kernel = CPU", r.Target)
		if s.CPUSeconds > 0 { // 10 ms ticks: a tiny run may see none
			assert.Equal(t, "player-s", s.Unit, r.Target)
			assert.InDelta(t, s.CPUUsPerUnit, s.CPUUserUsPerUnit+s.CPUSysUsPerUnit, 1e-6, r.Target)
		}
		assert.GreaterOrEqual(t, s.Load1, 0.0)
	}
	for _, it := range res.Summary {
		if strings.Contains(it.Name, "/floor") {
			assert.Contains(t, it.Note, "kernel", it.Name)
		}
	}
	b, err := os.ReadFile(res.Options.Out + "/results.json")
	require.NoError(t, err)
	for _, field := range []string{`"cpu_user_s"`, `"cpu_sys_s"`, `"arena"`, `"gap_p99_ms"`, `"lat_p99_ms"`, `"delivered_pct"`} {
		assert.Contains(t, string(b), field)
	}
}

// TestFloorOnlyWhereServed: the floor target takes part in the scenarios it is the floor
// of and is left out of the others.
func TestFloorOnlyWhereServed(t *testing.T) {
	for _, sc := range Scenarios() {
		want := sc.Name == "rooms" || sc.Name == "ws-broadcast" || sc.Name == "arena"
		assert.Equal(t, want, servers.Serves(servers.Floor, sc.Name), sc.Name)
		assert.True(t, servers.Serves(servers.Baton, sc.Name), sc.Name)
	}
	res, err := Run(context.Background(), Options{
		Scenarios: "plaintext",
		Targets:   []Target{{Name: servers.Floor, Builtin: true}},
		Params:    Params{Duration: 100 * time.Millisecond, Warmup: 0, Conns: []int{1}},
		Out:       t.TempDir(),
	})
	require.NoError(t, err)
	require.Len(t, res.Scenarios[0].Phases, 1)
	assert.Empty(t, res.Scenarios[0].Phases[0].Runs, "no floor run of plaintext")
}

// TestProcTimesSplit: procTimes tells user time (a spin) from kernel time (system calls).
// Each phase runs until its own clock moved (bounded), so a busy machine only slows it.
func TestProcTimesSplit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc")
	}
	times := func() (u, s time.Duration) {
		u, s, err := procTimes(os.Getpid())
		require.NoError(t, err)
		return u, s
	}
	deadline := time.Now().Add(20 * time.Second)
	u0, s0 := times()
	for u, _ := times(); u-u0 < 50*time.Millisecond; u, _ = times() { // spin in user space
		require.True(t, time.Now().Before(deadline), "no user time after 20 s of spinning")
		for x := 0; x < 1e6; x++ {
		}
	}
	u1, s1 := times()
	assert.Less(t, s1-s0, u1-u0, "a spin is mostly user time")

	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	var b [1]byte
	for _, s := times(); s-s1 < 50*time.Millisecond; _, s = times() { // system calls
		require.True(t, time.Now().Before(deadline), "no kernel time after 20 s of system calls")
		for range 2000 {
			_, _ = f.Write(b[:])
		}
	}
	_, ok := cpusBusy("0")
	assert.True(t, ok)
	_, ok = cpusBusy("x")
	assert.False(t, ok)
}
