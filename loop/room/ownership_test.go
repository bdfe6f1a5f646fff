package room

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/stats"
)

// gatedOpener opens handles whose KeepAlive fails with ErrUnavailable while blocked is
// set: a directory out of reach, without stopping the process.
type gatedOpener struct {
	op      directory.Opener
	blocked atomic.Bool
}

func (g *gatedOpener) Open(ctx context.Context, cfg directory.Config) (directory.Directory, error) {
	d, err := g.op.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return gatedDir{d, g}, nil
}

type gatedDir struct {
	directory.Directory
	g *gatedOpener
}

func (d gatedDir) KeepAlive(ctx context.Context) (time.Time, error) {
	if d.g.blocked.Load() {
		return time.Time{}, directory.Unavailable("keep-alive", errors.New("blocked by the test"))
	}
	return d.Directory.KeepAlive(ctx)
}

// waitFor polls cond every 5 ms until it holds or limit passes.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nodeServer starts a server that is node id of the directory op opens, and waits until
// the node holds a lease.
func nodeServer(t testing.TB, op directory.Opener, cfg NodeConfig, setup func(s *loop.Server)) (*loop.Server, string) {
	t.Helper()
	s := loop.New(looptest.Config(t, loop.Config{}))
	require.NoError(t, UseDirectory(s, op, cfg))
	if setup != nil {
		setup(s)
	}
	looptest.Start(t, s)
	n := nodeOf(s)
	waitFor(t, 5*time.Second, "the node did not open its directory handle", func() bool { return n.handle() != nil })
	return s, s.Addr().String()
}

// TestDefaultNodeClaimsInPlace: without UseDirectory, New claims the room in the server's
// own in-memory directory at once (Token > 0, Claimed returns), a second live room of the
// same name is refused with the owner named, and the name is free again once the first
// room has ended; tokens grow.
func TestDefaultNodeClaimsInPlace(t *testing.T) {
	s, _ := startServer(t, loop.Config{}, nil)
	tick := func(*Room[int], *Tick[int]) {}
	r := newRoomT(t, s, Config[int]{Name: "dup", Period: 10 * time.Millisecond, Tick: tick})
	assert.Positive(t, int64(r.Token()))
	var err error
	looptest.OnLoop(t, s.Loop(0), func() { _, err = New(s.Loop(0), Config[int]{Name: "dup", Period: 10 * time.Millisecond, Tick: tick}) })
	require.ErrorIs(t, err, directory.ErrAlreadyOwned)
	var owned *directory.OwnedError
	require.ErrorAs(t, err, &owned)
	assert.Equal(t, "local", owned.Owner.Node)
	assert.Equal(t, r.Token(), owned.Owner.Token)
	r.Stop()
	<-r.Done()
	r2 := newRoomT(t, s, Config[int]{Name: "dup", Period: 10 * time.Millisecond, Tick: tick})
	assert.Greater(t, r2.Token(), r.Token())
	looptest.OnLoop(t, s.Loop(0), func() {
		_, err = New(s.Loop(0), Config[int]{Name: "bad\x00name", Period: time.Millisecond, Tick: tick})
	})
	require.ErrorContains(t, err, "Config.Name")
}

