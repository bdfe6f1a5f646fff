// Package directorytest is the conformance suite of room directory backends: Run checks
// that a backend keeps the promises of package directory (fencing tokens, exclusive
// claims, lease lapse, compare-and-swap moves, placement by headroom, draining). Every
// backend's tests call it: directory's for Embedded, directory/etcd's against a real etcd.
package directorytest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/directory"
)

// Factory returns a fresh, empty backend for one subtest; it registers its own cleanup
// with t. It runs on the subtest's goroutine.
type Factory func(t *testing.T) directory.Opener

// testTimeout bounds each subtest.
const testTimeout = 60 * time.Second

// Run runs the conformance suite against the backends newBackend returns, one per
// subtest. Call it from a test's goroutine; the subtests run one after another.
func Run(t *testing.T, newBackend Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"OpenPublishesRecord", testOpenPublishesRecord},
		{"ClaimIsExclusive", testClaimIsExclusive},
		{"ConcurrentClaimsOneWinner", testConcurrentClaims},
		{"TokensIncreaseAcrossOwners", testTokensIncrease},
		{"ReleaseNeedsCurrentToken", testRelease},
		{"MoveComparesToken", testMove},
		{"KeepAliveHoldsLease", testKeepAliveHolds},
		{"LapsedLeaseFreesRoomsAndRecord", testLapse},
		{"CloseFreesRooms", testClose},
		{"PlacementByHeadroom", testPlacementByHeadroom},
		{"PlacementSpreadsEqualNodes", testPlacementSpread},
		{"DrainingNodesGetNothing", testDraining},
		{"InvalidArguments", testInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			tc.fn(t, &suite{t: t, ctx: ctx, backend: newBackend(t)})
		})
	}
}

type suite struct {
	t       *testing.T
	ctx     context.Context
	backend directory.Opener
}

// open opens node id with the given TTL (0: the default) and keeps its lease alive from a
// goroutine until the subtest ends, unless keep is false.
func (s *suite) open(id string, ttl time.Duration, keep bool) directory.Directory {
	t := s.t
	t.Helper()
	cfg := directory.Config{Node: id, PublicAddr: "pub-" + id + ":1", InternalAddr: "int-" + id + ":2", Loops: 1, TTL: ttl}
	d, err := s.backend.Open(s.ctx, cfg)
	require.NoError(t, err, "open node %q", id)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	if keep {
		keepAlive(t, d, cfg.KeepAlivePeriod())
	}
	return d
}

// keepAlive renews d's lease every period from a goroutine until the test ends.
func keepAlive(t *testing.T, d directory.Directory, period time.Duration) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				ctx, cancel := context.WithTimeout(context.Background(), period)
				_, _ = d.KeepAlive(ctx)
				cancel()
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

