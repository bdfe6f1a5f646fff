package room

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// ErrHandingOff is returned by Room.Input while the room is frozen for a handoff to
// another node (Room.Handoff, or the drain): the input was not queued; resend it. If the
// handoff fails the room takes it again at once; once the room has moved, Input answers
// ErrMoved and the player asks any node where the room is (Join). Error answers it 503
// with Retry-After 0.
var ErrHandingOff = errors.New("room: handing off to another node; resend the input")

const (
	// handoffPath is the target's endpoint (AcceptHandoffs routes it).
	handoffPath = "/baton/handoff"
	// macHeader carries base64url(HMAC-SHA256(HandoffKey, body)).
	macHeader = "Baton-Handoff-Mac"
	// minHandoffKey is the shortest HandoffKey: the seat tokens' minimum.
	minHandoffKey = 32
	// handoffVersion is the envelope's format.
	handoffVersion = 1
	// handoffExpiry bounds how long an envelope is accepted after it was sent: a captured
	// request cannot be replayed later (the compare-and-swap on the token refuses a replay
	// of a completed handoff anyway).
	handoffExpiry = 30 * time.Second
	// frozenNow and frozenMoved are handoffState.frozen's values: inputs are refused with
	// ErrHandingOff, then ErrMoved.
	frozenNow, frozenMoved = 1, 2
	// gapWindow is how many freeze-to-first-tick gaps the figures keep.
	gapWindow = 1024
)

// handoffState is a room's part in handoffs, in its core.
type handoffState struct {
	hooks    bool               // Config.Snapshot and Restore are set; immutable
	req      *handoffReq        // a handoff asked for, done by the tick task after the current tick. Loop-confined
	frozen   int                // guarded by core.inMu: 0, frozenNow, frozenMoved
	movedOut bool               // the room was handed off: its claim is the target's. Loop-confined
	resumed  int64              // Unix ns of the freeze this room was restored from; 0 once it has ticked. Loop-confined
	dest     directory.NodeInfo // the node the room was handed to (its members' close names it). Loop-confined
}

// handoffReq is one handoff asked for.
type handoffReq struct {
	to       string    // the target node; "" lets placement choose (and, on drain, try the next)
	drain    bool      // asked by the drain: on failure the room drains as without hooks
	deadline time.Time // the drain's deadline; zero: none
	done     *loop.Future[directory.Token]
	slot     bool // it holds one of the node's drain slots (handoffSlot)
}

// defaultHandoffsAtOnce is NodeConfig.HandoffsAtOnce's default.
const defaultHandoffsAtOnce = 8

// ready reports whether the handoff asked for may begin now: one asked by a drain waits
// for one of the node's slots (NodeConfig.HandoffsAtOnce) unless the drain's deadline is
// a second away. The tick task's own.
func (q *handoffReq) ready(n *node) bool {
	if !q.drain || q.slot || n.hoMax == 0 {
		return true
	}
	if n.hoBusy.Add(1) <= n.hoMax {
		q.slot = true
		return true
	}
	n.hoBusy.Add(-1)
	return !q.deadline.IsZero() && time.Until(q.deadline) < time.Second
}

// refusal is what Input answers while frozen. Under core.inMu.
func (h *handoffState) refusal() error {
	if h.frozen == frozenMoved {
		return ErrMoved
	}
	return ErrHandingOff
}

// abandon settles a handoff asked for that the tick task will not do (the room stopped).
// Loop-confined.
func (h *handoffState) abandon() {
	if q := h.req; q != nil {
		h.req = nil
		if q.done != nil {
			q.done.Resolve(0, ErrRoomStopped)
		}
	}
}

// firstTick records the freeze-to-first-tick gap of a room restored from a handoff, at its
// first tick here. The tick task's own.
func (h *handoffState) firstTick(n *node) {
	n.hos.gap(time.Duration(time.Now().UnixNano() - h.resumed))
	h.resumed = 0
}

// handoffStats are a node's handoff figures. Safe for concurrent use.
type handoffStats struct {
	started, completed, failed, accepted atomic.Int64

	mu     sync.Mutex
	gaps   []time.Duration       // the last gapWindow gaps, a ring; guarded by mu
	next   int                   // guarded by mu
	gapN   int64                 // gaps recorded since start; guarded by mu
	gapSum time.Duration         // their sum; guarded by mu
	gapLE  [len(gapBounds)]int64 // gaps since start at most each bound; guarded by mu
}

