package room

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/stats"
)

var handoffKey = []byte(strings.Repeat("h", 32))

// match is a test room's state: what its tick folds the inputs into.
type match struct {
	Sum    int    // the inputs' sum
	Inputs int    // how many
	LastN  uint64 // the last tick's number
}

// tickRec is one tick in the fleet's log.
type tickRec struct {
	node string
	n    uint64
	tok  directory.Token
	late time.Duration
}

// fleet is the rooms of several nodes in one test: their configs (one per node, as
// AcceptHandoffs asks), a log of every tick of every room, and each room's latest state
// and Room. Safe for concurrent use.
type fleet struct {
	period    time.Duration
	late      LatePolicy
	snapPanic atomic.Bool
	snapFail  atomic.Bool
	// Handoffs between the source's snapshot and OnMoved, and the most at once; how long
	// a restore takes on the target (ns).
	inFlight, mostInFlight atomic.Int32
	slowRestore            atomic.Int64

	mu    sync.Mutex
	ticks map[string][]tickRec
	rooms map[string]*Room[int]
	state map[string]match
	moved map[string]int // OnMoved calls per room
}

func newFleet(period time.Duration, late LatePolicy) *fleet {
	return &fleet{period: period, late: late, ticks: map[string][]tickRec{}, rooms: map[string]*Room[int]{},
		state: map[string]match{}, moved: map[string]int{}}
}

// config returns node's room configs.
func (f *fleet) config(node string) func(name string) (Config[int], error) {
	return func(name string) (Config[int], error) {
		g := &match{}
		cfg := Config[int]{Name: name, Period: f.period, Late: f.late,
			Tick: func(r *Room[int], t *Tick[int]) {
				t.DrainInputs(func(v int) { g.Sum += v; g.Inputs++ })
				g.LastN = t.N
				f.mu.Lock()
				f.ticks[name] = append(f.ticks[name], tickRec{node, t.N, r.Token(), t.Late})
				f.rooms[name], f.state[name] = r, *g
				f.mu.Unlock()
			},
			OnMoved: func(*Room[int]) { f.inFlight.Add(-1); f.mu.Lock(); f.moved[name]++; f.mu.Unlock() },
		}
		snap, restore := JSONState[int](g)
		cfg.Snapshot = func(r *Room[int]) ([]byte, error) {
			if f.snapPanic.Load() {
				panic("snapshot hook panics (test)")
			}
			if f.snapFail.Load() {
				return nil, errors.New("snapshot refused (test)")
			}
			if n := f.inFlight.Add(1); n > f.mostInFlight.Load() {
				f.mostInFlight.Store(n) // snapshots run on the source's one loop: no race
			}
			return snap(r)
		}
		cfg.Restore = func(r *Room[int], b []byte) error {
			time.Sleep(time.Duration(f.slowRestore.Load()))
			return restore(r, b)
		}
		return cfg, nil
	}
}

func (f *fleet) room(name string) *Room[int] {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rooms[name]
}

func (f *fleet) log(name string) []tickRec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ticks[name])
}

func (f *fleet) latest(name string) (match, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state[name], len(f.ticks[name])
}

// open makes room name on s from node's config and waits for its claim.
func (f *fleet) open(t testing.TB, s *loop.Server, node, name string) *Room[int] {
	t.Helper()
	cfg, _ := f.config(node)(name)
	r := newRoomT(t, s, cfg)
	waitFor(t, 5*time.Second, "the room was not claimed", func() bool { return r.Token() > 0 })
	f.mu.Lock()
	f.rooms[name] = r
	f.mu.Unlock()
	return r
}

// handoffNode starts node id of op, accepting handoffs of the fleet's rooms.
func handoffNode(t testing.TB, op directory.Opener, id string, f *fleet, cfg loop.Config) *loop.Server {
	t.Helper()
	s := loop.New(looptest.Config(t, cfg))
	require.NoError(t, UseDirectory(s, op, NodeConfig{Directory: directory.Config{Node: id}, HandoffKey: handoffKey}))
	require.NoError(t, AcceptHandoffs(s, f.config(id)))
	stats.Mount(s, "/debug/baton")
	looptest.Start(t, s)
	n := nodeOf(s)
	waitFor(t, 5*time.Second, "the node did not open its directory handle", func() bool { return n.handle() != nil })
	return s
}

// handoff runs r.Handoff(to) from a task of s's loop 0 and returns its result.
func handoff(t testing.TB, s *loop.Server, r *Room[int], to string) (directory.Token, error) {
	t.Helper()
	type result struct {
		tok directory.Token
		err error
	}
	ch := make(chan result, 1)
	looptest.OnLoop(t, s.Loop(0), func() {
		s.Loop(0).Go("test:handoff", func(tk *loop.Task) {
			tok, err := r.Handoff(tk, to)
			ch <- result{tok, err}
		})
	})
	select {
	case res := <-ch:
		return res.tok, res.err
	case <-time.After(20 * time.Second):
		t.Fatal("Handoff did not return in 20 s")
		return 0, nil
	}
}