func testOpenPublishesRecord(t *testing.T, s *suite) {
	a := s.open("a", 0, true)
	require.Equal(t, "a", a.Node())
	require.True(t, a.Valid(), "a fresh lease is valid")
	l := a.Lease()
	require.NotZero(t, l.ID)
	require.GreaterOrEqual(t, l.TTL, directory.DefaultTTL)
	require.True(t, time.Now().Before(l.ValidUntil()))
	require.True(t, l.ValidUntil().Before(l.Deadline))

	nodes, err := a.Nodes(s.ctx)
	require.NoError(t, err)
	require.Equal(t, []directory.NodeInfo{{ID: "a", PublicAddr: "pub-a:1", InternalAddr: "int-a:2", Loops: 1}}, nodes)

	st := directory.Status{Draining: true, Load: directory.Load{Utilisation: 0.5, RoomShare: 0.25, Rooms: 3, Players: 12}}
	require.NoError(t, a.Publish(s.ctx, st))
	b := s.open("b", 0, true)
	nodes, err = b.Nodes(s.ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	assert.Equal(t, directory.NodeInfo{ID: "a", PublicAddr: "pub-a:1", InternalAddr: "int-a:2", Loops: 1, Status: st}, nodes[0])
	assert.Equal(t, "b", nodes[1].ID)

	_, err = s.backend.Open(s.ctx, directory.Config{Node: "a"})
	require.ErrorIs(t, err, directory.ErrNodeInUse, "a second live node with the same ID")
	_, err = s.backend.Open(s.ctx, directory.Config{Node: "x/y"})
	require.ErrorContains(t, err, "Config.Node", "an invalid ID names the field")
}

func testClaimIsExclusive(t *testing.T, s *suite) {
	a, b := s.open("a", 0, true), s.open("b", 0, true)
	c, err := a.Claim(s.ctx, "room-1")
	require.NoError(t, err)
	require.Equal(t, "room-1", c.Room)
	require.Equal(t, "a", c.Node)
	require.Equal(t, "pub-a:1", c.PublicAddr)
	require.Equal(t, "int-a:2", c.InternalAddr)
	require.Positive(t, c.Token)

	for _, d := range []directory.Directory{b, a} {
		_, err = d.Claim(s.ctx, "room-1")
		require.ErrorIs(t, err, directory.ErrAlreadyOwned, "node %s claims an owned room", d.Node())
		var owned *directory.OwnedError
		require.ErrorAs(t, err, &owned)
		require.Equal(t, c, owned.Owner, "the error names the owner and its token")
		require.Contains(t, err.Error(), `"a"`)
	}
	for _, d := range []directory.Directory{a, b} {
		got, err := d.Lookup(s.ctx, "room-1")
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	_, err = b.Lookup(s.ctx, "room-2")
	require.ErrorIs(t, err, directory.ErrNotClaimed)

	rooms, err := b.Rooms(s.ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []directory.Claim{c}, rooms)
	rooms, err = a.Rooms(s.ctx, "b")
	require.NoError(t, err)
	require.Empty(t, rooms)
}

func testConcurrentClaims(t *testing.T, s *suite) {
	const nodes, rounds = 4, 5
	ds := make([]directory.Directory, nodes)
	for i := range ds {
		ds[i] = s.open(fmt.Sprintf("n%d", i), 0, true)
	}
	for r := range rounds {
		room := fmt.Sprintf("race-%d", r)
		var wg sync.WaitGroup
		claims := make([]directory.Claim, nodes)
		errs := make([]error, nodes)
		start := make(chan struct{})
		for i, d := range ds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				claims[i], errs[i] = d.Claim(s.ctx, room)
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "two nodes claimed %s: %s and %s", room, ds[max(winner, 0)].Node(), ds[i].Node())
				winner = i
			}
		}
		require.NotEqual(t, -1, winner, "nobody claimed %s: %v", room, errs)
		for i, err := range errs {
			if i == winner {
				continue
			}
			var owned *directory.OwnedError
			require.ErrorAs(t, err, &owned, "node %d", i)
			require.Equal(t, claims[winner], owned.Owner, "the losers are told the winner")
		}
	}
}

func testTokensIncrease(t *testing.T, s *suite) {
	a, b, c := s.open("a", 0, true), s.open("b", 0, true), s.open("c", 0, true)
	var last directory.Token
	next := func(cl directory.Claim, err error) directory.Claim {
		t.Helper()
		require.NoError(t, err)
		require.Greater(t, cl.Token, last, "token of %s's claim", cl.Node)
		last = cl.Token
		return cl
	}
	// Other rooms' writes between must not matter either.
	cl := next(a.Claim(s.ctx, "r"))
	_, err := b.Claim(s.ctx, "other")
	require.NoError(t, err)
	require.NoError(t, a.Release(s.ctx, "r", cl.Token))
	cl = next(b.Claim(s.ctx, "r"))
	cl = next(b.Move(s.ctx, "r", cl.Token, "c"))
	require.Equal(t, "c", cl.Node)
	require.NoError(t, c.Close(s.ctx)) // the room goes with c's lease
	_, err = a.Lookup(s.ctx, "r")
	require.ErrorIs(t, err, directory.ErrNotClaimed)
	cl = next(a.Claim(s.ctx, "r"))
	next(a.Move(s.ctx, "r", cl.Token, "b"))
}