// gapBounds are the bounds the gaps are counted under since the start (a histogram's
// buckets: promexport exports it): around a period of 20-100 Hz, where gaps fall.
var gapBounds = [...]time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 75 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond,
	200 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 5 * time.Second, 10 * time.Second}

func (s *handoffStats) gap(d time.Duration) {
	s.mu.Lock()
	if len(s.gaps) < gapWindow {
		s.gaps = append(s.gaps, d)
	} else {
		s.gaps[s.next] = d
		s.next = (s.next + 1) % gapWindow
	}
	s.gapN++
	s.gapSum += d
	for i, b := range gapBounds {
		if d <= b {
			s.gapLE[i]++
		}
	}
	s.mu.Unlock()
}

// handoffFigures are a node's handoff figures on the stats page "cluster": handoffs this
// node started (as the source), completed and failed; rooms it accepted (as the target);
// and the freeze-to-first-tick gap of the rooms it accepted: how many, their sum and how
// many were at most each bound since the start (a histogram), and the percentiles of the
// last ones (up to 1024): from the moment the source stopped taking inputs to the room's
// first tick here, by the two nodes' wall clocks. promexport exports them from the page's
// JSON (their tags are its contract).
type handoffFigures struct {
	Started   int64         `json:"started"`
	Completed int64         `json:"completed"`
	Failed    int64         `json:"failed"`
	Accepted  int64         `json:"accepted"`
	GapsTotal int64         `json:"gaps_total"` // gaps recorded since the start
	GapSum    time.Duration `json:"gap_sum_ns"` // their sum
	GapBounds []int64       `json:"gap_bounds_ns"`
	GapLE     []int64       `json:"gap_le"` // GapLE[i]: gaps since the start at most GapBounds[i]
	Gaps      int           `json:"gaps"`   // how many the percentiles are over
	GapP50    time.Duration `json:"gap_p50_ns"`
	GapP99    time.Duration `json:"gap_p99_ns"`
	GapMax    time.Duration `json:"gap_max_ns"`

	window []time.Duration // the gaps the percentiles come from (take to read)
}

// take copies the figures, leaving the percentiles to read: the section's Take runs on a
// loop. Any goroutine.
func (s *handoffStats) take() handoffFigures {
	f := handoffFigures{Started: s.started.Load(), Completed: s.completed.Load(), Failed: s.failed.Load(), Accepted: s.accepted.Load()}
	s.mu.Lock()
	f.window, f.GapsTotal, f.GapSum = slices.Clone(s.gaps), s.gapN, s.gapSum
	f.GapLE = slices.Clone(s.gapLE[:])
	s.mu.Unlock()
	f.GapBounds = make([]int64, len(gapBounds))
	for i, b := range gapBounds {
		f.GapBounds[i] = int64(b)
	}
	return f
}

// read computes the percentiles of what take copied. Any goroutine.
func (f handoffFigures) read() handoffFigures {
	g := f.window
	f.window = nil
	if len(g) == 0 {
		return f
	}
	slices.Sort(g)
	at := func(q float64) time.Duration { return g[min(len(g)-1, int(q*float64(len(g))))] }
	f.Gaps, f.GapP50, f.GapP99, f.GapMax = len(g), at(0.50), at(0.99), g[len(g)-1]
	return f
}

// figures returns the figures now. Any goroutine.
func (s *handoffStats) figures() handoffFigures { return s.take().read() }

// envelope is what a handoff sends: the room's snapshot and what the runtime carries.
type envelope struct {
	V       int             `json:"v"`
	Room    string          `json:"room"`
	From    string          `json:"from"`
	Token   int64           `json:"token"` // the room's token at the source: the compare-and-swap's
	Period  int64           `json:"period_ns"`
	N       uint64          `json:"n"`               // the next tick's number
	Next    int64           `json:"next_unix_ns"`    // the next tick's deadline
	Prev    int64           `json:"prev_unix_ns"`    // when the last tick began (its DT's origin)
	Frozen  int64           `json:"frozen_unix_ns"`  // when the source stopped taking inputs
	Expires int64           `json:"expires_unix_ns"` // not accepted after
	State   []byte          `json:"state"`
	Inputs  json.RawMessage `json:"inputs,omitempty"` // the queued inputs, oldest first
	Seats   []seatRecord    `json:"seats,omitempty"`  // the players' seats (seats.go)
}