// player sends inputs 1, 2, 3... to the fleet's room name until stop is closed, resending
// an input refused with ErrHandingOff and, after ErrMoved, to the room's new Room; it
// returns the sum and count of the inputs accepted, and how many were refused for the
// handoff.
func (f *fleet) player(t testing.TB, name string, stop <-chan struct{}) (sum, n, resent int) {
	r := f.room(name)
	for v := 1; ; v++ {
		select {
		case <-stop:
			return sum, n, resent
		default:
		}
		for {
			err := r.Input(v)
			if err == nil {
				sum += v
				n++
				break
			}
			resent++
			switch {
			case errors.Is(err, ErrHandingOff):
				time.Sleep(100 * time.Microsecond) // the client's resend backoff
			case errors.Is(err, ErrMoved):
				end := time.Now().Add(10 * time.Second)
				for f.room(name) == r && time.Now().Before(end) {
					time.Sleep(time.Millisecond) // the client asking where the room went
				}
				r = f.room(name)
			default:
				t.Errorf("input %d: %v", v, err)
				return sum, n, resent
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// checkLog asserts a room's tick log: every tick once, numbers strictly increasing; with
// contiguous, no number skipped; the ticks on from then on node to, with tokens from.
func checkLog(t testing.TB, log []tickRec, from, to string, contiguous bool) (lastFrom, firstTo int) {
	t.Helper()
	lastFrom, firstTo = -1, -1
	for i, rec := range log {
		if i > 0 {
			prev := log[i-1]
			require.Greater(t, rec.n, prev.n, "tick %d ran after tick %d (twice, or out of order): %v", rec.n, prev.n, log)
			if contiguous {
				require.Equal(t, prev.n+1, rec.n, "a tick was skipped")
			}
			if prev.node == to {
				require.Equal(t, to, rec.node, "the room ticked on %q after moving to %q", rec.node, to)
			}
		}
		if rec.node == from {
			lastFrom = i
		} else if firstTo < 0 && rec.node == to {
			firstTo = i
		}
	}
	require.GreaterOrEqual(t, lastFrom, 0, "no tick on %q", from)
	require.Equal(t, lastFrom+1, firstTo, "the room did not tick on %q right after %q", to, from)
	assert.Greater(t, log[firstTo].tok, log[lastFrom].tok, "the new owner ticks under a greater token")
	return lastFrom, firstTo
}

// TestHandoffMovesTheRoom: a room with state, fed inputs by a player, moved from node a to
// node b mid-match: the directory names b with a greater token, the state and every input
// accepted are in b's room (none lost, inputs refused during the freeze resent), the tick
// numbers run on without a gap (CatchUp) and no tick runs twice, a never ticks it again,
// its members are told (OnMoved), and the figures count it.
func TestHandoffMovesTheRoom(t *testing.T) {
	emb := directory.NewEmbedded()
	f := newFleet(10*time.Millisecond, CatchUp(1000))
	a := handoffNode(t, emb, "a", f, loop.Config{})
	b := handoffNode(t, emb, "b", f, loop.Config{})
	r := f.open(t, a, "a", "m1")
	tok0 := r.Token()

	stop := make(chan struct{})
	type sent struct{ sum, n, resent int }
	got := make(chan sent, 1)
	go func() { s, n, re := f.player(t, "m1", stop); got <- sent{s, n, re} }()
	waitFor(t, 5*time.Second, "the room did not tick 10 times on a", func() bool { _, n := f.latest("m1"); return n >= 10 })

	tok, err := handoff(t, a, r, "b")
	require.NoError(t, err)
	assert.Greater(t, tok, tok0)
	<-r.Done()
	assert.ErrorIs(t, r.Input(1), ErrMoved)
	cl, err := nodeOf(a).handle().Lookup(context.Background(), "m1")
	require.NoError(t, err)
	assert.Equal(t, "b", cl.Node)
	assert.Equal(t, tok, cl.Token)

	// The player goes on against b's room, then stops; one more tick of b drains the queue.
	waitFor(t, 5*time.Second, "the room did not tick 10 times on b", func() bool {
		log := f.log("m1")
		return len(log) > 0 && log[len(log)-1].node == "b" && f.room("m1") != r && len(log) > 20
	})
	close(stop)
	p := <-got
	_, ticks := f.latest("m1")
	waitFor(t, 5*time.Second, "b did not tick after the player stopped", func() bool { _, n := f.latest("m1"); return n >= ticks+2 })
	st, _ := f.latest("m1")
	assert.Equal(t, p.sum, st.Sum, "every input accepted is in the moved room's state")
	assert.Equal(t, p.n, st.Inputs)

	log := f.log("m1")
	lastA, firstB := checkLog(t, log, "a", "b", true)
	assert.Equal(t, tok, log[firstB].tok)
	f.mu.Lock()
	assert.Equal(t, 1, f.moved["m1"], "OnMoved ran once, on a")
	f.mu.Unlock()
	fa, fb := nodeOf(a).hos.figures(), nodeOf(b).hos.figures()
	assert.Equal(t, int64(1), fa.Started)
	assert.Equal(t, int64(1), fa.Completed)
	assert.Equal(t, int64(1), fb.Accepted)
	require.Equal(t, 1, fb.Gaps)
	assert.Positive(t, fb.GapMax)
	// The same figures on b's stats page.
	res, err := http.Get("http://" + b.Addr().String() + "/debug/baton/cluster")
	require.NoError(t, err)
	defer res.Body.Close()
	var page struct {
		Handoffs handoffFigures `json:"handoffs"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&page))
	assert.Equal(t, fb.Accepted, page.Handoffs.Accepted)
	assert.Equal(t, fb.GapMax, page.Handoffs.GapMax)
	t.Logf("ticks %d on a, then %d on b from tick %d; inputs %d (resent %d, sum %d); gap %v",
		lastA+1, len(log)-firstB, log[firstB].n, p.n, p.resent, p.sum, fb.GapMax)
}

// TestHandoffGap moves 100 rooms (20 Hz, SkipLate) from a to b at once and reports the
// freeze-to-first-tick gap; every room's log has each tick once, in order, a's ticks then
// b's, and every room ends on b under a greater token.
func TestHandoffGap(t *testing.T) {
	emb := directory.NewEmbedded()
	f := newFleet(50*time.Millisecond, SkipLate)
	a := handoffNode(t, emb, "a", f, loop.Config{})
	b := handoffNode(t, emb, "b", f, loop.Config{})
	const rooms = 100
	names := make([]string, rooms)
	rs := make([]*Room[int], rooms)
	for i := range rooms {
		names[i] = "g" + string(rune('A'+i/26)) + string(rune('a'+i%26))
		rs[i] = f.open(t, a, "a", names[i])
	}
	waitFor(t, 10*time.Second, "the rooms did not tick on a", func() bool {
		for _, n := range names {
			if _, k := f.latest(n); k < 3 {
				return false
			}
		}
		return true
	})
	var wg sync.WaitGroup
	errs := make([]error, rooms)
	looptest.OnLoop(t, a.Loop(0), func() {
		for i, r := range rs {
			wg.Add(1)
			a.Loop(0).Go("test:handoff", func(tk *loop.Task) {
				defer wg.Done()
				_, errs[i] = r.Handoff(tk, "")
			})
		}
	})
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "room %s", names[i])
	}
	waitFor(t, 10*time.Second, "the rooms did not tick on b", func() bool {
		for _, n := range names {
			if log := f.log(n); log[len(log)-1].node != "b" {
				return false
			}
		}
		return true
	})
	skipped := 0
	lates := make([]time.Duration, 0, rooms)
	for _, n := range names {
		log := f.log(n)
		lastA, firstB := checkLog(t, log, "a", "b", false)
		skipped += int(log[firstB].n - log[lastA].n - 1)
		lates = append(lates, log[firstB].late)
	}
	slices.Sort(lates)
	fb := nodeOf(b).hos.figures()
	assert.Equal(t, int64(rooms), fb.Accepted)
	assert.Equal(t, rooms, fb.Gaps)
	t.Logf("%d rooms moved at 20 Hz: gap p50 %v, p99 %v, max %v; first tick on b after its deadline p50 %v, max %v; ticks skipped across the handoff %d",
		rooms, fb.GapP50, fb.GapP99, fb.GapMax, lates[rooms/2], lates[rooms-1], skipped)
}

// TestHandoffFailuresKeepTheRoom: a handoff that fails at any step leaves the room
// running on its node under its token, taking inputs again: no hooks, the snapshot hook
// panics or errs, the target is unknown, refuses (no endpoint, wrong key, the room's
// period differs), or dies mid-transfer (reads the snapshot and closes the connection).
func TestHandoffFailuresKeepTheRoom(t *testing.T) {
	emb := directory.NewEmbedded()
	f := newFleet(10*time.Millisecond, SkipLate)
	a := handoffNode(t, emb, "a", f, loop.Config{})
	_ = handoffNode(t, emb, "b", f, loop.Config{})
	// Node p: no handoff endpoint. Node k: another key. Node s: another period.
	plain := loop.New(looptest.Config(t, loop.Config{}))
	require.NoError(t, UseDirectory(plain, emb, NodeConfig{Directory: directory.Config{Node: "p"}, HandoffKey: handoffKey}))
	looptest.Start(t, plain)
	other := loop.New(looptest.Config(t, loop.Config{}))
	require.NoError(t, UseDirectory(other, emb, NodeConfig{Directory: directory.Config{Node: "k"}, HandoffKey: []byte(strings.Repeat("x", 32))}))
	require.NoError(t, AcceptHandoffs(other, f.config("k")))
	looptest.Start(t, other)
	slow := newFleet(20*time.Millisecond, SkipLate)
	_ = handoffNode(t, emb, "s", slow, loop.Config{})
	// Node d: reads the request, then dies (closes the connection without an answer).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	hold := make(chan struct{})
	reached := make(chan struct{}, 4)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			req, err := http.ReadRequest(bufio.NewReader(conn))
			if err == nil {
				_, _ = io.Copy(io.Discard, req.Body)
				reached <- struct{}{}
				<-hold
			}
			_ = conn.Close()
		}
	}()
	dd, err := emb.Open(context.Background(), directory.Config{Node: "d", PublicAddr: ln.Addr().String(), InternalAddr: ln.Addr().String(), Loops: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dd.Close(context.Background()) })
	waitFor(t, 5*time.Second, "the nodes did not open", func() bool { return nodeOf(plain).handle() != nil && nodeOf(other).handle() != nil })

	r := f.open(t, a, "a", "keep")
	tok0 := r.Token()
	bare := newRoomT(t, a, Config[int]{Name: "bare", Period: 10 * time.Millisecond, Tick: func(*Room[int], *Tick[int]) {}})
	waitFor(t, 5*time.Second, "bare not claimed", func() bool { return bare.Token() > 0 })

	stillHere := func(what string) {
		t.Helper()
		_, n := f.latest("keep")
		waitFor(t, 5*time.Second, what+": the room stopped ticking on a", func() bool {
			log := f.log("keep")
			return len(log) >= n+3 && log[len(log)-1].node == "a"
		})
		require.NoError(t, r.Input(1), what+": inputs are taken again")
		assert.Equal(t, tok0, r.Token())
		cl, err := dd.Lookup(context.Background(), "keep")
		require.NoError(t, err)
		assert.Equal(t, "a", cl.Node, what)
		assert.Equal(t, tok0, cl.Token, what)
	}
	_, err = handoff(t, a, bare, "b")
	require.ErrorContains(t, err, "Snapshot and Restore are not set")

	f.snapPanic.Store(true)
	_, err = handoff(t, a, r, "b")
	require.ErrorContains(t, err, "Config.Snapshot panicked")
	f.snapPanic.Store(false)
	stillHere("snapshot panicked")

	f.snapFail.Store(true)
	_, err = handoff(t, a, r, "b")
	require.ErrorContains(t, err, "snapshot refused (test)")
	f.snapFail.Store(false)
	stillHere("snapshot erred")

	_, err = handoff(t, a, r, "nobody")
	require.ErrorIs(t, err, directory.ErrUnknownNode)
	_, err = handoff(t, a, r, "a")
	require.ErrorContains(t, err, "cannot hand off")
	stillHere("unknown target")

	_, err = handoff(t, a, r, "p")
	require.ErrorContains(t, err, "target answered 404")
	stillHere("no endpoint")

	_, err = handoff(t, a, r, "k")
	require.ErrorContains(t, err, "target answered 401")
	stillHere("wrong key")

	_, err = handoff(t, a, r, "s")
	require.ErrorContains(t, err, "target answered 409")
	stillHere("another period")

	// The target dies mid-transfer: while it holds the snapshot, inputs are refused with
	// ErrHandingOff; once it is gone the room takes them again.
	done := make(chan error, 1)
	go func() { _, err := handoff(t, a, r, "d"); done <- err }()
	<-reached
	assert.ErrorIs(t, r.Input(1), ErrHandingOff)
	close(hold)
	err = <-done
	require.ErrorContains(t, err, `to "d"`)
	stillHere("target died")

	// From its own tick, Handoff would wait for itself: refused.
	var fromTick atomic.Pointer[error]
	selfCfg, _ := f.config("a")("self")
	selfCfg.Tick = func(r *Room[int], tk *Tick[int]) {
		if fromTick.Load() == nil && r.Token() > 0 {
			_, err := r.Handoff(tk.Task, "b")
			fromTick.Store(&err)
		}
	}
	newRoomT(t, a, selfCfg)
	waitFor(t, 5*time.Second, "the tick did not try", func() bool { return fromTick.Load() != nil })
	require.ErrorContains(t, *fromTick.Load(), "from its own tick")

	fa := nodeOf(a).hos.figures()
	assert.Equal(t, int64(0), fa.Completed)
	assert.Equal(t, fa.Started, fa.Failed)
	t.Logf("figures on a: %+v", fa)
}

// TestHandoffLostAnswer: the target moves the claim and dies before answering. The source
// asks the directory, sees the room is the target's, and stops for good: the room never
// ticks on both.
func TestHandoffLostAnswer(t *testing.T) {
	emb := directory.NewEmbedded()
	f := newFleet(10*time.Millisecond, SkipLate)
	a := handoffNode(t, emb, "a", f, loop.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	dd, err := emb.Open(context.Background(), directory.Config{Node: "d", PublicAddr: ln.Addr().String(), InternalAddr: ln.Addr().String(), Loops: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dd.Close(context.Background()) })
	r := f.open(t, a, "a", "lost")
	tok0 := r.Token()
	var moved atomic.Int64
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
			cl, err := dd.Move(context.Background(), "lost", tok0, "d")
			if err == nil {
				moved.Store(int64(cl.Token))
			}
		}
	}()
	tok, err := handoff(t, a, r, "d")
	require.NoError(t, err, "the claim moved: the handoff happened, only the answer was lost")
	assert.Equal(t, directory.Token(moved.Load()), tok)
	select { // the tick task has ended: the source cannot tick again
	case <-r.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the source room still runs after its claim moved")
	}
	assert.ErrorIs(t, r.Input(1), ErrMoved)
	for _, rec := range f.log("lost") {
		assert.Equal(t, tok0, rec.tok, "every tick of the source ran under its token")
	}
}

// TestHandoffOnDrain: node a drains with three rooms with hooks and one without: the
// three move to b (placement, never a draining node) and tick on there with their state;
// the one without hooks drains as before (its OnDrain runs).
func TestHandoffOnDrain(t *testing.T) {
	emb := directory.NewEmbedded()
	f := newFleet(20*time.Millisecond, SkipLate)
	a := loop.New(looptest.Config(t, loop.Config{}))
	require.NoError(t, UseDirectory(a, emb, NodeConfig{Directory: directory.Config{Node: "a"}, HandoffKey: handoffKey}))
	require.NoError(t, AcceptHandoffs(a, f.config("a")))
	errc := serveInBackground(t, a)
	waitFor(t, 5*time.Second, "a did not open", func() bool { return nodeOf(a).handle() != nil })
	b := handoffNode(t, emb, "b", f, loop.Config{})
	names := []string{"d1", "d2", "d3"}
	for _, n := range names {
		f.open(t, a, "a", n)
		require.NoError(t, f.room(n).Input(7))
	}
	var drained atomic.Bool
	bare := newRoomT(t, a, Config[int]{Name: "bare", Period: 20 * time.Millisecond, Tick: func(*Room[int], *Tick[int]) {},
		OnDrain: func(r *Room[int], _ time.Time) { drained.Store(true); r.Stop() }})
	waitFor(t, 5*time.Second, "bare not claimed", func() bool { return bare.Token() > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.Shutdown(ctx))
	require.ErrorIs(t, <-errc, loop.ErrServerClosed)
	assert.True(t, drained.Load(), "the room without hooks drained as before")
	for _, n := range names {
		waitFor(t, 5*time.Second, n+" did not tick on b", func() bool { log := f.log(n); return log[len(log)-1].node == "b" })
		checkLog(t, f.log(n), "a", "b", false)
		st, _ := f.latest(n)
		assert.Equal(t, 7, st.Sum, "%s's state moved", n)
	}
	assert.Equal(t, int64(3), nodeOf(b).hos.figures().Accepted)
}

// TestHandoffOnDrainAtOnce: a draining node hands off at most NodeConfig.HandoffsAtOnce
// rooms at a time (the others tick on until a slot frees), and every room still moves;
// without a bound the same drain has more frozen at once (so the count can fail).
func TestHandoffOnDrainAtOnce(t *testing.T) {
	for _, tc := range []struct {
		atOnce  int
		bounded bool
	}{{2, true}, {-1, false}} {
		t.Run(fmt.Sprint(tc.atOnce), func(t *testing.T) {
			emb := directory.NewEmbedded()
			f := newFleet(20*time.Millisecond, SkipLate)
			f.slowRestore.Store(int64(30 * time.Millisecond)) // on b's one loop: restores queue
			a := loop.New(looptest.Config(t, loop.Config{}))
			require.NoError(t, UseDirectory(a, emb, NodeConfig{Directory: directory.Config{Node: "a"}, HandoffKey: handoffKey, HandoffsAtOnce: tc.atOnce}))
			require.NoError(t, AcceptHandoffs(a, f.config("a")))
			errc := serveInBackground(t, a)
			waitFor(t, 5*time.Second, "a did not open", func() bool { return nodeOf(a).handle() != nil })
			handoffNode(t, emb, "b", f, loop.Config{})
			var names []string
			for i := range 8 {
				names = append(names, fmt.Sprintf("r%d", i))
				f.open(t, a, "a", names[i])
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, a.Shutdown(ctx))
			require.ErrorIs(t, <-errc, loop.ErrServerClosed)
			for _, n := range names {
				waitFor(t, 5*time.Second, n+" did not tick on b", func() bool { log := f.log(n); return log[len(log)-1].node == "b" })
				checkLog(t, f.log(n), "a", "b", false)
			}
			most := f.mostInFlight.Load()
			t.Logf("HandoffsAtOnce %d: at most %d rooms frozen at once", tc.atOnce, most)
			if tc.bounded {
				assert.LessOrEqual(t, most, int32(tc.atOnce))
			} else {
				assert.Greater(t, most, int32(2), "unbounded, the drain froze its rooms together")
			}
		})
	}
}

// TestHandoffConfig: the hooks go together; a short key and AcceptHandoffs without a
// node with a key are refused; the JSON and gob helpers round-trip.
func TestHandoffConfig(t *testing.T) {
	tick := func(*Room[int], *Tick[int]) {}
	err := Config[int]{Name: "x", Period: time.Millisecond, Tick: tick, Snapshot: func(*Room[int]) ([]byte, error) { return nil, nil }}.Validate()
	require.ErrorContains(t, err, "Config.Snapshot and Config.Restore")
	s := loop.New(looptest.Config(t, loop.Config{}))
	err = UseDirectory(s, directory.NewEmbedded(), NodeConfig{Directory: directory.Config{Node: "n"}, HandoffKey: []byte("short")})
	require.ErrorContains(t, err, "HandoffKey is 5 bytes")
	require.ErrorContains(t, AcceptHandoffs(s, newFleet(time.Millisecond, SkipLate).config("n")), "UseDirectory")

	type state struct {
		Score map[int]float64
		Name  string
	}
	for name, mk := range map[string]func(*state) (func(*Room[int]) ([]byte, error), func(*Room[int], []byte) error){
		"json": JSONState[int, state], "gob": GobState[int, state],
	} {
		in := state{Score: map[int]float64{1: 0.1, 2: 1e-300}, Name: "x"}
		snap, _ := mk(&in)
		b, err := snap(nil)
		require.NoError(t, err, name)
		var out state
		_, restore := mk(&out)
		require.NoError(t, restore(nil, b), name)
		assert.Equal(t, in, out, name)
		require.Error(t, restore(nil, []byte("garbage")), name)
	}
}

// flakyOpener opens handles whose Move and Lookup fail with ErrUnavailable while the
// matching flag is set; with moveApplies the Move takes effect before it reports
// ErrUnavailable (an unavailable write that did happen).
type flakyOpener struct {
	op                      directory.Opener
	move, lookup, moveTakes atomic.Bool
	lookups                 atomic.Int32
}

func (o *flakyOpener) Open(ctx context.Context, cfg directory.Config) (directory.Directory, error) {
	d, err := o.op.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return flakyDir{d, o}, nil
}

type flakyDir struct {
	directory.Directory
	o *flakyOpener
}

func (d flakyDir) Move(ctx context.Context, room string, tok directory.Token, to string) (directory.Claim, error) {
	if d.o.move.Load() {
		if d.o.moveTakes.Load() {
			_, _ = d.Directory.Move(ctx, room, tok, to)
		}
		return directory.Claim{}, directory.Unavailable("move", errors.New("blocked by the test"))
	}
	return d.Directory.Move(ctx, room, tok, to)
}

func (d flakyDir) Lookup(ctx context.Context, room string) (directory.Claim, error) {
	if d.o.lookup.Load() {
		d.o.lookups.Add(1)
		return directory.Claim{}, directory.Unavailable("lookup", errors.New("blocked by the test"))
	}
	return d.Directory.Lookup(ctx, room)
}

// TestHandoffDirectoryUnavailable: the directory is out of reach during the handoff.
// The target's Move fails: it answers 503 and the room stays on the source (whose own
// Lookup is out of reach for a while too: it waits, then carries on here under its
// token). The Move took effect but reported ErrUnavailable: the target reads the claim
// back, runs the room and answers its token.
func TestHandoffDirectoryUnavailable(t *testing.T) {
	emb := directory.NewEmbedded()
	fo := &flakyOpener{op: emb}
	f := newFleet(10*time.Millisecond, SkipLate)
	a := handoffNode(t, fo, "a", f, loop.Config{})
	_ = handoffNode(t, fo, "b", f, loop.Config{})
	r := f.open(t, a, "a", "u1")
	tok0 := r.Token()

	fo.move.Store(true)
	fo.lookup.Store(true)
	go func() { // the directory comes back for lookups once the source has asked a few times
		for end := time.Now().Add(10 * time.Second); fo.lookups.Load() < 3 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		fo.lookup.Store(false)
	}()
	_, err := handoff(t, a, r, "b")
	require.ErrorContains(t, err, "target answered 503")
	assert.GreaterOrEqual(t, fo.lookups.Load(), int32(3))
	_, n := f.latest("u1")
	waitFor(t, 5*time.Second, "the room did not tick on a again", func() bool { _, k := f.latest("u1"); return k >= n+3 })
	require.NoError(t, r.Input(1))
	assert.Equal(t, tok0, r.Token())

	fo.moveTakes.Store(true)
	tok, err := handoff(t, a, r, "b")
	require.NoError(t, err, "the Move took effect: the target read it back")
	assert.Greater(t, tok, tok0)
	<-r.Done()
	fo.move.Store(false)
	waitFor(t, 5*time.Second, "the room did not tick on b", func() bool { log := f.log("u1"); return log[len(log)-1].node == "b" })
	checkLog(t, f.log("u1"), "a", "b", false)
}

// FuzzHandoffEnvelope: any body decodes to an envelope or an error, never a panic; an
// envelope accepted encodes and decodes to itself (once its inputs' JSON is compact).
func FuzzHandoffEnvelope(f *testing.F) {
	now := time.Unix(1_800_000_000, 0).UnixNano()
	good, err := json.Marshal(envelope{V: handoffVersion, Room: "m1", From: "a", Token: 7, Period: int64(50 * time.Millisecond), N: 12,
		Next: now + 1e7, Prev: now - 4e7, Frozen: now, Expires: now + 1e9, State: []byte(`{"Sum":3}`), Inputs: json.RawMessage(`[1,2]`)})
	require.NoError(f, err)
	f.Add(good)
	f.Add([]byte(`{"v":1,"room":"x","token":1,"period_ns":1,"n":1,"expires_unix_ns":0}`))
	f.Add([]byte(`{"v":1,"room":"bad\u0000","token":1,"period_ns":1,"n":1,"expires_unix_ns":9e18}`))
	f.Add([]byte(`{"v":1,"inputs":[1,`))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := decodeEnvelope(body, now)
		if err != nil {
			return
		}
		assert.Positive(t, env.Token)
		assert.Positive(t, env.Period)
		again, err := json.Marshal(env) // compacts the inputs' JSON: compare from here on
		require.NoError(t, err)
		env2, err := decodeEnvelope(again, now)
		require.NoError(t, err)
		assert.Equal(t, env.State, env2.State)
		thrice, err := json.Marshal(env2)
		require.NoError(t, err)
		env3, err := decodeEnvelope(thrice, now)
		require.NoError(t, err)
		assert.Equal(t, env2, env3)
	})
}

// TestHandoffEndpointRefuses posts to the endpoint directly: unsigned or forged (401),
// signed garbage (400), expired (401), a valid envelope whose token is stale, as a replay
// of a completed handoff would be (409, the room stays where it is), and a room the
// target's configFor does not know (404). Error answers ErrHandingOff 503 with
// Retry-After 0.
func TestHandoffEndpointRefuses(t *testing.T) {
	emb := directory.NewEmbedded()
	f := newFleet(10*time.Millisecond, SkipLate)
	a := handoffNode(t, emb, "a", f, loop.Config{})
	b := loop.New(looptest.Config(t, loop.Config{}))
	require.NoError(t, UseDirectory(b, emb, NodeConfig{Directory: directory.Config{Node: "b"}, HandoffKey: handoffKey}))
	require.NoError(t, AcceptHandoffs(b, func(name string) (Config[int], error) {
		if name == "unknown" {
			return Config[int]{}, errors.New("no such game here")
		}
		return f.config("b")(name)
	}))
	b.Handle("GET /input", func(c *loop.Ctx) { Error(c, ErrHandingOff) })
	looptest.Start(t, b)
	waitFor(t, 5*time.Second, "b did not open", func() bool { return nodeOf(b).handle() != nil })
	r := f.open(t, a, "a", "e1")
	tok0 := r.Token()

	post := func(body []byte, sig string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("POST", "http://"+b.Addr().String()+handoffPath, strings.NewReader(string(body)))
		require.NoError(t, err)
		if sig != "" {
			req.Header.Set(macHeader, sig)
		}
		res, err := handoffClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		msg, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(msg)
	}
	now := time.Now()
	env := envelope{V: handoffVersion, Room: "e1", From: "a", Token: int64(tok0) + 1000, Period: int64(10 * time.Millisecond), N: 5,
		Next: now.Add(10 * time.Millisecond).UnixNano(), Prev: now.UnixNano(), Frozen: now.UnixNano(), Expires: now.Add(time.Minute).UnixNano(),
		State: []byte(`{"Sum":1}`)}
	body, err := json.Marshal(env)
	require.NoError(t, err)

	code, _ := post(body, "")
	assert.Equal(t, 401, code, "unsigned")
	code, _ = post(body, mac([]byte(strings.Repeat("z", 32)), body))
	assert.Equal(t, 401, code, "signed with another key")
	code, _ = post([]byte("{not json"), mac(handoffKey, []byte("{not json")))
	assert.Equal(t, 400, code, "garbage")
	old := env
	old.Expires = now.Add(-time.Second).UnixNano()
	ob, _ := json.Marshal(old)
	code, msg := post(ob, mac(handoffKey, ob))
	assert.Equal(t, 401, code, "expired: %s", msg)
	code, msg = post(body, mac(handoffKey, body))
	assert.Equal(t, 409, code, "a stale token: %s", msg)
	unk := env
	unk.Room = "unknown"
	ub, _ := json.Marshal(unk)
	code, msg = post(ub, mac(handoffKey, ub))
	assert.Equal(t, 404, code, msg)
	assert.Contains(t, msg, "no such game here")

	cl, err := emb.Open(context.Background(), directory.Config{Node: "probe"})
	require.NoError(t, err)
	defer cl.Close(context.Background())
	owner, err := cl.Lookup(context.Background(), "e1")
	require.NoError(t, err)
	assert.Equal(t, "a", owner.Node, "the refused envelopes moved nothing")
	assert.Equal(t, tok0, owner.Token)
	assert.Zero(t, nodeOf(b).hos.figures().Accepted)

	res, err := handoffClient.Get("http://" + b.Addr().String() + "/input")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 503, res.StatusCode)
	assert.Equal(t, "0", res.Header.Get("Retry-After"))
}

// TestHandoffStoppedMidway: a room stopped while its target holds the snapshot ends as
// stopped (not as moved: OnMoved does not run), the handoff fails, and its claim is given
// back once the target has not taken it.
func TestHandoffStoppedMidway(t *testing.T) {
	emb := directory.NewEmbedded()
	f := newFleet(10*time.Millisecond, SkipLate)
	a := handoffNode(t, emb, "a", f, loop.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	dd, err := emb.Open(context.Background(), directory.Config{Node: "d", PublicAddr: ln.Addr().String(), InternalAddr: ln.Addr().String(), Loops: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dd.Close(context.Background()) })
	hold, reached := make(chan struct{}), make(chan struct{})
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
			close(reached)
			<-hold
		}
	}()
	defer close(hold)
	r := f.open(t, a, "a", "halt")
	done := make(chan error, 1)
	go func() { _, err := handoff(t, a, r, "d"); done <- err }()
	<-reached
	r.Stop()
	require.Error(t, <-done)
	<-r.Done()
	f.mu.Lock()
	assert.Zero(t, f.moved["halt"], "OnMoved ran for a room that was stopped")
	f.mu.Unlock()
	waitFor(t, 5*time.Second, "the claim was not given back", func() bool {
		_, err := dd.Lookup(context.Background(), "halt")
		return errors.Is(err, directory.ErrNotClaimed)
	})
	assert.Equal(t, int64(1), nodeOf(a).hos.figures().Failed)
}

// TestHandoffEndpointBothModes moves a room to a target in each mode: the endpoint
// answered 500 in multi-thread mode (loop.Config.MultiThread: the handler runs on a
// goroutine of its own, and the room is loop-confined), so no room could be handed to
// such a node. In both modes the room moves, keeps its state and ticks on the target with
// contiguous numbers, and a refused envelope still gets its status.
func TestHandoffEndpointBothModes(t *testing.T) {
	for _, mt := range []bool{false, true} {
		name := map[bool]string{false: "loop", true: "multithread"}[mt]
		t.Run(name, func(t *testing.T) {
			emb := directory.NewEmbedded()
			f := newFleet(10*time.Millisecond, CatchUp(1000))
			a := handoffNode(t, emb, "a", f, loop.Config{MultiThread: mt})
			b := handoffNode(t, emb, "b", f, loop.Config{MultiThread: mt})
			r := f.open(t, a, "a", "mode")
			require.NoError(t, r.Input(7))
			waitFor(t, 5*time.Second, "the room did not tick 5 times on a", func() bool { _, n := f.latest("mode"); return n >= 5 })
			tok, err := handoff(t, a, r, "b")
			require.NoError(t, err)
			<-r.Done()
			waitFor(t, 5*time.Second, "the room did not tick 5 times on b", func() bool {
				log := f.log("mode")
				return len(log) > 0 && log[len(log)-1].node == "b" && f.room("mode") != r && len(log) > 10
			})
			st, _ := f.latest("mode")
			assert.Equal(t, 7, st.Sum, "the state moved")
			log := f.log("mode")
			_, firstB := checkLog(t, log, "a", "b", true)
			assert.Equal(t, tok, log[firstB].tok)
			assert.Equal(t, int64(1), nodeOf(b).hos.figures().Accepted)

			// A replay of the same room's move (a stale token) is refused with 409, not 500.
			now := time.Now()
			env := envelope{V: handoffVersion, Room: "mode", From: "a", Token: int64(tok) - 1, Period: int64(10 * time.Millisecond), N: 5,
				Next: now.UnixNano(), Prev: now.UnixNano(), Frozen: now.UnixNano(), Expires: now.Add(time.Minute).UnixNano(), State: []byte(`{"Sum":1}`)}
			body, err := json.Marshal(env)
			require.NoError(t, err)
			req, err := http.NewRequest("POST", "http://"+a.Addr().String()+handoffPath, strings.NewReader(string(body)))
			require.NoError(t, err)
			req.Header.Set(macHeader, mac(handoffKey, body))
			res, err := handoffClient.Do(req)
			require.NoError(t, err)
			msg, _ := io.ReadAll(res.Body)
			res.Body.Close()
			assert.Equal(t, 409, res.StatusCode, "%s", msg)
		})
	}
}

// TestHandoffOwnListenerSharedPort: two servers on one port (SO_REUSEPORT, as a process
// and the one replacing it on one machine), each serving the handoff endpoint on a
// listener of its own (NodeConfig.HandoffAddr), published as its internal address. A room
// moves from a to b with its state and contiguous tick numbers; the shared public port has
// no handoff route; the own listener refuses what the route refuses (401, 405, 404).
func TestHandoffOwnListenerSharedPort(t *testing.T) {
	emb := directory.NewEmbedded()
	f := newFleet(10*time.Millisecond, CatchUp(1000))
	node := func(id, addr string) *loop.Server {
		s := loop.New(looptest.Config(t, loop.Config{Addr: addr}))
		require.NoError(t, UseDirectory(s, emb, NodeConfig{Directory: directory.Config{Node: id}, HandoffKey: handoffKey, HandoffAddr: "127.0.0.1:0"}))
		require.NoError(t, AcceptHandoffs(s, f.config(id)))
		looptest.Start(t, s)
		waitFor(t, 5*time.Second, "the node did not open its directory handle", func() bool { return nodeOf(s).handle() != nil })
		return s
	}
	a := node("a", "")
	b := node("b", a.Addr().String())
	require.Equal(t, a.Addr().String(), b.Addr().String(), "one port")
	ia, ib := nodeOf(a).cfg.InternalAddr, nodeOf(b).cfg.InternalAddr
	require.NotEqual(t, ia, ib)
	require.NotEqual(t, a.Addr().String(), ia)
	ns, err := nodeOf(a).handle().Nodes(context.Background())
	require.NoError(t, err)
	require.Len(t, ns, 2)
	for _, ni := range ns {
		assert.Equal(t, a.Addr().String(), ni.PublicAddr, "both public on the shared port")
		assert.Equal(t, map[string]string{"a": ia, "b": ib}[ni.ID], ni.InternalAddr, "published")
	}

	r := f.open(t, a, "a", "shared")
	require.NoError(t, r.Input(5))
	waitFor(t, 5*time.Second, "the room did not tick 5 times on a", func() bool { _, n := f.latest("shared"); return n >= 5 })
	tok, err := handoff(t, a, r, "b")
	require.NoError(t, err)
	<-r.Done()
	waitFor(t, 5*time.Second, "the room did not tick 5 times on b", func() bool {
		log := f.log("shared")
		return len(log) > 0 && log[len(log)-1].node == "b" && len(log) > 10
	})
	st, _ := f.latest("shared")
	assert.Equal(t, 5, st.Sum)
	log := f.log("shared")
	_, firstB := checkLog(t, log, "a", "b", true)
	assert.Equal(t, tok, log[firstB].tok)
	assert.Equal(t, int64(1), nodeOf(b).hos.figures().Accepted)
	assert.Equal(t, int64(1), nodeOf(b).hos.figures().GapsTotal)

	status := func(method, url, sig string, body []byte) int {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(string(body)))
		require.NoError(t, err)
		if sig != "" {
			req.Header.Set(macHeader, sig)
		}
		res, err := handoffClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	body := []byte(`{"v":1}`)
	assert.Equal(t, 404, status("POST", "http://"+a.Addr().String()+handoffPath, mac(handoffKey, body), body), "no route on the public port")
	assert.Equal(t, 401, status("POST", "http://"+ib+handoffPath, mac([]byte(strings.Repeat("z", 32)), body), body))
	assert.Equal(t, 400, status("POST", "http://"+ib+handoffPath, mac(handoffKey, body), body))
	assert.Equal(t, 405, status("GET", "http://"+ib+handoffPath, "", nil))
	assert.Equal(t, 404, status("POST", "http://"+ib+"/other", "", nil))
}

// TestHandoffAddrConfig: HandoffAddr with an InternalAddr of its own is refused; an
// address that cannot be listened on is AcceptHandoffs's error.
func TestHandoffAddrConfig(t *testing.T) {
	emb := directory.NewEmbedded()
	s := loop.New(looptest.Config(t, loop.Config{}))
	err := UseDirectory(s, emb, NodeConfig{Directory: directory.Config{Node: "x", InternalAddr: "10.0.0.1:1"}, HandoffKey: handoffKey, HandoffAddr: "127.0.0.1:0"})
	require.ErrorContains(t, err, "HandoffAddr")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	require.NoError(t, UseDirectory(s, emb, NodeConfig{Directory: directory.Config{Node: "x"}, HandoffKey: handoffKey, HandoffAddr: busy.Addr().String()}))
	require.ErrorContains(t, AcceptHandoffs(s, newFleet(time.Second, SkipLate).config("x")), "HandoffAddr")
	looptest.Start(t, s)
}

// slowClaims is a directory whose claims wait until release is closed.
type slowClaims struct {
	op      directory.Opener
	release chan struct{}
	waiting atomic.Int32
}

func (o *slowClaims) Open(ctx context.Context, cfg directory.Config) (directory.Directory, error) {
	d, err := o.op.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return slowClaimDir{d, o}, nil
}

type slowClaimDir struct {
	directory.Directory
	o *slowClaims
}

func (d slowClaimDir) Claim(ctx context.Context, room string) (directory.Claim, error) {
	d.o.waiting.Add(1)
	<-d.o.release
	return d.Directory.Claim(ctx, room)
}

// TestHandoffWaitsForARoomBeingMade: a player reaches the target for a room the source
// still owns, so the target makes a room of that name whose claim is pending (it will
// fail: the source holds the claim). A handoff arriving then waits for that room to stop
// and takes the room, where it answered 409 before (and the room could not move there:
// with players reconnecting during a drain, rooms were lost).
func TestHandoffWaitsForARoomBeingMade(t *testing.T) {
	emb := directory.NewEmbedded()
	slow := &slowClaims{op: emb, release: make(chan struct{})}
	f := newFleet(10*time.Millisecond, CatchUp(1000))
	a := handoffNode(t, emb, "a", f, loop.Config{})
	b := handoffNode(t, slow, "b", f, loop.Config{})
	r := f.open(t, a, "a", "busy")
	require.NoError(t, r.Input(4))
	cfg, _ := f.config("b")("busy")
	var made *Room[int]
	looptest.OnLoop(t, b.Loop(0), func() {
		var err error
		made, err = New(b.Loop(0), cfg) // as Admit does for a player who arrived at b
		require.NoError(t, err)
	})
	waitFor(t, 5*time.Second, "b's room did not start its claim", func() bool { return slow.waiting.Load() > 0 })
	done := make(chan error, 1)
	go func() { _, err := handoff(t, a, r, "b"); done <- err }()
	waitFor(t, 5*time.Second, "the handoff did not reach b", func() bool { // b's endpoint holds it
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		snap, err := stats.Take(ctx, b, stats.ViewTasks)
		require.NoError(t, err)
		for _, tk := range snap.Tasks.Live {
			if tk.Route == "POST "+handoffPath {
				return true
			}
		}
		return false
	})
	select {
	case err := <-done:
		t.Fatalf("the handoff answered while b's room of the name was being made: %v", err)
	default:
	}
	close(slow.release) // b's claim fails against a's: its room stops
	require.NoError(t, <-done)
	<-made.Done()
	assert.Zero(t, made.Token(), "b's own room of the name was never claimed")
	waitFor(t, 5*time.Second, "the room did not tick on b", func() bool {
		log := f.log("busy")
		return len(log) > 0 && log[len(log)-1].node == "b"
	})
	st, _ := f.latest("busy")
	assert.Equal(t, 4, st.Sum)
	checkLog(t, f.log("busy"), "a", "b", true)
}