func testRelease(t *testing.T, s *suite) {
	a, b := s.open("a", 0, true), s.open("b", 0, true)
	c, err := a.Claim(s.ctx, "r")
	require.NoError(t, err)
	err = b.Release(s.ctx, "r", c.Token-1)
	require.ErrorIs(t, err, directory.ErrNotOwner)
	var notOwner *directory.NotOwnerError
	require.ErrorAs(t, err, &notOwner)
	require.Equal(t, c, notOwner.Owner, "the error names the current owner")
	require.Equal(t, c.Token-1, notOwner.Token)

	require.NoError(t, a.Release(s.ctx, "r", c.Token))
	_, err = b.Lookup(s.ctx, "r")
	require.ErrorIs(t, err, directory.ErrNotClaimed)
	err = a.Release(s.ctx, "r", c.Token)
	require.ErrorIs(t, err, directory.ErrNotOwner, "releasing twice")
	require.ErrorAs(t, err, &notOwner)
	require.Empty(t, notOwner.Owner.Node, "nobody owns the room")
}

func testMove(t *testing.T, s *suite) {
	a, b := s.open("a", 0, true), s.open("b", 0, true)
	require.NoError(t, b.Publish(s.ctx, directory.Status{Load: directory.Load{Utilisation: 0.1}}))
	c, err := a.Claim(s.ctx, "r")
	require.NoError(t, err)

	_, err = a.Move(s.ctx, "r", c.Token, "nobody")
	require.ErrorIs(t, err, directory.ErrUnknownNode)
	got, err := a.Lookup(s.ctx, "r")
	require.NoError(t, err)
	require.Equal(t, c, got, "a failed move changes nothing")

	moved, err := a.Move(s.ctx, "r", c.Token, "b")
	require.NoError(t, err)
	require.Equal(t, directory.Claim{Room: "r", Node: "b", Token: moved.Token, PublicAddr: "pub-b:1", InternalAddr: "int-b:2"}, moved)
	require.Greater(t, moved.Token, c.Token)
	got, err = a.Lookup(s.ctx, "r")
	require.NoError(t, err)
	require.Equal(t, moved, got)

	// The old token is stale for every write.
	_, err = a.Move(s.ctx, "r", c.Token, "a")
	var notOwner *directory.NotOwnerError
	require.ErrorAs(t, err, &notOwner, "move with a stale token")
	require.Equal(t, moved, notOwner.Owner)
	require.ErrorIs(t, a.Release(s.ctx, "r", c.Token), directory.ErrNotOwner)
	_, err = a.Move(s.ctx, "never-claimed", 1, "b")
	require.ErrorIs(t, err, directory.ErrNotOwner)

	rooms, err := a.Rooms(s.ctx, "a")
	require.NoError(t, err)
	require.Empty(t, rooms)
	rooms, err = a.Rooms(s.ctx, "b")
	require.NoError(t, err)
	require.Equal(t, []directory.Claim{moved}, rooms)

	// The room now lives under b's lease: closing a leaves it, closing b frees it.
	require.NoError(t, a.Close(s.ctx))
	probe := s.open("probe", 0, true)
	got, err = probe.Lookup(s.ctx, "r")
	require.NoError(t, err)
	require.Equal(t, moved, got)
	require.NoError(t, b.Close(s.ctx))
	_, err = probe.Lookup(s.ctx, "r")
	require.ErrorIs(t, err, directory.ErrNotClaimed)
}

// shortTTL is the TTL of leases meant to lapse: backends may round it up (etcd grants
// whole seconds, not fewer than its minimum), and the tests read the granted TTL.
const shortTTL = time.Second

func testKeepAliveHolds(t *testing.T, s *suite) {
	a := s.open("a", shortTTL, false)
	probe := s.open("probe", 0, true)
	c, err := a.Claim(s.ctx, "r")
	require.NoError(t, err)
	ttl := a.Lease().TTL
	// Renew for three TTLs: the claim must stay, and the deadline move forward.
	prev := a.Lease().Deadline
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		dl, err := a.KeepAlive(s.ctx)
		require.NoError(t, err)
		require.False(t, dl.Before(prev), "the deadline never moves back")
		prev = dl
		require.True(t, a.Valid())
		got, err := probe.Lookup(s.ctx, "r")
		require.NoError(t, err, "a renewed lease keeps its room")
		require.Equal(t, c, got)
		time.Sleep(ttl / 4) // the renewal period under test, not an ordering wait
	}
}

