package harness

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	gameBinOnce    sync.Once
	gameBin        string
	gameBinErr     error
	gameBinRelease = func() {}
)

// gameServerBinary builds examples/gameserver once per test binary (TestMain removes
// it once every test ran: -count=N reuses it), or skips the test when it cannot be built.
func gameServerBinary(t *testing.T) string {
	t.Helper()
	gameBinOnce.Do(func() {
		var release func()
		gameBin, release, gameBinErr = BuildGameServer(context.Background())
		if gameBinErr == nil {
			gameBinRelease = release
		}
	})
	if gameBinErr != nil {
		t.Skipf("skipping the game scenario: cannot build examples/gameserver with the go toolchain: %v", gameBinErr)
	}
	return gameBin
}

// TestGameScenario runs the game scenario at a tiny scale against the real gameserver
// binary: players are acknowledged with a latency of at least a few µs and at most a few
// ticks, matches end and are written in batches during the window, the rooms page
// yields tick figures, and the server's CPU and memory are sampled.
func TestGameScenario(t *testing.T) {
	bin := gameServerBinary(t)
	out := t.TempDir()
	res, err := Run(context.Background(), Options{
		Scenarios: "game",
		Targets:   []Target{{Name: "baton", Builtin: true}}, // ignored: game runs its own program
		Params: Params{Quick: true, GamePlayers: 8, GameServer: bin, GameMatch: 600 * time.Millisecond,
			Duration: 1500 * time.Millisecond, Warmup: 200 * time.Millisecond},
		Out: out,
	})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	sc := res.Scenarios[0]
	require.Empty(t, sc.Skipped)
	require.Len(t, sc.Phases, 1)
	require.Len(t, sc.Phases[0].Runs, 1)
	r := sc.Phases[0].Runs[0]
	require.Empty(t, r.Error)
	assert.Equal(t, "gameserver", r.Target)

	in, db := r.Group("input"), r.Group("db")
	require.NotNil(t, in)
	require.NotNil(t, db)
	assert.Equal(t, "ws", in.Mode)
	assert.Equal(t, "batch", db.Mode)
	assert.Positive(t, in.Requests, "inputs acknowledged")
	assert.Equal(t, int64(in.Requests), in.Latency.Count)
	// An input waits at most one tick plus the delays of a loaded machine.
	assert.Less(t, in.Latency.P50, int64(time.Second/time.Microsecond))

	ex, ok := r.Extra["game"].(GameExtra)
	require.True(t, ok)
	assert.Equal(t, 8, ex.Players)
	assert.Positive(t, ex.States)
	assert.Positive(t, ex.Arenas)
	assert.Positive(t, ex.TickLateP99WorstMs+ex.TickLateMaxMs, "tick lateness read from /debug/baton/rooms")
	assert.Positive(t, ex.Rejoins, "matches of 600 ms end within a 1.5 s window")
	assert.Positive(t, ex.DBBatches, "the writer wrote the finished matches in the window")
	assert.Equal(t, int64(ex.DBBatches), db.Latency.Count)
	assert.Positive(t, ex.DBMatches)

	require.NotNil(t, r.Server)
	assert.Positive(t, r.Server.RSSEnd)
	assert.Positive(t, r.Server.CPUSeconds)
	assert.Equal(t, "state", r.Server.Unit)

	names := map[string]bool{}
	for _, s := range res.Summary {
		names[s.Name] = true
	}
	for _, n := range []string{"game: input-to-snapshot p99", "game: tick lateness p99 (worst arena)", "game: server CPU", "game: database batch p99"} {
		assert.True(t, names[n], "summary item %q", n)
	}
}