// errExpired is decodeEnvelope's error for an envelope past its expiry.
var errExpired = errors.New("room: handoff envelope expired")

// decodeEnvelope parses and checks a handoff's body (already authenticated) at time now
// (Unix ns). Any goroutine.
func decodeEnvelope(body []byte, now int64) (envelope, error) {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return env, fmt.Errorf("room: handoff envelope: %w", err)
	}
	switch {
	case env.V != handoffVersion:
		return env, fmt.Errorf("room: handoff envelope: version %d, not %d", env.V, handoffVersion)
	case directory.CheckRoom(env.Room) != nil:
		return env, fmt.Errorf("room: handoff envelope: room: %w", directory.CheckRoom(env.Room))
	case env.Token <= 0 || env.Period <= 0 || env.N == 0:
		return env, fmt.Errorf("room: handoff envelope: token (%d), period (%d ns) and tick number (%d) must be positive", env.Token, env.Period, env.N)
	case now > env.Expires:
		return env, fmt.Errorf("%w %v ago", errExpired, time.Duration(now-env.Expires))
	}
	if len(env.Inputs) > 0 && !json.Valid(env.Inputs) {
		return env, errors.New("room: handoff envelope: inputs are not JSON")
	}
	for _, st := range env.Seats {
		if st.Player == "" || st.Nonce == 0 {
			return env, fmt.Errorf("room: handoff envelope: a seat without a player or nonce (%q, %d)", st.Player, st.Nonce)
		}
	}
	return env, nil
}

// Handoff moves the room, live, to the node named to (empty: the directory's placement
// chooses, never this node nor a draining one) and returns the room's new token. After
// the current tick the room stops taking inputs (ErrHandingOff), takes its snapshot
// (Config.Snapshot) and sends it, with its next tick number and deadline and its queued
// inputs, to the target's endpoint (AcceptHandoffs); the target restores it, moves the
// room's claim to itself with a compare-and-swap on the token (a new, greater token) and
// ticks it from its next deadline. The room here then stops as moved: Config.OnMoved, its
// members cancelled with ErrMoved, and it never ticks again. If any step fails the room
// carries on here and takes inputs again, and the error says what failed (try another
// target). The server must be a node of a shared directory (UseDirectory) with a
// HandoffKey. Loop-confined: w is a task of the room's loop, which Handoff parks.
func (r *Room[I]) Handoff(w loop.Waiter, to string) (directory.Token, error) {
	c := &r.core
	c.confined("Handoff")
	if err := c.canHandOff(); err != nil {
		return 0, err
	}
	if c.ho.req != nil {
		return 0, fmt.Errorf("room: Handoff of %q: a handoff is in progress", c.name)
	}
	if w == loop.Waiter(c.tickTask) {
		// The tick task does the handoff after the tick: parked here, it never would.
		return 0, fmt.Errorf("room: Handoff of %q from its own tick: call it from another task of the loop (Room.Go)", c.name)
	}
	f := loop.NewFuture[directory.Token](c.tbl.l)
	c.ho.req = &handoffReq{to: to, done: f}
	return f.Await(w, 0)
}

// canHandOff says why the room cannot be handed off, or nil. Loop-confined.
func (c *core) canHandOff() error {
	n := c.tbl.node
	switch {
	case !c.ho.hooks:
		return fmt.Errorf("room: Handoff of %q: Config.Snapshot and Restore are not set", c.name)
	case n.local || n.hoKey == nil:
		return fmt.Errorf("room: Handoff of %q: the server is not a node of a shared directory with a HandoffKey (UseDirectory)", c.name)
	case c.stopping || c.ended || c.tickTask == nil:
		return ErrRoomStopped
	case c.dir == nil:
		return fmt.Errorf("room: Handoff of %q: the room is not claimed yet (Claimed)", c.name)
	}
	return nil
}

