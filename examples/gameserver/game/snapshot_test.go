package game

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMatchSnapshotRoundTrip: a match encoded mid-game (MarshalJSON) and decoded into a
// fresh match of the same Config (UnmarshalJSON) plays on exactly as the original: the
// same positions, scores, orbs (the random source's state travels) and tick, step after
// step. A null player or a bad random state is refused.
func TestMatchSnapshotRoundTrip(t *testing.T) {
	cfg := testConfig()
	a, err := NewMatch("m-1", cfg, 7)
	require.NoError(t, err)
	require.NoError(t, a.Join("ann", "Ann", false))
	require.NoError(t, a.Join("bob", "Bob", true))
	step := func(m *Match, i int) {
		_ = m.Apply(Input{Player: "ann", DX: 1, DY: float64(i%3) - 1, Seq: uint32(i)})
		_ = m.Apply(m.BotInput("bob"))
		m.Step(50 * time.Millisecond)
	}
	for i := range 40 {
		step(a, i)
	}
	b64, err := json.Marshal(a)
	require.NoError(t, err)
	b, err := NewMatch("other", cfg, 99)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b64, b))
	require.Equal(t, string(a.AppendSnapshot(nil)), string(b.AppendSnapshot(nil)))
	for i := 40; i < 200; i++ {
		step(a, i)
		step(b, i)
		require.Equal(t, string(a.AppendSnapshot(nil)), string(b.AppendSnapshot(nil)), "step %d", i)
	}
	rng, err := a.src.MarshalBinary()
	require.NoError(t, err)
	null, err := json.Marshal(matchState{RNG: rng, Players: []*Player{nil}})
	require.NoError(t, err)
	require.ErrorContains(t, json.Unmarshal(null, b), "null player")
	require.ErrorContains(t, json.Unmarshal([]byte(`{"rng":"AA==","players":[]}`), b), "rng")
}
