package game

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const tick = 50 * time.Millisecond

func testConfig() Config {
	c := DefaultConfig()
	c.Duration = 10 * time.Second
	c.ScoreLimit = 0
	return c
}

func TestConfigValidateNamesTheField(t *testing.T) {
	for field, mutate := range map[string]func(*Config){
		"Config.MaxPlayers": func(c *Config) { c.MaxPlayers = 0 },
		"Config.Width":      func(c *Config) { c.Width = -1 },
		"Config.Speed":      func(c *Config) { c.Speed = 0 },
		"Config.Orbs":       func(c *Config) { c.Orbs = 0 },
		"Config.Duration":   func(c *Config) { c.Duration = 0 },
		"Config.ScoreLimit": func(c *Config) { c.ScoreLimit = -1 },
		"Config.Radius":     func(c *Config) { c.Radius = 400 },
	} {
		c := DefaultConfig()
		mutate(&c)
		err := c.Validate()
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), field)
		_, err = NewMatch("m", c, 1)
		assert.Error(t, err, field)
	}
	require.NoError(t, DefaultConfig().Validate())
}

func TestJoinLimitsAndDuplicates(t *testing.T) {
	c := testConfig()
	c.MaxPlayers = 2
	m, err := NewMatch("m", c, 1)
	require.NoError(t, err)
	require.NoError(t, m.Join("a", "ann", false))
	assert.ErrorIs(t, m.Join("a", "ann", false), ErrDuplicate)
	require.NoError(t, m.Join("b", "bob", true))
	assert.ErrorIs(t, m.Join("c", "cat", false), ErrFull)
	m.Leave("a")
	require.NoError(t, m.Join("a", "ann", false), "a player who left may rejoin")
	assert.Equal(t, 1, m.Humans())
	assert.ErrorIs(t, m.Apply(Input{Player: "zed"}), ErrUnknownPlayer)
}

func TestMovementClampsInputAndStopsAtWalls(t *testing.T) {
	m, err := NewMatch("m", testConfig(), 7)
	require.NoError(t, err)
	require.NoError(t, m.Join("a", "ann", false))
	p := m.Player("a")
	p.X, p.Y = 400, 300
	require.NoError(t, m.Apply(Input{Player: "a", DX: 5, DY: 0, Seq: 3}))
	assert.InDelta(t, 1.0, p.DX, 1e-9, "components clamp to 1")
	assert.Equal(t, uint32(3), p.LastSeq)
	m.Step(tick)
	assert.InDelta(t, 400+220*0.05, p.X, 1e-9, "speed x dt")
	assert.InDelta(t, 300, p.Y, 1e-9)

	require.NoError(t, m.Apply(Input{Player: "a", DX: 1, DY: 1}))
	assert.InDelta(t, 1.0, math.Hypot(p.DX, p.DY), 1e-9, "a diagonal is normalised")
	require.NoError(t, m.Apply(Input{Player: "a", DX: math.NaN(), DY: -1}))
	assert.Equal(t, 0.0, p.DX, "NaN counts as 0")
	for range 200 {
		m.Step(tick)
	}
	assert.InDelta(t, m.Config().Radius, p.Y, 1e-9, "the wall stops the player")
}

func TestOrbScoresAndMoves(t *testing.T) {
	m, err := NewMatch("m", testConfig(), 3)
	require.NoError(t, err)
	require.NoError(t, m.Join("a", "ann", false))
	p := m.Player("a")
	o := m.orbs[0]
	p.X, p.Y = o.X, o.Y
	m.Step(tick)
	assert.GreaterOrEqual(t, p.Score, 1)
	assert.NotEqual(t, o, m.orbs[0], "a scored orb moves")
}

func TestMatchEndsOnTime(t *testing.T) {
	m, err := NewMatch("m", testConfig(), 1)
	require.NoError(t, err)
	require.NoError(t, m.Join("a", "ann", false))
	steps := 0
	for !m.Step(30 * time.Millisecond) {
		steps++
		require.Less(t, steps, 1000)
	}
	assert.Equal(t, EndTime, m.Result().Reason)
	assert.Equal(t, testConfig().Duration, m.Elapsed(), "the last step is cut to the duration")
	assert.ErrorIs(t, m.Apply(Input{Player: "a"}), ErrOver)
	assert.ErrorIs(t, m.Join("b", "bob", false), ErrOver)
	tickBefore := m.Tick()
	assert.True(t, m.Step(tick))
	assert.Equal(t, tickBefore, m.Tick(), "an ended match does not step")
}

func TestBotsReachScoreLimit(t *testing.T) {
	c := DefaultConfig()
	c.ScoreLimit = 5
	c.Duration = 10 * time.Minute
	m, err := NewMatch("m", c, 11)
	require.NoError(t, err)
	for _, id := range []PlayerID{"b1", "b2", "b3"} {
		require.NoError(t, m.Join(id, string(id), true))
	}
	for i := 0; !m.Over(); i++ {
		require.Less(t, i, 20*60*10, "bots never finished")
		for _, p := range m.Players() {
			require.NoError(t, m.Apply(m.BotInput(p.ID)))
		}
		m.Step(tick)
	}
	res := m.Result()
	assert.Equal(t, EndScore, res.Reason)
	require.Len(t, res.Players, 3)
	assert.Equal(t, 5, res.Players[0].Score, "the winner stopped at the limit")
	assert.Equal(t, 1, res.Players[0].Place)
	for i := 1; i < len(res.Players); i++ {
		assert.LessOrEqual(t, res.Players[i].Score, res.Players[i-1].Score, "best first")
	}
}