// handOffOnDrain asks the room's tick task to hand the room off as the server drains, and
// reports whether it did (a room without hooks or a shared directory drains as before).
// Loop-confined.
func (c *core) handOffOnDrain(deadline time.Time) bool {
	if c.canHandOff() != nil || c.ho.req != nil {
		return false
	}
	c.ho.req = &handoffReq{drain: true, deadline: deadline}
	return true
}

// errLost is wrapped by transfer when the room's claim is no longer this node's after a
// failed attempt (the target moved it and then failed, or the claim is gone): the room
// must not tick here again.
var errLost = errors.New("the room's claim is no longer this node's")

// handOff does the handoff asked for, between two ticks: the next tick is n, due at
// clock reading next; the last began at prev. It returns the clock after it, and whether
// the room moved out (the tick task returns). The tick task's own.
func (r *Room[I]) handOff(bt *loop.Task, n uint64, next, prev int64) (int64, bool) {
	c := &r.core
	q := c.ho.req
	c.ho.req = nil
	nd := c.tbl.node
	if q.slot {
		defer nd.hoBusy.Add(-1)
	}
	nd.hos.started.Add(1)
	if len(c.seats) > 0 || len(c.seatEv) > 0 {
		c.seatTurn(bt, c.tbl.now()) // the hooks the state is owed, before its snapshot
	}
	tok, to, err := r.transfer(bt, q, n, next, prev)
	if err == nil {
		nd.hos.completed.Add(1)
		c.tbl.logger.Info("room: handed off", "room", c.name, "to", to, "token", tok)
		if q.done != nil {
			q.done.Resolve(tok, nil)
		}
		c.moveOut(bt)
		return c.tbl.now(), true
	}
	nd.hos.failed.Add(1)
	if q.done != nil {
		q.done.Resolve(0, err)
	}
	if bt.Err() != nil {
		// The room was stopped during its handoff: it ends as asked. Its release (after it
		// ends) compares the token: harmless if the target took the claim meanwhile.
		return c.tbl.now(), true
	}
	if errors.Is(err, errLost) {
		c.tbl.logger.Error("room: handoff failed and the claim may have left this node; the room stops here", "room", c.name, "err", err)
		c.lapse(bt)
		return c.tbl.now(), true
	}
	c.inMu.Lock()
	c.ho.frozen = 0
	c.inMu.Unlock()
	c.tbl.logger.Warn("room: handoff failed; the room carries on here", "room", c.name, "err", err)
	if q.drain {
		c.tbl.drainAsBefore(c, q.deadline)
	}
	return c.tbl.now(), false
}

// moveOut stops the room that was handed off: inputs get ErrMoved, OnMoved tells the
// members, and they are cancelled with ErrMoved. The tick task's own.
func (c *core) moveOut(bt *loop.Task) {
	c.ho.movedOut = true
	c.inMu.Lock()
	c.ho.frozen = frozenMoved
	c.inMu.Unlock()
	if c.onMoved != nil && bt.Contain(c.onMoved) {
		c.rec.Panicked()
	}
	c.stopWith(ErrMoved)
}

