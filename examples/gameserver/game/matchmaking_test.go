package game

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)

func TestMatchmakerConfigValidate(t *testing.T) {
	require.NoError(t, MatchmakerConfig{}.Validate(), "zero means defaults")
	err := MatchmakerConfig{Size: 2, MinPlayers: 3}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MatchmakerConfig.MinPlayers")
	err = MatchmakerConfig{MaxWait: -1}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MatchmakerConfig.MaxWait")
	_, err = NewMatchmaker(MatchmakerConfig{Size: -1})
	assert.ErrorContains(t, err, "MatchmakerConfig.Size")
}

func TestFullGroupsFormAtOnce(t *testing.T) {
	mm, err := NewMatchmaker(MatchmakerConfig{Size: 2, MaxWait: time.Second})
	require.NoError(t, err)
	var ids []string
	for _, p := range []PlayerID{"a", "b", "c", "d", "e"} {
		tk, err := mm.Enqueue(p, string(p), t0)
		require.NoError(t, err)
		ids = append(ids, tk.ID)
	}
	_, err = mm.Enqueue("a", "a", t0)
	assert.ErrorIs(t, err, ErrQueued)
	groups := mm.Form(t0)
	require.Len(t, groups, 2)
	assert.Equal(t, PlayerID("a"), groups[0].Tickets[0].Player, "oldest first")
	assert.Equal(t, PlayerID("d"), groups[1].Tickets[1].Player)
	assert.Equal(t, 1, mm.Queued())
	mm.Assign(groups[0], "m1", t0)
	tk, ok := mm.Ticket(ids[0])
	require.True(t, ok)
	assert.Equal(t, TicketAssigned, tk.State)
	assert.Equal(t, "m1", tk.Match)
	_, err = mm.Enqueue("a", "a", t0)
	assert.NoError(t, err, "an assigned player may queue again")
}

func TestShortGroupStartsAfterMaxWaitWithBots(t *testing.T) {
	mm, err := NewMatchmaker(MatchmakerConfig{Size: 4, MaxWait: 3 * time.Second, FillWithBots: true})
	require.NoError(t, err)
	_, err = mm.Enqueue("a", "a", t0)
	require.NoError(t, err)
	assert.Empty(t, mm.Form(t0.Add(2*time.Second)))
	_, err = mm.Enqueue("b", "b", t0.Add(2*time.Second))
	require.NoError(t, err)
	groups := mm.Form(t0.Add(3 * time.Second))
	require.Len(t, groups, 1)
	assert.Len(t, groups[0].Tickets, 2)
	assert.Equal(t, 2, groups[0].Bots)
	assert.Zero(t, mm.Queued())
}

func TestMinPlayersHoldsAShortGroup(t *testing.T) {
	mm, err := NewMatchmaker(MatchmakerConfig{Size: 4, MinPlayers: 2, MaxWait: time.Second})
	require.NoError(t, err)
	_, err = mm.Enqueue("a", "a", t0)
	require.NoError(t, err)
	assert.Empty(t, mm.Form(t0.Add(time.Hour)))
	_, err = mm.Enqueue("b", "b", t0.Add(time.Hour))
	require.NoError(t, err)
	groups := mm.Form(t0.Add(time.Hour))
	require.Len(t, groups, 1)
	assert.Zero(t, groups[0].Bots, "no bots unless FillWithBots")
}

func TestCancelAndForget(t *testing.T) {
	mm, err := NewMatchmaker(MatchmakerConfig{Size: 2, Keep: time.Minute})
	require.NoError(t, err)
	a, err := mm.Enqueue("a", "a", t0)
	require.NoError(t, err)
	assert.True(t, mm.Cancel(a.ID, t0))
	assert.False(t, mm.Cancel(a.ID, t0), "only a queued ticket cancels")
	assert.Equal(t, TicketCancelled, a.State)
	assert.Zero(t, mm.Queued())
	assert.Empty(t, mm.Form(t0.Add(time.Hour)))
	assert.Empty(t, mm.Forget(t0.Add(59*time.Second)))
	assert.Equal(t, []string{a.ID}, mm.Forget(t0.Add(time.Minute)))
	_, ok := mm.Ticket(a.ID)
	assert.False(t, ok)
}

func TestTicketIDsAreRandomAndSecretsCheck(t *testing.T) {
	mm, err := NewMatchmaker(MatchmakerConfig{Size: 8})
	require.NoError(t, err)
	seen := map[string]bool{}
	for i := range 100 {
		tk, err := mm.Enqueue(PlayerID("p"+string(rune('a'+i%26))+string(rune('a'+i/26))), "x", t0)
		require.NoError(t, err)
		assert.Len(t, tk.ID, 1+2*TicketIDBytes)
		assert.False(t, seen[tk.ID] || seen[tk.Secret], "ids and secrets do not repeat")
		seen[tk.ID], seen[tk.Secret] = true, true
		assert.True(t, tk.SecretMatches(tk.Secret))
		assert.False(t, tk.SecretMatches(""))
		assert.False(t, tk.SecretMatches(tk.Secret[:len(tk.Secret)-1]))
	}
}

func TestFormAtMostAndExpire(t *testing.T) {
	mm, err := NewMatchmaker(MatchmakerConfig{Size: 2, MaxWait: time.Second, FillWithBots: true})
	require.NoError(t, err)
	for i, p := range []PlayerID{"a", "b", "c", "d", "e"} {
		_, err := mm.Enqueue(p, string(p), t0.Add(time.Duration(i)*time.Second))
		require.NoError(t, err)
	}
	assert.Empty(t, mm.FormAtMost(t0, 0), "no room: no group")
	groups := mm.FormAtMost(t0, 1)
	require.Len(t, groups, 1, "one full group of two, the rest wait")
	assert.Equal(t, []PlayerID{"c", "d", "e"}, mm.QueuedPlayers())
	assert.True(t, mm.IsQueued("c"))
	assert.False(t, mm.IsQueued("a"))
	gone := mm.Expire(t0.Add(4500*time.Millisecond), time.Second) // c (t0+2s) and d (t0+3s) are past 1 s, e (t0+4s) is not
	require.Len(t, gone, 2)
	assert.Equal(t, PlayerID("c"), gone[0].Player)
	assert.Equal(t, PlayerID("d"), gone[1].Player)
	assert.Equal(t, TicketCancelled, gone[0].State)
	assert.Equal(t, []PlayerID{"e"}, mm.QueuedPlayers())
	assert.False(t, mm.IsQueued("c"), "an expired ticket's player may queue again")
}