func TestBotsSpreadOverOrbs(t *testing.T) {
	m, err := NewMatch("m", testConfig(), 1)
	require.NoError(t, err)
	require.NoError(t, m.Join("near", "near", true))
	require.NoError(t, m.Join("far", "far", true))
	m.orbs = []Orb{{X: 100, Y: 100}, {X: 700, Y: 100}}
	m.Player("near").X, m.Player("near").Y = 110, 100
	m.Player("far").X, m.Player("far").Y = 200, 100
	assert.InDelta(t, -1, m.BotInput("near").DX, 1e-9, "the nearer bot takes the orb")
	assert.InDelta(t, 1, m.BotInput("far").DX, 1e-9, "the other bot goes for the orb nobody is closer to")
	m.orbs = []Orb{{X: 100, Y: 100}}
	assert.InDelta(t, -1, m.BotInput("far").DX, 1e-9, "every orb contested: the nearest")
}

func TestResultSharesPlacesOnTies(t *testing.T) {
	m, err := NewMatch("m", testConfig(), 1)
	require.NoError(t, err)
	for _, id := range []PlayerID{"a", "b", "c"} {
		require.NoError(t, m.Join(id, string(id), false))
	}
	m.Player("a").Score, m.Player("b").Score, m.Player("c").Score = 2, 5, 2
	m.End(EndShutdown)
	m.End(EndTime) // no effect
	res := m.Result()
	assert.Equal(t, EndShutdown, res.Reason)
	places := map[PlayerID]int{}
	for _, p := range res.Players {
		places[p.ID] = p.Place
	}
	assert.Equal(t, map[PlayerID]int{"b": 1, "a": 2, "c": 2}, places)
}

func TestMatchEndsWhenHumansLeave(t *testing.T) {
	m, err := NewMatch("m", testConfig(), 1)
	require.NoError(t, err)
	require.NoError(t, m.Join("a", "ann", false))
	require.NoError(t, m.Join("bot", "bot", true))
	assert.False(t, m.Step(tick))
	m.Leave("a")
	assert.True(t, m.Step(tick))
	assert.Equal(t, EndEmpty, m.Result().Reason)

	bots, err := NewMatch("m2", testConfig(), 1)
	require.NoError(t, err)
	require.NoError(t, bots.Join("bot", "bot", true))
	assert.False(t, bots.Step(tick), "a bots-only match runs to its end")
}

func TestSnapshotIsJSON(t *testing.T) {
	m, err := NewMatch("m-1", testConfig(), 1)
	require.NoError(t, err)
	require.NoError(t, m.Join("a", "ann \"<the>\" \u2028", false))
	require.NoError(t, m.Apply(Input{Player: "a", DX: 1, Seq: 9}))
	m.Step(tick)
	var snap struct {
		Room    string `json:"room"`
		Seq     uint64 `json:"seq"`
		LeftMS  int64  `json:"left_ms"`
		Over    bool   `json:"over"`
		W, H    float64
		Players []struct {
			ID    string  `json:"id"`
			Name  string  `json:"name"`
			X     float64 `json:"x"`
			Score int     `json:"score"`
			Seq   uint32  `json:"seq"`
		} `json:"players"`
		Orbs [][2]float64 `json:"orbs"`
	}
	raw := m.AppendSnapshot(nil)
	require.NoError(t, json.Unmarshal(raw, &snap), "%s", raw)
	assert.Equal(t, "m-1", snap.Room)
	assert.Equal(t, uint64(1), snap.Seq)
	assert.Equal(t, int64(9950), snap.LeftMS)
	assert.Equal(t, 800.0, snap.W)
	require.Len(t, snap.Players, 1)
	assert.Equal(t, "ann \"<the>\" \u2028", snap.Players[0].Name)
	assert.Equal(t, uint32(9), snap.Players[0].Seq)
	assert.Len(t, snap.Orbs, testConfig().Orbs)
}

func TestSameSeedSameMatch(t *testing.T) {
	play := func() []byte {
		m, err := NewMatch("m", testConfig(), 42)
		require.NoError(t, err)
		require.NoError(t, m.Join("a", "a", true))
		require.NoError(t, m.Join("b", "b", true))
		for range 100 {
			for _, p := range m.Players() {
				require.NoError(t, m.Apply(m.BotInput(p.ID)))
			}
			m.Step(tick)
		}
		return m.AppendSnapshot(nil)
	}
	assert.Equal(t, string(play()), string(play()))
}

func FuzzApplyStep(f *testing.F) {
	f.Add(1.0, -1.0, int64(50))
	f.Add(math.Inf(1), math.NaN(), int64(1))
	f.Fuzz(func(t *testing.T, dx, dy float64, ms int64) {
		m, err := NewMatch("m", testConfig(), 5)
		require.NoError(t, err)
		require.NoError(t, m.Join("a", "a", false))
		require.NoError(t, m.Apply(Input{Player: "a", DX: dx, DY: dy}))
		m.Step(time.Duration(ms%10_000) * time.Millisecond)
		p := m.Player("a")
		c := m.Config()
		require.False(t, math.IsNaN(p.X) || math.IsNaN(p.Y))
		require.True(t, p.X >= c.Radius && p.X <= c.Width-c.Radius, "x %v", p.X)
		require.True(t, p.Y >= c.Radius && p.Y <= c.Height-c.Radius, "y %v", p.Y)
		require.True(t, json.Valid(m.AppendSnapshot(nil)))
	})
}