// transfer freezes the room, snapshots it and sends it to a target until one takes it,
// returning the new token and the target. The tick task's own.
func (r *Room[I]) transfer(bt *loop.Task, q *handoffReq, n uint64, next, prev int64) (directory.Token, string, error) {
	c := &r.core
	nd, d, tbl := c.tbl.node, c.dir, c.tbl
	if err := c.canHandOff(); err != nil {
		return 0, "", err
	}
	c.inMu.Lock()
	c.ho.frozen = frozenNow
	pending := slices.Clone(r.in)
	c.inMu.Unlock()
	frozen := time.Now()
	var state []byte
	var err error
	if bt.Contain(func() { state, err = r.cfg.Snapshot(r) }) {
		c.rec.Panicked()
		return 0, "", fmt.Errorf("room: handoff of %q: Config.Snapshot panicked", c.name)
	}
	if err != nil {
		return 0, "", fmt.Errorf("room: handoff of %q: Config.Snapshot: %w", c.name, err)
	}
	env := envelope{V: handoffVersion, Room: c.name, From: d.Node(), Token: c.token.Load(), Period: c.period, N: n,
		Frozen: frozen.UnixNano(), State: state}
	wall := func(at int64) int64 { return frozen.UnixNano() + (at - tbl.now()) }
	env.Next, env.Prev = wall(next), wall(prev)
	env.Seats = c.seatRecords(frozen.UnixNano())
	if len(pending) > 0 {
		if env.Inputs, err = json.Marshal(pending); err != nil {
			return 0, "", fmt.Errorf("room: handoff of %q: the queued inputs: %w", c.name, err)
		}
	}
	tried := []string{d.Node()}
	for {
		target, err := pickTarget(bt, d, q.to, tried)
		if err != nil {
			return 0, "", fmt.Errorf("room: handoff of %q: %w", c.name, err)
		}
		tried = append(tried, target.ID)
		timeout := 2*nd.cfg.RequestTimeout + time.Second
		if !q.deadline.IsZero() {
			timeout = min(timeout, time.Until(q.deadline))
		}
		env.Expires = time.Now().Add(handoffExpiry).UnixNano()
		body, err := json.Marshal(env)
		if err != nil {
			return 0, "", fmt.Errorf("room: handoff of %q: %w", c.name, err)
		}
		tok, err := send(bt, nd.hoKey, target.InternalAddr, body, timeout)
		if err == nil {
			c.ho.dest = target
			return tok, target.ID, nil
		}
		err = fmt.Errorf("room: handoff of %q to %q: %w", c.name, target.ID, err)
		// The target may have moved the claim and failed to answer: the directory says.
		cl, lerr := r.owner(bt, d)
		switch {
		case lerr != nil:
			return 0, "", fmt.Errorf("%w; then %w: %w", err, errLost, lerr)
		case cl.Node == target.ID && cl.Token > directory.Token(env.Token):
			c.ho.dest = target
			return cl.Token, target.ID, nil // it took the room; only its answer was lost
		case cl.Node != d.Node() || cl.Token != directory.Token(env.Token):
			return 0, "", fmt.Errorf("%w; then %w (owner %q, token %d)", err, errLost, cl.Node, cl.Token)
		}
		if !q.drain || q.to != "" || (!q.deadline.IsZero() && time.Until(q.deadline) <= 0) {
			return 0, "", err
		}
		tbl.logger.Warn("room: handoff to a node failed; trying another", "room", c.name, "err", err)
	}
}

// owner reads the room's claim, retrying while the directory does not answer and the
// node's lease holds (past it the room lapses anyway). The tick task's own.
func (r *Room[I]) owner(bt *loop.Task, d directory.Directory) (directory.Claim, error) {
	for {
		cl, err := offload.Do(bt, func(ctx context.Context) (directory.Claim, error) { return d.Lookup(ctx, r.core.name) })
		if errors.Is(err, directory.ErrNotClaimed) {
			return directory.Claim{}, nil
		}
		if err == nil || !errors.Is(err, directory.ErrUnavailable) || !d.Valid() || bt.Err() != nil {
			return cl, err
		}
		if bt.Sleep(100*time.Millisecond) != nil {
			return cl, err
		}
	}
}

// pickTarget names the node to hand off to: to if given (live, not draining, not this
// one), else the placement's best candidate not yet tried. The task's own.
func pickTarget(t *loop.Task, d directory.Directory, to string, tried []string) (directory.NodeInfo, error) {
	if to != "" {
		if slices.Contains(tried, to) {
			return directory.NodeInfo{}, fmt.Errorf("cannot hand off to node %q (this node, or tried)", to)
		}
		ns, err := offload.Do(t, func(ctx context.Context) ([]directory.NodeInfo, error) { return d.Nodes(ctx) })
		if err != nil {
			return directory.NodeInfo{}, err
		}
		for _, ni := range ns {
			if ni.ID == to {
				if ni.Draining {
					return directory.NodeInfo{}, fmt.Errorf("node %q is draining", to)
				}
				return ni, nil
			}
		}
		return directory.NodeInfo{}, fmt.Errorf("node %q: %w", to, directory.ErrUnknownNode)
	}
	p, err := offload.Do(t, func(ctx context.Context) (directory.Placement, error) { return d.Place(ctx) })
	if err != nil {
		return directory.NodeInfo{}, err
	}
	best := -1
	for i, cd := range p.Candidates { // in ID order: the first of equal headrooms wins
		if cd.Skipped != "" || cd.Node.Draining || slices.Contains(tried, cd.Node.ID) {
			continue
		}
		if best < 0 || cd.Headroom > p.Candidates[best].Headroom {
			best = i
		}
	}
	if best < 0 {
		return directory.NodeInfo{}, fmt.Errorf("no node to hand off to (tried %v): %w", tried, directory.ErrNoNode)
	}
	return p.Candidates[best].Node, nil
}

