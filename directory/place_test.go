package directory

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChooseMostHeadroom(t *testing.T) {
	nodes := []NodeInfo{
		{ID: "c", Loops: 1, Status: Status{Load: Load{Utilisation: 0.5}}},
		{ID: "a", Loops: 1, Status: Status{Load: Load{Utilisation: 0.9}}},
		// Two loops at 70%: 0.6 loops of headroom, more than c's 0.5.
		{ID: "b", Loops: 2, Status: Status{Load: Load{Utilisation: 0.7}}},
	}
	p, err := Choose(nodes, nil, PlaceConfig{})
	require.NoError(t, err)
	require.Equal(t, "b", p.Node.ID)
	require.InDelta(t, 0.6, p.Headroom, 1e-9)
	require.Equal(t, []string{"a", "b", "c"}, ids(p.Candidates), "candidates in ID order")
	require.InDelta(t, 0.1, p.Candidates[0].Headroom, 1e-9)
}

func TestChoosePendingRooms(t *testing.T) {
	// b published before its last 30 claims: they count RoomCost each.
	nodes := []NodeInfo{
		{ID: "a", Loops: 1, Status: Status{Load: Load{Utilisation: 0.5, Rooms: 10}}},
		{ID: "b", Loops: 1, Status: Status{Load: Load{Utilisation: 0.3, Rooms: 10}}},
	}
	p, err := Choose(nodes, map[string]int{"a": 10, "b": 40}, PlaceConfig{RoomCost: 0.01})
	require.NoError(t, err)
	require.Equal(t, "a", p.Node.ID, "b's headroom: 0.7 - 30×0.01 = 0.4 < 0.5")
	require.Equal(t, 30, p.Candidates[1].Pending)
	require.Zero(t, p.Candidates[0].Pending)
	// Rooms released since the publication do not raise the headroom (Pending is not
	// negative): the published figure stands.
	p, err = Choose(nodes, map[string]int{"a": 0, "b": 0}, PlaceConfig{})
	require.NoError(t, err)
	require.Equal(t, "b", p.Node.ID)
	require.InDelta(t, 0.7, p.Headroom, 1e-9)
}

func TestChooseTies(t *testing.T) {
	nodes := []NodeInfo{{ID: "b", Loops: 1}, {ID: "a", Loops: 1}, {ID: "c", Loops: 1}}
	p, err := Choose(nodes, map[string]int{"a": 1, "b": 1, "c": 1}, PlaceConfig{})
	require.NoError(t, err)
	require.Equal(t, "a", p.Node.ID, "equal headroom and rooms: the smaller ID")
	// Published before any claim, equal load: the one with fewer pending rooms has more
	// headroom.
	p, err = Choose(nodes, map[string]int{"a": 2, "b": 1, "c": 2}, PlaceConfig{})
	require.NoError(t, err)
	require.Equal(t, "b", p.Node.ID)
}

func TestChooseDrainingAndNonsense(t *testing.T) {
	nodes := []NodeInfo{
		{ID: "a", Loops: 4, Status: Status{Draining: true}},
		{ID: "b", Loops: 1, Status: Status{Load: Load{Utilisation: math.NaN()}}},
		{ID: "c", Loops: 0, Status: Status{Load: Load{Utilisation: 1.5}}},
		{ID: "d", Loops: 1, Status: Status{Load: Load{Utilisation: -2}}},
	}
	p, err := Choose(nodes, nil, PlaceConfig{})
	require.NoError(t, err)
	require.Equal(t, "d", p.Node.ID, "an idle draining node gets nothing")
	require.Equal(t, "draining", p.Candidates[0].Skipped)
	require.Zero(t, p.Candidates[1].Headroom, "NaN utilisation counts as full")
	require.Zero(t, p.Candidates[2].Headroom, "utilisation is capped at 1 and loops at least 1")
	require.InDelta(t, 1.0, p.Headroom, 1e-9, "negative utilisation counts as idle")

	_, err = Choose(nodes[:1], nil, PlaceConfig{})
	require.ErrorIs(t, err, ErrNoNode)
	require.ErrorContains(t, err, "all draining")
	_, err = Choose(nil, nil, PlaceConfig{})
	require.ErrorIs(t, err, ErrNoNode)
}

func TestPlaceConfigValidate(t *testing.T) {
	require.ErrorContains(t, PlaceConfig{RoomCost: -1}.validate(), "PlaceConfig.RoomCost")
	require.ErrorContains(t, PlaceConfig{RoomCost: math.Inf(1)}.validate(), "PlaceConfig.RoomCost")
	require.NoError(t, PlaceConfig{}.validate())
}

func ids(cs []Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Node.ID
	}
	return out
}