// TestRoomStopsWhenOwnershipLapses: a node whose keep-alives fail stops its rooms at its
// lease's deadline minus the margin, by its own clock: no tick after that, OnMoved runs
// before the members are cancelled with ErrMoved, inputs are refused. The node then opens
// a new lease, and a room of the same name made again gets a greater token.
func TestRoomStopsWhenOwnershipLapses(t *testing.T) {
	g := &gatedOpener{op: directory.NewEmbedded()}
	const ttl, margin = 600 * time.Millisecond, 150 * time.Millisecond
	s, _ := nodeServer(t, g, NodeConfig{Directory: directory.Config{Node: "a", TTL: ttl, Margin: margin}}, nil)
	n := nodeOf(s)

	var lastTick atomic.Int64 // when the last tick ended, since origin (monotonic)
	origin := time.Now()
	var movedAt atomic.Int64
	var memberCause atomic.Pointer[error]
	cfg := Config[int]{Name: "arena", Period: 5 * time.Millisecond,
		Tick: func(*Room[int], *Tick[int]) { lastTick.Store(int64(time.Since(origin))) },
		OnMoved: func(r *Room[int]) {
			movedAt.Store(int64(time.Since(origin)))
			assert.Equal(t, 1, r.Members(), "OnMoved runs before the members are cancelled")
		},
	}
	var r *Room[int]
	looptest.OnLoop(t, s.Loop(0), func() {
		var err error
		r, err = New(s.Loop(0), cfg)
		require.NoError(t, err)
		r.Go("player", func(tk *loop.Task) {
			err := tk.Sleep(time.Hour)
			memberCause.Store(&err)
		})
	})
	waitFor(t, 2*time.Second, "the room was not claimed", func() bool { return r.Token() > 0 })
	d := n.handle()
	cl, err := d.Lookup(context.Background(), "arena")
	require.NoError(t, err)
	assert.Equal(t, r.Token(), cl.Token)
	assert.Equal(t, "a", cl.Node)

	g.blocked.Store(true) // no renewal succeeds from now on
	select {
	case <-r.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the room still runs 5 s after its node stopped renewing")
	}
	validUntil := d.Lease().ValidUntil() // the last renewal's, whenever it came
	// The guarantee: every tick began while the lease was valid by the local check, so it
	// ended before the lease's deadline (the margin covers a tick); the directory frees the
	// room no earlier than that deadline.
	last := origin.Add(time.Duration(lastTick.Load()))
	deadline := d.Lease().Deadline
	assert.True(t, last.Before(deadline), "a tick ended at %v, after the lease's deadline (%v)", last.Sub(origin), deadline.Sub(origin))
	assert.NotZero(t, movedAt.Load(), "OnMoved did not run")
	require.NotNil(t, memberCause.Load())
	assert.ErrorIs(t, *memberCause.Load(), ErrMoved)
	assert.ErrorIs(t, r.Input(1), ErrRoomStopped)
	t.Logf("lease valid until %v after the start, deadline %v; last tick ended %v; stopped at %v", validUntil.Sub(origin), deadline.Sub(origin), last.Sub(origin), time.Duration(movedAt.Load()))

	// Unblocked once the directory has surely dropped the lease (an earlier renewal would
	// revive it: TestEtcdOutage in directory/etcd covers that), the node opens a new one.
	time.Sleep(time.Until(d.Lease().Deadline.Add(100 * time.Millisecond)))
	g.blocked.Store(false)
	waitFor(t, 5*time.Second, "the node did not open a new lease", func() bool {
		h := n.handle()
		return h != nil && h != d && h.Valid()
	})
	r2 := newRoomT(t, s, Config[int]{Name: "arena", Period: 5 * time.Millisecond, Tick: func(*Room[int], *Tick[int]) {}})
	var tok directory.Token
	waitFor(t, 2*time.Second, "the room made again was not claimed", func() bool { tok = r2.Token(); return tok > 0 })
	assert.Greater(t, tok, r.Token())
}