// handoffClient sends handoffs: no proxy (nodes talk directly), no kept connections (a
// handoff is rare; an idle connection would outlive the server's tasks).
var handoffClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// send posts body to the target and returns the token it answered. Offloaded from t.
func send(t *loop.Task, key []byte, addr string, body []byte, timeout time.Duration) (directory.Token, error) {
	if timeout <= 0 {
		return 0, errors.New("no time left before the drain deadline")
	}
	return offload.Do(t, func(ctx context.Context) (directory.Token, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+handoffPath, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(macHeader, mac(key, body))
		res, err := handoffClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		if res.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("target answered %d: %s", res.StatusCode, bytes.TrimSpace(b))
		}
		var ans struct {
			Token directory.Token `json:"token"`
		}
		if err := json.Unmarshal(b, &ans); err != nil || ans.Token == 0 {
			return 0, fmt.Errorf("target answered 200 without a token: %q", b)
		}
		return ans.Token, nil
	})
}

// mac is base64url(HMAC-SHA256(key, body)), unpadded.
func mac(key, body []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write(body)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// AcceptHandoffs lets srv take rooms handed off by other nodes (Room.Handoff, and the
// handoff on drain): it routes POST /baton/handoff to a handler that checks the request's
// HMAC (NodeConfig.HandoffKey), asks configFor for the room's Config by its name (Tick,
// hooks, OnMoved...; Name is set to the room's, and Period must be the room's), makes the
// room on the handler's loop, restores it (Config.Restore, then the queued inputs),
// moves the room's claim to this node with a compare-and-swap on the source's token, and
// ticks it from the room's next deadline with the next tick number. It answers the new
// token, or an error status after which the room is not this node's. One input type per
// server. Call it after UseDirectory (with a HandoffKey) and before ListenAndServe, from
// one goroutine. Both modes: in multi-thread mode (loop.Config.MultiThread) the handler
// takes the room in a task of its loop. With NodeConfig.HandoffAddr the endpoint is not a
// route of srv: AcceptHandoffs listens there (an error if it cannot), serves it from the
// server's start until ListenAndServe returns, and takes rooms on srv.LoopFor(name).
func AcceptHandoffs[I any](srv *loop.Server, configFor func(name string) (Config[I], error)) error {
	v, ok := nodes.Load(serverKey(srv))
	if !ok || v.(*node).local || v.(*node).hoKey == nil {
		return errors.New("room: AcceptHandoffs: call UseDirectory with a NodeConfig.HandoffKey first")
	}
	if configFor == nil {
		return errors.New("room: AcceptHandoffs: nil configFor")
	}
	n := v.(*node)
	if n.hoAddr == "" {
		srv.Handle("POST "+handoffPath, func(c *loop.Ctx) { accept(c, n, configFor) })
		return nil
	}
	ln, err := net.Listen("tcp", n.hoAddr)
	if err != nil {
		return fmt.Errorf("room: AcceptHandoffs: NodeConfig.HandoffAddr: %w", err)
	}
	n.cfg.InternalAddr = ln.Addr().String() // published when the node opens (at the start)
	limit := srv.Config().Limits.MaxBodyBytes
	hs := &http.Server{ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			acceptHTTP(w, req, srv, n, limit, configFor)
		})}
	srv.OnStart(func(l *loop.Loop) error {
		if l.Index() == 0 {
			go func() { _ = hs.Serve(ln) }()
		}
		return nil
	})
	go func() {
		<-srv.Done()
		_ = hs.Close()
		_ = ln.Close() // if it never served
	}()
	return nil
}

