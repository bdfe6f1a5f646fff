package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/examples/gameserver/game"
)

var ended = time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)

func result(id string, scores map[game.PlayerID]int, bots ...game.PlayerID) Finished {
	r := game.Result{Match: id, Reason: game.EndTime, Ticks: 100, Duration: 5 * time.Second}
	isBot := map[game.PlayerID]bool{}
	for _, b := range bots {
		isBot[b] = true
	}
	for p, s := range scores {
		r.Players = append(r.Players, game.PlayerResult{ID: p, Name: "name-" + string(p), Score: s, Bot: isBot[p]})
	}
	best := 0
	for _, p := range r.Players {
		best = max(best, p.Score)
	}
	for i := range r.Players {
		r.Players[i].Place = 2
		if r.Players[i].Score == best {
			r.Players[i].Place = 1
		}
	}
	return Finished{Result: r, Ended: ended}
}

func TestRecordLeaderboardAndReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "data", "game.db") // the directory does not exist yet
	s, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, s.SaveProfile(ctx, "ann", "Ann", false, ended))

	n, err := s.RecordMatches(ctx, []Finished{
		result("m1", map[game.PlayerID]int{"ann": 5, "bob": 3, "bot1": 7}, "bot1"),
		result("m2", map[game.PlayerID]int{"ann": 4, "bob": 9}),
	})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	n, err = s.RecordMatches(ctx, []Finished{result("m2", map[game.PlayerID]int{"ann": 4, "bob": 9})})
	require.NoError(t, err)
	assert.Zero(t, n, "a match is recorded once")

	lb, err := s.Leaderboard(ctx, 10, false)
	require.NoError(t, err)
	require.Len(t, lb, 2, "bots left out")
	assert.Equal(t, Entry{Rank: 1, ID: "bob", Name: "name-bob", Total: 12, Best: 9, Wins: 1, Matches: 2}, lb[0])
	assert.Equal(t, Entry{Rank: 2, ID: "ann", Name: "Ann", Total: 9, Best: 5, Wins: 0, Matches: 2}, lb[1], "the saved name is kept")
	withBots, err := s.Leaderboard(ctx, 1, true)
	require.NoError(t, err)
	require.Len(t, withBots, 1)
	assert.Equal(t, game.PlayerID("bob"), withBots[0].ID)

	scores, ok, err := s.MatchScores(ctx, "m1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, map[game.PlayerID]int{"ann": 5, "bob": 3, "bot1": 7}, scores)
	require.NoError(t, s.Close())

	s, err = Open(path)
	require.NoError(t, err, "reopen")
	defer s.Close()
	lb2, err := s.Leaderboard(ctx, 10, false)
	require.NoError(t, err)
	assert.Equal(t, lb, lb2, "the leaderboard survives a restart")
	p, ok, err := s.Profile(ctx, "ann")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, ended, p.Created)
	_, ok, err = s.Profile(ctx, "nobody")
	require.NoError(t, err)
	assert.False(t, ok)
	m, err := s.Matches(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, m)
}

func TestRecordMatchesRollsBackOnError(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "game.db"))
	require.NoError(t, err)
	defer s.Close()
	bad := result("m1", map[game.PlayerID]int{"ann": 5})
	bad.Result.Players = append(bad.Result.Players, bad.Result.Players[0]) // the same player twice: the scores key fails
	_, err = s.RecordMatches(ctx, []Finished{result("m0", map[game.PlayerID]int{"bob": 1}), bad})
	require.Error(t, err)
	n, err := s.Matches(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "the whole batch rolled back")
}

func TestOpenRejectsEmptyPath(t *testing.T) {
	_, err := Open("")
	assert.Error(t, err)
}
