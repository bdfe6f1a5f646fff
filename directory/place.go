package directory

import (
	"fmt"
	"math"
	"sort"
)

// PlaceConfig tunes placement (Choose).
type PlaceConfig struct {
	// RoomCost is the load, in loops, that a room claimed since its node last published
	// its load is assumed to add until the node publishes again: a new room's cost is not
	// known before it runs. 0 means 0.01 (a hundredth of a loop). It keeps rooms placed
	// in a burst from all going to the same node.
	RoomCost float64
}

// defaultRoomCost is PlaceConfig.RoomCost's default: a hundredth of a loop, 0.5 ms of
// work per tick at 20 Hz.
const defaultRoomCost = 0.01

// withDefaults returns c with its zero fields set to their defaults.
func (c PlaceConfig) withDefaults() PlaceConfig {
	if c.RoomCost == 0 {
		c.RoomCost = defaultRoomCost
	}
	return c
}

// validate reports the first invalid field of c, naming it.
func (c PlaceConfig) validate() error {
	if c.RoomCost < 0 || math.IsNaN(c.RoomCost) || math.IsInf(c.RoomCost, 0) {
		return fmt.Errorf("directory: PlaceConfig.RoomCost (%v) must be a positive number of loops", c.RoomCost)
	}
	return nil
}

// Placement is Place's answer: the chosen node and the figures of every candidate.
type Placement struct {
	Node       NodeInfo    // the chosen node
	Headroom   float64     // its headroom, in loops, before the new room
	Candidates []Candidate // every live node, in ID order
}

// Candidate is one node's figures in a placement.
type Candidate struct {
	Node NodeInfo
	// Claimed is the rooms the directory holds for the node now; Pending is how many of
	// them its published load does not count yet (Claimed minus Load.Rooms, at least 0).
	Claimed, Pending int
	// Headroom is the node's spare capacity in loops: Loops × (1 − Utilisation) minus
	// Pending × RoomCost.
	Headroom float64
	// Skipped says why the node could not take the room ("draining"), empty if it could.
	Skipped string
}

// headroomTie is how close two headrooms must be to count as equal.
const headroomTie = 1e-9

// Choose picks the node a new room should go to among nodes (the live records): the one
// with the most headroom (Candidate.Headroom), never a draining one; among equal headroom
// the one with fewer claimed rooms, then the smaller ID. claimed gives each node's
// claimed rooms (a node missing from it has none). A node whose headroom is zero or less
// is still chosen if it has the most: admission, not placement, refuses work. It returns
// ErrNoNode if every node is draining or there is none. Any goroutine; pure.
func Choose(nodes []NodeInfo, claimed map[string]int, cfg PlaceConfig) (Placement, error) {
	cfg = cfg.withDefaults()
	cands := make([]Candidate, len(nodes))
	best := -1
	for i, n := range nodes {
		c := Candidate{Node: n, Claimed: claimed[n.ID]}
		c.Pending = max(0, c.Claimed-n.Load.Rooms)
		loops := float64(max(1, n.Loops))
		u := n.Load.Utilisation
		if math.IsNaN(u) {
			u = 1 // a node that reports nonsense is treated as full
		}
		u = min(1, max(0, u))
		c.Headroom = loops*(1-u) - float64(c.Pending)*cfg.RoomCost
		if n.Draining {
			c.Skipped = "draining"
		}
		cands[i] = c
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].Node.ID < cands[j].Node.ID })
	for i, c := range cands {
		if c.Skipped != "" {
			continue
		}
		if best < 0 || better(c, cands[best]) {
			best = i
		}
	}
	if best < 0 {
		return Placement{Candidates: cands}, fmt.Errorf("%w (%d live, all draining)", ErrNoNode, len(cands))
	}
	return Placement{Node: cands[best].Node, Headroom: cands[best].Headroom, Candidates: cands}, nil
}

// better reports whether a should be chosen over b (b has the smaller or equal ID).
func better(a, b Candidate) bool {
	if d := a.Headroom - b.Headroom; math.Abs(d) > headroomTie {
		return d > 0
	}
	return a.Claimed < b.Claimed
}
