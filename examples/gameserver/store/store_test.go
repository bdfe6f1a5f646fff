package store

import (
	"context"
	"database/sql"
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
	key, err := s.SaveProfile(ctx, "ann", "Ann", "", ended)
	require.NoError(t, err)
	require.NotEmpty(t, key, "a new player gets a key")

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

func TestForgetUnplayed(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "game.db"))
	require.NoError(t, err)
	defer s.Close()
	old := ended.Add(-time.Hour)
	for _, id := range []game.PlayerID{"idle", "queued", "played"} {
		_, err := s.SaveProfile(ctx, id, string(id), "", old)
		require.NoError(t, err)
	}
	_, err = s.SaveProfile(ctx, "new", "new", "", ended)
	require.NoError(t, err)
	_, err = s.RecordMatches(ctx, []Finished{result("m1", map[game.PlayerID]int{"played": 1})})
	require.NoError(t, err)
	n, err := s.ForgetUnplayed(ctx, ended, []game.PlayerID{"queued"})
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only idle goes: queued is kept, played played, new is too new")
	n, err = s.ForgetUnplayed(ctx, ended, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "with nothing to keep, queued goes too")
	left, err := s.Players(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, left)
}

func TestPlayerKeys(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "game.db"))
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.CheckKey(ctx, "ann", ""), "an unknown id needs no key")
	key, err := s.SaveProfile(ctx, "ann", "Ann", "", ended)
	require.NoError(t, err)
	require.NotEmpty(t, key)
	assert.ErrorIs(t, s.CheckKey(ctx, "ann", ""), ErrKeyRequired)
	assert.ErrorIs(t, s.CheckKey(ctx, "ann", "nope"), ErrWrongKey)
	assert.NoError(t, s.CheckKey(ctx, "ann", key))
	_, err = s.SaveProfile(ctx, "ann", "Mallory", "nope", ended)
	assert.ErrorIs(t, err, ErrWrongKey)
	_, err = s.SaveProfile(ctx, "ann", "Mallory", "", ended)
	assert.ErrorIs(t, err, ErrKeyRequired)
	p, _, err := s.Profile(ctx, "ann")
	require.NoError(t, err)
	assert.Equal(t, "Ann", p.Name, "refused saves change nothing")
	again, err := s.SaveProfile(ctx, "ann", "Ann B", key, ended)
	require.NoError(t, err)
	assert.Empty(t, again, "a key is issued once")
	p, _, err = s.Profile(ctx, "ann")
	require.NoError(t, err)
	assert.Equal(t, "Ann B", p.Name)

	// A row with no key (written by an older version, or by RecordMatches) is claimed by
	// the first SaveProfile, which issues its key.
	_, err = s.RecordMatches(ctx, []Finished{result("m1", map[game.PlayerID]int{"old": 1})})
	require.NoError(t, err)
	require.NoError(t, s.CheckKey(ctx, "old", ""))
	k2, err := s.SaveProfile(ctx, "old", "Old", "", ended)
	require.NoError(t, err)
	assert.NotEmpty(t, k2)
	assert.ErrorIs(t, s.CheckKey(ctx, "old", ""), ErrKeyRequired)
}

func TestOpenMigratesAnOlderFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE players (id TEXT PRIMARY KEY, name TEXT NOT NULL, bot INTEGER NOT NULL DEFAULT 0,
		created_ns INTEGER NOT NULL, matches INTEGER NOT NULL DEFAULT 0, wins INTEGER NOT NULL DEFAULT 0,
		total INTEGER NOT NULL DEFAULT 0, best INTEGER NOT NULL DEFAULT 0);
		INSERT INTO players (id, name, created_ns) VALUES ('ann', 'Ann', 1)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	s, err := Open(path)
	require.NoError(t, err, "a file without players.key_hash opens")
	defer s.Close()
	require.NoError(t, s.CheckKey(ctx, "ann", ""), "its players have no key yet")
	key, err := s.SaveProfile(ctx, "ann", "Ann", "", ended)
	require.NoError(t, err)
	assert.NotEmpty(t, key, "the first to play as ann claims the id")
}

// TestStaleTokenRefused: a result carrying a fencing token older than the highest written
// for its room is refused (a node that lost the room cannot write over its new owner's
// results); the same or a newer token is accepted, and token 0 is not fenced.
func TestStaleTokenRefused(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "game.db"))
	require.NoError(t, err)
	defer s.Close()
	fenced := func(id string, token int64, score int) Finished {
		f := result(id, map[game.PlayerID]int{"ann": score})
		f.Room, f.Token = "arena-x", token
		return f
	}
	n, err := s.RecordMatches(ctx, []Finished{fenced("new-owner", 9, 5)})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	n, err = s.RecordMatches(ctx, []Finished{fenced("stale-owner", 5, 100)})
	require.NoError(t, err)
	assert.Zero(t, n, "a result with an older token is refused")
	n, err = s.RecordMatches(ctx, []Finished{fenced("same-owner", 9, 1), fenced("newer", 12, 1), result("unfenced", map[game.PlayerID]int{"ann": 1})})
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	lb, err := s.Leaderboard(ctx, 10, true)
	require.NoError(t, err)
	require.Len(t, lb, 1)
	assert.Equal(t, 8, lb[0].Total, "the stale result's 100 points are not counted")
}