func testLapse(t *testing.T, s *suite) {
	a := s.open("a", shortTTL, false)
	probe := s.open("probe", 0, true)
	var claims []directory.Claim
	for i := range 3 {
		c, err := a.Claim(s.ctx, fmt.Sprintf("r%d", i))
		require.NoError(t, err)
		claims = append(claims, c)
	}
	_, err := a.KeepAlive(s.ctx)
	require.NoError(t, err)
	lease := a.Lease()
	// Stop renewing. The rooms and the record must go within TTL + 1 s of the deadline
	// the node knows, and the node's local check must have lapsed before they go.
	limit := lease.Deadline.Add(time.Second)
	for {
		rooms, err := probe.Rooms(s.ctx, "a")
		require.NoError(t, err)
		valid := a.Valid()
		if len(rooms) == 0 {
			require.False(t, valid, "the directory freed a's rooms while a still thought its lease valid")
			break
		}
		require.True(t, time.Now().Before(limit), "a's rooms still listed %v after its lease deadline", time.Since(lease.Deadline))
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range claims {
		_, err := probe.Lookup(s.ctx, c.Room)
		require.ErrorIs(t, err, directory.ErrNotClaimed)
	}
	require.Eventually(t, func() bool {
		nodes, err := probe.Nodes(s.ctx)
		return err == nil && len(nodes) == 1 && nodes[0].ID == "probe"
	}, time.Until(limit.Add(time.Second)), 10*time.Millisecond, "a's record is gone")

	_, err = a.KeepAlive(s.ctx)
	require.ErrorIs(t, err, directory.ErrLeaseExpired)
	require.True(t, a.Lease().Expired)
	require.False(t, a.Valid())
	_, err = a.Claim(s.ctx, "r9")
	require.ErrorIs(t, err, directory.ErrLeaseExpired)
	require.ErrorIs(t, a.Publish(s.ctx, directory.Status{}), directory.ErrLeaseExpired)

	// The freed room can be claimed again, with a greater token; the ID can be reused.
	c, err := probe.Claim(s.ctx, "r0")
	require.NoError(t, err)
	require.Greater(t, c.Token, claims[0].Token)
	a2 := s.open("a", 0, true)
	require.True(t, a2.Valid())
}

func testClose(t *testing.T, s *suite) {
	a, probe := s.open("a", 0, true), s.open("probe", 0, true)
	_, err := a.Claim(s.ctx, "r")
	require.NoError(t, err)
	require.NoError(t, a.Close(s.ctx))
	require.NoError(t, a.Close(s.ctx), "closing twice")
	require.False(t, a.Valid())
	_, err = probe.Lookup(s.ctx, "r")
	require.ErrorIs(t, err, directory.ErrNotClaimed)
	nodes, err := probe.Nodes(s.ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	_, err = a.Claim(s.ctx, "r")
	require.ErrorIs(t, err, directory.ErrClosed)
	_, err = a.KeepAlive(s.ctx)
	require.ErrorIs(t, err, directory.ErrClosed)
}

// placeAndClaim places n rooms one after another, each asked of a different handle in
// turn, and claims each on the chosen node; it returns the rooms per node.
func placeAndClaim(t *testing.T, s *suite, ds map[string]directory.Directory, n int, prefix string, check func(directory.Placement)) map[string]int {
	t.Helper()
	ids := make([]string, 0, len(ds))
	for id := range ds {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	got := map[string]int{}
	for i := range n {
		p, err := ds[ids[i%len(ids)]].Place(s.ctx)
		require.NoError(t, err)
		if check != nil {
			check(p)
		}
		_, err = ds[p.Node.ID].Claim(s.ctx, fmt.Sprintf("%s-%d", prefix, i))
		require.NoError(t, err)
		got[p.Node.ID]++
	}
	return got
}

func testPlacementByHeadroom(t *testing.T, s *suite) {
	ds := map[string]directory.Directory{}
	for _, id := range []string{"a", "b", "c"} {
		ds[id] = s.open(id, 0, true)
	}
	// a runs one room burning 30 ms per 50 ms tick (20 Hz) on its one loop; b and c idle.
	_, err := ds["a"].Claim(s.ctx, "heavy")
	require.NoError(t, err)
	require.NoError(t, ds["a"].Publish(s.ctx, directory.Status{Load: directory.Load{Utilisation: 0.62, RoomShare: 0.6, Rooms: 1, Players: 8}}))
	for _, id := range []string{"b", "c"} {
		require.NoError(t, ds[id].Publish(s.ctx, directory.Status{Load: directory.Load{Utilisation: 0.02}}))
	}
	got := placeAndClaim(t, s, ds, 20, "new", func(p directory.Placement) {
		require.Len(t, p.Candidates, 3)
		var a directory.Candidate
		for _, c := range p.Candidates {
			if c.Node.ID == "a" {
				a = c
			}
			if c.Node.ID == p.Node.ID {
				require.InDelta(t, c.Headroom, p.Headroom, 1e-9, "the placement's figures are the chosen candidate's")
			}
		}
		require.InDelta(t, 0.38, a.Headroom, 1e-9, "a's headroom: one loop minus 0.62")
		require.Equal(t, 1, a.Claimed)
		require.Zero(t, a.Pending)
		require.Greater(t, p.Headroom, a.Headroom)
	})
	require.Zero(t, got["a"], "the loaded node got rooms: %v", got)
	require.Equal(t, 20, got["b"]+got["c"])
	require.LessOrEqual(t, abs(got["b"]-got["c"]), 1, "b and c share the rooms: %v", got)
}

func testPlacementSpread(t *testing.T, s *suite) {
	ds := map[string]directory.Directory{}
	for _, id := range []string{"a", "b", "c"} {
		ds[id] = s.open(id, 0, true)
		require.NoError(t, ds[id].Publish(s.ctx, directory.Status{Load: directory.Load{Utilisation: 0.1}}))
	}
	got := placeAndClaim(t, s, ds, 20, "even", nil)
	lo, hi := 20, 0
	for _, id := range []string{"a", "b", "c"} {
		lo, hi = min(lo, got[id]), max(hi, got[id])
	}
	require.LessOrEqual(t, hi-lo, 1, "20 rooms on 3 equal nodes: %v", got)
}

func testDraining(t *testing.T, s *suite) {
	ds := map[string]directory.Directory{}
	for _, id := range []string{"a", "b"} {
		ds[id] = s.open(id, 0, true)
	}
	// b is idle but draining; a is busier and must still get every room.
	require.NoError(t, ds["a"].Publish(s.ctx, directory.Status{Load: directory.Load{Utilisation: 0.8, RoomShare: 0.7, Rooms: 0}}))
	require.NoError(t, ds["b"].Publish(s.ctx, directory.Status{Draining: true}))
	got := placeAndClaim(t, s, ds, 10, "d", func(p directory.Placement) {
		for _, c := range p.Candidates {
			if c.Node.ID == "b" {
				require.Equal(t, "draining", c.Skipped)
			}
		}
	})
	require.Equal(t, map[string]int{"a": 10}, got)

	require.NoError(t, ds["a"].Publish(s.ctx, directory.Status{Draining: true}))
	_, err := ds["b"].Place(s.ctx)
	require.ErrorIs(t, err, directory.ErrNoNode, "every node draining")
}

func testInvalid(t *testing.T, s *suite) {
	a := s.open("a", 0, true)
	for _, room := range []string{"", "bad\x00room", string(make([]byte, directory.MaxNameLen+1))} {
		_, err := a.Claim(s.ctx, room)
		require.ErrorIs(t, err, directory.ErrInvalid, "claim %q", room)
		_, err = a.Lookup(s.ctx, room)
		require.ErrorIs(t, err, directory.ErrInvalid, "lookup %q", room)
	}
	for _, l := range []directory.Load{{Utilisation: math.NaN()}, {RoomShare: math.Inf(1)}, {Rooms: -1}, {Players: -1}} {
		require.ErrorIs(t, a.Publish(s.ctx, directory.Status{Load: l}), directory.ErrInvalid, "publish %+v", l)
	}
	_, err := a.Move(s.ctx, "r", 1, "a/b")
	require.ErrorIs(t, err, directory.ErrInvalid)
	_, err = a.Rooms(s.ctx, "")
	require.ErrorIs(t, err, directory.ErrInvalid)
	// Room names may hold '/', which must not confuse a backend's key layout.
	c, err := a.Claim(s.ctx, "x/y")
	require.NoError(t, err)
	rooms, err := a.Rooms(s.ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []directory.Claim{c}, rooms)
	_, err = a.Lookup(s.ctx, "x")
	require.True(t, errors.Is(err, directory.ErrNotClaimed))
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