// openEnvelope authenticates and decodes a handoff's body, or returns the answer refusing it.
// Any goroutine.
func (n *node) openEnvelope(body []byte, sig string) (envelope, *answer) {
	if !hmac.Equal([]byte(sig), []byte(mac(n.hoKey, body))) {
		return envelope{}, &answer{status: 401, msg: "bad handoff signature"}
	}
	env, err := decodeEnvelope(body, time.Now().UnixNano())
	if errors.Is(err, errExpired) {
		return env, &answer{status: 401, msg: err.Error()}
	} else if err != nil {
		return env, &answer{status: 400, msg: err.Error()}
	}
	return env, nil
}

// accept is the handoff endpoint's handler on the server: it authenticates and decodes
// the envelope wherever the handler runs, then takes the room on the loop (take). In loop
// mode the handler's task is on the loop and takes it itself; a multi-thread handler (a
// goroutine of its own, Task.MayBlock) starts a task on the loop to take it and waits for
// its answer, since a room is loop-confined. The handler's task.
func accept[I any](c *loop.Ctx, n *node, configFor func(name string) (Config[I], error)) {
	env, refused := n.openEnvelope(c.Body(), c.Header(macHeader))
	if refused != nil {
		refused.write(c)
		return
	}
	if !c.Task.MayBlock() {
		take(&c.Task, n, configFor, env).write(c)
		return
	}
	l := c.Loop()
	res := loop.NewFuture[answer](l)
	c.Task.OnLoop(func() { startTake(l, n, configFor, env, func(a answer) { res.Resolve(a, nil) }) })
	a, err := res.Await(c, 2*handoffExpiry)
	if err != nil {
		// The loop stopped before taking the request, or this request was cancelled: the
		// task (if it runs) ends on its own; the source reads the directory.
		a = answer{status: 503, msg: "this node is stopping: " + err.Error()}
	}
	a.write(c)
}

// startTake starts a task on l that takes the room env carries and calls done with the
// answer (at once with 503 if the loop is stopping). Loop-confined.
func startTake[I any](l *loop.Loop, n *node, configFor func(name string) (Config[I], error), env envelope, done func(answer)) {
	h := l.Go("room:handoff "+env.Room, func(t *loop.Task) { done(take(t, n, configFor, env)) })
	if h.Task() == nil { // the loop is stopping: the task will not run
		done(answer{status: 503, msg: "this node is stopping"})
	}
}

// acceptHTTP is the handoff endpoint on the node's own listener (NodeConfig.HandoffAddr):
// it authenticates and decodes on its goroutine, then takes the room in a task of the
// room's loop (srv.LoopFor) and waits for the answer. A net/http handler.
func acceptHTTP[I any](w http.ResponseWriter, req *http.Request, srv *loop.Server, n *node, limit int64, configFor func(name string) (Config[I], error)) {
	if req.URL.Path != handoffPath {
		http.NotFound(w, req)
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		answer{status: 405, msg: "POST only"}.writeHTTP(w)
		return
	}
	if limit > 0 {
		req.Body = http.MaxBytesReader(w, req.Body, limit)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		answer{status: 413, msg: err.Error()}.writeHTTP(w)
		return
	}
	env, refused := n.openEnvelope(body, req.Header.Get(macHeader))
	if refused != nil {
		refused.writeHTTP(w)
		return
	}
	l := srv.LoopFor(env.Room)
	res := make(chan answer, 1)
	if l.Post(func() { startTake(l, n, configFor, env, func(a answer) { res <- a }) }) != nil {
		answer{status: 503, msg: "this node is stopping"}.writeHTTP(w)
		return
	}
	select {
	case a := <-res:
		a.writeHTTP(w)
	case <-srv.Done():
		answer{status: 503, msg: "this node stopped"}.writeHTTP(w)
	case <-req.Context().Done(): // the source gave up; the task ends on its own
	}
}

// answer is the endpoint's answer: 200 with the new token, or an error status.
type answer struct {
	status int
	msg    string          // the error's text (not 200)
	token  directory.Token // 200
}

// write answers a on c. The handler's task.
func (a answer) write(c *loop.Ctx) {
	if a.status == 200 {
		c.JSON(200, map[string]directory.Token{"token": a.token})
		return
	}
	if a.status == 503 {
		c.SetHeader("Retry-After", "1")
	}
	c.String(a.status, a.text())
}

// writeHTTP answers a on w. A net/http handler.
func (a answer) writeHTTP(w http.ResponseWriter) {
	if a.status == 200 {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]directory.Token{"token": a.token})
		return
	}
	if a.status == 503 {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.text())
}