// TestJoinRoutesToTheOwner: two nodes on one directory. Join through either answers the
// same owner (placement for a new room, then the owner once it is claimed) with a seat
// token; Admit at the owner seats the player; a player with a valid seat who reaches the
// other node gets 307 to the owner, never a second room; bad seats get 401.
func TestJoinRoutesToTheOwner(t *testing.T) {
	emb := directory.NewEmbedded()
	seats, err := directory.NewSeatSigner(directory.SeatConfig{Key: []byte(strings.Repeat("k", 32))})
	require.NoError(t, err)
	var made atomic.Int32
	setup := func(s *loop.Server) {
		stats.Mount(s, "/debug/baton")
		s.Handle("GET /join/{room}", func(c *loop.Ctx) { Join(c, c.PathValue("room"), c.Query("player")) })
		s.Handle("GET /play/{room}", func(c *loop.Ctx) {
			name := c.PathValue("room")
			r, seat, ok := Admit(c, name, func(l *loop.Loop) (*Room[int], error) {
				made.Add(1)
				return New(l, Config[int]{Name: name, Period: 20 * time.Millisecond, Tick: func(*Room[int], *Tick[int]) {}})
			})
			if !ok {
				return
			}
			c.JSON(200, map[string]any{"player": seat.Player, "token": r.Token()})
		})
	}
	_, addrA := nodeServer(t, emb, NodeConfig{Directory: directory.Config{Node: "a"}, Seats: seats}, setup)
	_, addrB := nodeServer(t, emb, NodeConfig{Directory: directory.Config{Node: "b"}, Seats: seats}, setup)
	addrOf := map[string]string{"a": addrA, "b": addrB}
	cl := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(url string) (int, string, http.Header) {
		resp, err := cl.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	join := func(addr, player string) joinAnswer {
		code, body, _ := get("http://" + addr + "/join/m1?player=" + player)
		require.Equal(t, 200, code, body)
		var a joinAnswer
		require.NoError(t, json.Unmarshal([]byte(body), &a))
		return a
	}
	a1 := join(addrA, "p1")
	require.Contains(t, addrOf, a1.Node)
	assert.Equal(t, addrOf[a1.Node], a1.Addr)
	assert.Zero(t, a1.Token, "a room nobody owns yet is placed, not owned")
	code, body, _ := get("http://" + a1.Addr + "/play/m1?seat=" + a1.Seat)
	require.Equal(t, 200, code, body)
	assert.Contains(t, body, `"player":"p1"`)

	other := map[string]string{"a": addrB, "b": addrA}[a1.Node]
	a2 := join(other, "p2")
	assert.Equal(t, a1.Node, a2.Node, "the other node names the owner")
	assert.Positive(t, int64(a2.Token))
	code, _, hdr := get("http://" + other + "/play/m1?seat=" + a2.Seat)
	require.Equal(t, 307, code)
	assert.Equal(t, "http://"+a1.Addr+"/play/m1?seat="+a2.Seat, hdr.Get("Location"))
	code, body, _ = get(hdr.Get("Location"))
	require.Equal(t, 200, code, body)
	assert.Contains(t, body, `"player":"p2"`)
	assert.EqualValues(t, 2, made.Load(), "one room at the owner, one refused claim at the other node")

	code, _, _ = get("http://" + a1.Addr + "/play/m1")
	assert.Equal(t, 401, code, "no seat")
	code, _, _ = get("http://" + a1.Addr + "/play/m2?seat=" + a2.Seat)
	assert.Equal(t, 401, code, "a seat for another room")
	code, _, _ = get("http://" + a1.Addr + "/play/m1?seat=" + a2.Seat[:len(a2.Seat)-2] + "xx")
	assert.Equal(t, 401, code, "a forged seat")
	code, _, _ = get("http://" + addrA + "/join/bad%00name?player=p")
	assert.Equal(t, 400, code)

	// The node that placed the room shows the choice and every candidate's figures.
	code, body, _ = get("http://" + addrA + "/debug/baton/cluster")
	require.Equal(t, 200, code, body)
	var fig struct {
		Node      string `json:"node"`
		Open      bool   `json:"open"`
		Valid     bool   `json:"valid"`
		Placement struct {
			Node       directory.NodeInfo
			Candidates []directory.Candidate
		} `json:"last_placement"`
		Published *directory.Status `json:"published"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &fig), body)
	assert.Equal(t, "a", fig.Node)
	assert.True(t, fig.Open && fig.Valid)
	assert.Equal(t, a1.Node, fig.Placement.Node.ID)
	assert.Len(t, fig.Placement.Candidates, 2)
}

// TestDrainingNodeLeaves: a node that drains publishes Draining (placement skips it) and,
// once its rooms have ended, gives its lease back: its record and claims are gone at once,
// not a TTL later.
func TestDrainingNodeLeaves(t *testing.T) {
	emb := directory.NewEmbedded()
	obs, err := emb.Open(context.Background(), directory.Config{Node: "observer", TTL: time.Minute})
	require.NoError(t, err)
	release := make(chan struct{})
	var saved atomic.Bool
	s := loop.New(looptest.Config(t, loop.Config{}))
	require.NoError(t, UseDirectory(s, emb, NodeConfig{Directory: directory.Config{Node: "a", TTL: time.Minute}}))
	errc := serveInBackground(t, s)
	waitFor(t, 5*time.Second, "the node did not open", func() bool { return nodeOf(s).handle() != nil })
	r := newRoomT(t, s, Config[int]{Name: "saving", Period: 10 * time.Millisecond, Tick: func(*Room[int], *Tick[int]) {},
		OnDrain: func(r *Room[int], _ time.Time) {
			r.Go("save", func(tk *loop.Task) {
				<-release // the test says when the save is done
				saved.Store(true)
				r.Stop()
			})
		}})
	waitFor(t, 2*time.Second, "not claimed", func() bool { return r.Token() > 0 })
	go func() { _ = s.Shutdown(context.Background()) }()
	waitFor(t, 5*time.Second, "the draining node did not say so", func() bool {
		ns, err := obs.Nodes(context.Background())
		require.NoError(t, err)
		for _, n := range ns {
			if n.ID == "a" {
				return n.Draining
			}
		}
		return false
	})
	p, err := obs.Place(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "observer", p.Node.ID, "a draining node is never chosen")
	cl, err := obs.Lookup(context.Background(), "saving")
	require.NoError(t, err, "the room is still owned while it saves")
	assert.Equal(t, "a", cl.Node)
	close(release)
	select {
	case err := <-errc:
		require.ErrorIs(t, err, loop.ErrServerClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
	}
	assert.True(t, saved.Load())
	_, err = obs.Lookup(context.Background(), "saving")
	require.ErrorIs(t, err, directory.ErrNotClaimed)
	ns, err := obs.Nodes(context.Background())
	require.NoError(t, err)
	require.Len(t, ns, 1, "the node's record went with its lease")
}

// TestNodeGoesWithItsServer: the server-to-node map holds servers weakly, so a server that
// is dropped takes its node with it.
func TestNodeGoesWithItsServer(t *testing.T) {
	var keys []weak.Pointer[loop.Server]
	func() {
		s := loop.New(looptest.Config(t, loop.Config{}))
		require.NoError(t, UseDirectory(s, directory.NewEmbedded(), NodeConfig{Directory: directory.Config{Node: "gone"}}))
		s2 := loop.New(looptest.Config(t, loop.Config{}))
		_ = nodeOf(s2) // a default node
		keys = append(keys, weak.Make(s), weak.Make(s2))
	}()
	for _, k := range keys {
		_, ok := nodes.Load(k)
		require.True(t, ok)
	}
	waitFor(t, 5*time.Second, "the dropped servers' nodes are still mapped", func() bool {
		runtime.GC()
		for _, k := range keys {
			if _, ok := nodes.Load(k); ok {
				return false
			}
		}
		return true
	})
}

// TestStalledLoopStopsRenewal: on a server of two loops, while loop 1 does not turn (a
// function holds it), the node stops renewing its lease, so its rooms lapse (here the
// room on loop 0) and can be re-homed by other nodes; the node renews again once loop 1
// turns.
func TestStalledLoopStopsRenewal(t *testing.T) {
	emb := directory.NewEmbedded()
	s := loop.New(looptest.Config(t, loop.Config{Shards: 2}))
	const ttl, margin = 900 * time.Millisecond, 150 * time.Millisecond
	require.NoError(t, UseDirectory(s, emb, NodeConfig{Directory: directory.Config{Node: "a", TTL: ttl, Margin: margin}}))
	looptest.Start(t, s)
	n := nodeOf(s)
	waitFor(t, 5*time.Second, "the node did not open", func() bool { return n.handle() != nil })
	var r *Room[int]
	looptest.OnLoop(t, s.Loop(0), func() {
		var err error
		r, err = New(s.Loop(0), Config[int]{Name: "on-0", Period: 10 * time.Millisecond, Tick: func(*Room[int], *Tick[int]) {}})
		require.NoError(t, err)
	})
	waitFor(t, 2*time.Second, "not claimed", func() bool { return r.Token() > 0 })
	release := make(chan struct{})
	require.NoError(t, s.Loop(1).Post(func() { <-release })) // loop 1 stops turning
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	select {
	case <-r.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the room on loop 0 still runs 5 s after loop 1 stopped turning")
	}
	e := n.lastErr.Load()
	require.NotNil(t, e)
	assert.Contains(t, *e, "loop 1 has not turned")
	close(release)
	waitFor(t, 5*time.Second, "the node did not hold a valid lease again", func() bool {
		h := n.handle()
		return h != nil && h.Valid()
	})
}