// text is an error answer's body.
func (a answer) text() string {
	return fmt.Sprintf("%d %s: %s\n", a.status, http.StatusText(a.status), a.msg)
}

// take restores the room env carries on t's loop, moves its claim here and starts it. A
// task on the loop (it parks on the directory's Move).
func take[I any](t *loop.Task, n *node, configFor func(name string) (Config[I], error), env envelope) answer {
	l := t.Loop()
	d := n.handle()
	if d == nil || n.draining.Load() || l.Phase() != "serving" {
		return answer{status: 503, msg: "this node takes no rooms now"}
	}
	cfg, err := configFor(env.Room)
	if err != nil {
		return answer{status: 404, msg: err.Error()}
	}
	cfg.Name = env.Room
	if err := cfg.Validate(); err != nil {
		return answer{status: 500, msg: err.Error()}
	}
	if cfg.Restore == nil || cfg.Period != time.Duration(env.Period) {
		return answer{status: 409, msg: fmt.Sprintf("room %q here has no Restore or another period (%v, the room's %v)", env.Room, cfg.Period, time.Duration(env.Period))}
	}
	if cfg, err = fill(cfg); err != nil {
		return answer{status: 400, msg: err.Error()}
	}
	tbl := tableOf(l)
	for wait := n.cfg.RequestTimeout; ; wait -= 5 * time.Millisecond {
		old := tbl.byName[env.Room]
		if old == nil || old.ended || old.stopping {
			break
		}
		if old.dir != nil || wait <= 0 {
			return answer{status: 409, msg: fmt.Sprintf("room %q runs here already", env.Room)}
		}
		// A room of that name is being made here (a player arrived, was sent here, while the
		// source owns the room): its claim fails against the source's and it stops. Wait.
		if t.Sleep(5*time.Millisecond) != nil {
			return answer{status: 503, msg: "this node is stopping"}
		}
	}
	claimed := loop.NewFuture[directory.Token](l)
	r := build(tbl, cfg, claimed, 0)
	if t.Contain(func() { err = cfg.Restore(r, env.State) }) {
		err = errors.New("Config.Restore panicked")
	}
	if err == nil && len(env.Inputs) > 0 {
		err = json.Unmarshal(env.Inputs, &r.in)
	}
	if err != nil {
		return answer{status: 422, msg: fmt.Sprintf("room %q: %v", env.Room, err)}
	}
	r.core.queueLen = len(r.in)
	r.core.restoreSeats(env.Seats)
	cl, err := offload.Do(t, func(ctx context.Context) (directory.Claim, error) {
		cl, err := d.Move(ctx, env.Room, directory.Token(env.Token), d.Node())
		if errors.Is(err, directory.ErrUnavailable) { // it may have taken effect: the directory says
			if cl2, err2 := d.Lookup(ctx, env.Room); err2 == nil && cl2.Node == d.Node() && cl2.Token > directory.Token(env.Token) {
				return cl2, nil
			}
		}
		return cl, err
	})
	if err != nil {
		status := 503
		if errors.Is(err, directory.ErrNotOwner) || errors.Is(err, directory.ErrUnknownNode) {
			status = 409
		}
		return answer{status: status, msg: fmt.Sprintf("moving room %q: %v", env.Room, err)}
	}
	rc := &r.core
	rc.dir = d
	rc.token.Store(int64(cl.Token))
	claimed.Resolve(cl.Token, nil)
	rc.ho.resumed = env.Frozen
	now, wall := tbl.now(), time.Now().UnixNano()
	if err := r.launch(now+(env.Prev-wall), now+(env.Next-wall), env.N); err != nil {
		// The loop is stopping: the room is this node's and cannot run. Give the claim back
		// (the source sees it unclaimed and stops: the room is lost, as with any stop).
		l.Go("room:release", func(t *loop.Task) {
			_, _ = offload.Do(t, func(ctx context.Context) (struct{}, error) { return struct{}{}, d.Release(ctx, env.Room, cl.Token) })
		})
		return answer{status: 503, msg: "this node is stopping"}
	}
	n.hos.accepted.Add(1)
	return answer{status: 200, token: cl.Token}
}
