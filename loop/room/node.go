package room

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// node is this process's node in a room directory (package directory): it holds the
// node's lease, renews it from a loop background task, publishes the node's load every
// second or so, claims each room the server makes (the claim's revision is the room's
// fencing token, Room.Token) and answers joins (Join, Admit). A server gets one with
// UseDirectory; a server that never calls it gets a node of its own on an in-memory
// directory (directory.Embedded) that nobody else can take a room from and whose lease
// never lapses, so that one process behaves as it always did. Safe for concurrent use.
type node struct {
	op    directory.Opener
	cfg   directory.Config // Node, addresses (filled at open), TTL...; immutable after start
	seats *directory.SeatSigner
	every time.Duration // publish period
	local bool          // the default node: one process, claims made inline, never lapses
	log   *slog.Logger  // set at start (the server's logger); nil for the default node

	dir      atomic.Pointer[handle] // the open handle; nil before open and after its lease lapsed
	draining atomic.Bool

	tablesMu sync.Mutex
	// tables are every loop's rooms' figures, which the publisher sums; guarded by
	// tablesMu. Not the tables themselves: a node must not hold its server (nodes holds
	// the node until the server is collected).
	tables []*tableFigures

	published atomic.Pointer[directory.Status] // what was published last
	placement atomic.Pointer[directory.Placement]
	lastErr   atomic.Pointer[string] // the last directory error the node met, for the stats page
	opened    atomic.Int64           // handles opened (the first, and after each lapse)

	orphanMu sync.Mutex
	orphans  []orphan // guarded by orphanMu

	hoKey  []byte       // NodeConfig.HandoffKey; nil: no handoffs
	hoAddr string       // NodeConfig.HandoffAddr; immutable
	hoMax  int32        // NodeConfig.HandoffsAtOnce, 0 for no bound; immutable
	hoBusy atomic.Int32 // drain handoffs under way (handoffSlot)
	hos    handoffStats // handoff.go

	rkey []byte    // signs resume tokens: HandoffKey, or a random key of this process
	sts  seatStats // seats.go
}

// orphan is a claim whose room has ended but whose release failed (the directory was out
// of reach): if the lease revives (etcd restores leases when it comes back), the claim
// would list a room no node runs, so the lease task releases it after its next renewal.
type orphan struct {
	d    directory.Directory
	room string
	tok  directory.Token
}

// keepOrphan records a release to retry. Any goroutine.
func (n *node) keepOrphan(o orphan) {
	n.orphanMu.Lock()
	n.orphans = append(n.orphans, o)
	n.orphanMu.Unlock()
}

// releaseOrphans retries the failed releases of handle d (those of other handles went
// with their lease). The task's own.
func (n *node) releaseOrphans(t *loop.Task, d directory.Directory) {
	n.orphanMu.Lock()
	os := n.orphans
	n.orphans = nil
	n.orphanMu.Unlock()
	for _, o := range os {
		if o.d != d {
			continue
		}
		_, err := offload.Do(t, func(ctx context.Context) (struct{}, error) { return struct{}{}, o.d.Release(ctx, o.room, o.tok) })
		if retryRelease(err) {
			n.keepOrphan(o)
		}
	}
}

// retryRelease reports whether a release that failed with err should be tried again: the
// directory did not answer. A stale token, a lapsed lease or a closed handle mean the
// claim is gone already.
func retryRelease(err error) bool {
	return err != nil && !errors.Is(err, directory.ErrNotOwner) && !errors.Is(err, directory.ErrLeaseExpired) && !errors.Is(err, directory.ErrClosed)
}

// handle is one open directory handle (one lease).
type handle struct{ d directory.Directory }

// NodeConfig configures a node (UseDirectory).
type NodeConfig struct {
	// Directory is the node's handle configuration: ID, addresses, TTL, margin, request
	// timeout, placement. An empty PublicAddr is the server's listening address once it
	// listens; Loops 0 is the server's loops.
	Directory directory.Config
	// Seats signs the seat tokens Join hands out and checks them in Admit. Nil: Join hands
	// out none and Admit checks none (a cluster behind an authenticating proxy).
	Seats *directory.SeatSigner
	// PublishEvery is how often the node publishes its load; 0 means one second.
	PublishEvery time.Duration
	// HandoffKey is the key every node shares (at least 32 bytes) that authenticates the
	// room snapshots nodes send each other (an HMAC-SHA256 of each request's body). Nil:
	// the node neither hands rooms off nor accepts them (docs/handoff.md).
	HandoffKey []byte
	// HandoffAddr, when set (host:port; port 0 picks one), is where AcceptHandoffs serves
	// the handoff endpoint: a listener of its own (net/http), not the server's, published
	// as the node's InternalAddr (Directory.InternalAddr must then be empty). Processes
	// that share the server's port (SO_REUSEPORT: a new process taking over from the one
	// it replaces on one machine) need it: a handoff sent to the shared port could reach
	// the sender itself. It also keeps the endpoint off the public listener. Empty: the
	// endpoint is a route of the server.
	HandoffAddr string
	// HandoffsAtOnce bounds how many of the node's rooms its drain hands off at the same
	// time; the others go on ticking until one of those ends (or until the drain's
	// deadline is a second away). Fewer at once shortens each room's freeze on a busy
	// machine, since the snapshots, the directory's writes and the targets' restores do
	// not all compete at once. 0 means 8; negative means no bound.
	HandoffsAtOnce int
}

// nodes maps each server (weakly held) to its node.
var nodes sync.Map // weak.Pointer[loop.Server] -> *Node

// UseDirectory makes srv a node of the directory op opens: the node's handle is opened
// once the server listens (from loop 0, offloaded, retried until it opens), its lease is
// renewed from a background task of loop 0 every cfg.Directory.KeepAlivePeriod() while
// every loop of the server turns, its load is published every PublishEvery, every room
// made on srv claims its name under the lease (New), and a stats section "cluster"
// (/debug/baton/cluster, Snapshot.Sections["cluster"]) shows the node, its lease and the
// last placement. It returns an error naming an invalid field, or if srv has made rooms or
// has a node already. Call it before ListenAndServe, from one goroutine.
func UseDirectory(srv *loop.Server, op directory.Opener, cfg NodeConfig) error {
	if op == nil {
		return errors.New("room: UseDirectory: nil directory")
	}
	if cfg.Directory.Loops == 0 {
		cfg.Directory.Loops = len(srv.Loops())
	}
	if err := cfg.Directory.Validate(); err != nil {
		return fmt.Errorf("room: UseDirectory: NodeConfig.%w", err)
	}
	if cfg.PublishEvery < 0 {
		return fmt.Errorf("room: UseDirectory: NodeConfig.PublishEvery (%v) must not be negative", cfg.PublishEvery)
	}
	if cfg.PublishEvery == 0 {
		cfg.PublishEvery = time.Second
	}
	if cfg.HandoffAddr != "" && cfg.Directory.InternalAddr != "" {
		return fmt.Errorf("room: UseDirectory: NodeConfig.HandoffAddr (%s) and Directory.InternalAddr (%s) are both set: the node's internal address is its handoff listener's", cfg.HandoffAddr, cfg.Directory.InternalAddr)
	}
	if cfg.HandoffKey != nil && len(cfg.HandoffKey) < minHandoffKey {
		return fmt.Errorf("room: UseDirectory: NodeConfig.HandoffKey is %d bytes; it must be at least %d", len(cfg.HandoffKey), minHandoffKey)
	}
	n := &node{op: op, cfg: cfg.Directory.WithDefaults(), seats: cfg.Seats, every: cfg.PublishEvery,
		hoKey: append([]byte(nil), cfg.HandoffKey...), hoAddr: cfg.HandoffAddr, // nil without a key
		hoMax: int32(max(cfg.HandoffsAtOnce, 0))}
	if cfg.HandoffsAtOnce == 0 {
		n.hoMax = defaultHandoffsAtOnce
	}
	n.rkey = n.hoKey
	if n.rkey == nil {
		n.rkey = randomKey() // resume works on this node only
	}
	if _, loaded := nodes.LoadOrStore(serverKey(srv), n); loaded {
		return errors.New("room: UseDirectory: the server has a node already (UseDirectory called twice, or a room was made first)")
	}
	srv.OnStart(func(l *loop.Loop) error {
		if l.Index() == 0 {
			n.start(l)
		}
		return nil
	})
	return srv.AddStats(clusterSection)
}

// serverKey returns srv's key in nodes, arranging for the entry to go with srv.
func serverKey(srv *loop.Server) weak.Pointer[loop.Server] {
	k := weak.Make(srv)
	if _, ok := nodes.Load(k); !ok {
		runtime.AddCleanup(srv, func(k weak.Pointer[loop.Server]) { nodes.Delete(k) }, k)
	}
	return k
}

// localTTL is the lease of the default node: one process, so nobody can take its rooms;
// a lease that never lapses keeps a stalled loop's rooms ticking as they always did.
const localTTL = time.Duration(1 << 62)

// nodeOf returns srv's node, making the default one (in memory, its own) on first use.
func nodeOf(srv *loop.Server) *node {
	k := serverKey(srv)
	if v, ok := nodes.Load(k); ok {
		return v.(*node)
	}
	cfg := directory.Config{Node: "local", Loops: len(srv.Loops()), TTL: localTTL}.WithDefaults()
	n := &node{op: directory.NewEmbedded(), cfg: cfg, every: time.Second, local: true, rkey: randomKey()}
	d, err := n.op.Open(context.Background(), cfg)
	if err != nil { // an in-memory directory of our own: cannot happen
		panic("room: the default directory: " + err.Error())
	}
	n.dir.Store(&handle{d})
	v, _ := nodes.LoadOrStore(k, n)
	return v.(*node)
}

// tableFigures are a loop's rooms' figures for its node's publisher: kept by the loop's
// rooms, read from loop 0. Each loop's in its own table, so rooms on different loops never
// share a cache line.
type tableFigures struct {
	rooms, players atomic.Int64
	roomNanos      atomic.Int64 // loop time charged to the loop's rooms, in total
}

// addTable registers a loop's rooms' figures. Any goroutine.
func (n *node) addTable(f *tableFigures) {
	n.tablesMu.Lock()
	n.tables = append(n.tables, f)
	n.tablesMu.Unlock()
}

// counts sums the loops' rooms, players and loop time charged to rooms (ns). Any
// goroutine.
func (n *node) counts() (rooms, players, nanos int64) {
	n.tablesMu.Lock()
	defer n.tablesMu.Unlock()
	for _, f := range n.tables {
		rooms += f.rooms.Load()
		players += f.players.Load()
		nanos += f.roomNanos.Load()
	}
	return rooms, players, nanos
}

// handle returns the open handle, or nil.
func (n *node) handle() directory.Directory {
	if h := n.dir.Load(); h != nil {
		return h.d
	}
	return nil
}

// fail records err as the node's last directory error.
func (n *node) fail(op string, err error) {
	s := op + ": " + err.Error()
	n.lastErr.Store(&s)
}

// start starts the node's background tasks on loop l (loop 0). Loop-confined.
func (n *node) start(l *loop.Loop) {
	srv := l.Server()
	n.log = srv.Config().Logger
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.cfg.PublicAddr == "" && srv.Addr() != nil {
		n.cfg.PublicAddr = srv.Addr().String()
	}
	if n.cfg.InternalAddr == "" {
		n.cfg.InternalAddr = n.cfg.PublicAddr
	}
	period := n.cfg.KeepAlivePeriod()
	l.Go("room:directory-open", func(t *loop.Task) { n.open(t, -1) })
	l.Every("room:directory-lease", period, func(t *loop.Task) { n.renew(t, srv) })
	var last struct {
		at    time.Time
		nanos int64
	}
	last.at = time.Now()
	l.Every("room:directory-publish", n.every, func(t *loop.Task) {
		now := time.Now()
		_, _, nanos := n.counts()
		share := float64(nanos-last.nanos) / float64(now.Sub(last.at)) / float64(max(1, n.cfg.Loops))
		last.at, last.nanos = now, nanos
		n.publish(t, srv, share)
	})
	l.OnDrain(func(time.Time) {
		n.draining.Store(true)
		release := l.HoldDrain()
		l.Go("room:directory-drain", func(t *loop.Task) {
			defer release()
			n.publish(t, srv, -1)
			// The lease goes once the rooms have ended: revoking it earlier would free rooms
			// that still tick (their OnDrain saving the game).
			for rooms, _, _ := n.counts(); rooms > 0; rooms, _, _ = n.counts() {
				if t.Sleep(20*time.Millisecond) != nil {
					return
				}
			}
			if d := n.handle(); d != nil {
				n.dir.Store(nil)
				_, _ = offload.Do(t, func(ctx context.Context) (struct{}, error) { return struct{}{}, d.Close(ctx) })
			}
		})
	})
}

// open opens the node's handle, trying up to tries times (forever if negative) 250 ms
// apart, until it opens or the server stops. The task's own.
func (n *node) open(t *loop.Task, tries int) {
	for ; tries != 0 && n.handle() == nil && !n.draining.Load(); tries-- {
		d, err := offload.Do(t, func(ctx context.Context) (directory.Directory, error) { return n.op.Open(ctx, n.cfg) })
		if err == nil {
			n.dir.Store(&handle{d})
			n.opened.Add(1)
			n.log.Info("room: directory node open", "node", n.cfg.Node, "lease", d.Lease().ID, "ttl", d.Lease().TTL)
			return
		}
		n.fail("open", err)
		if t.Sleep(250*time.Millisecond) != nil {
			return
		}
	}
}

// renew is the lease task's tick: it renews the lease if every loop of the server turns
// (a loop that has not turned for longer than the margin would let its rooms tick past
// their lease), and opens a new handle once the lease is gone. The task's own.
func (n *node) renew(t *loop.Task, srv *loop.Server) {
	h := n.dir.Load()
	if h == nil {
		n.open(t, 1)
		return
	}
	d := h.d
	for _, l := range srv.Loops() {
		if v := l.Vitals(); v.Overdue > n.cfg.Margin {
			n.fail("keep-alive", fmt.Errorf("loop %d has not turned for %v: not renewing", l.Index(), v.Overdue))
			return
		}
	}
	_, err := offload.Do(t, func(ctx context.Context) (time.Time, error) { return d.KeepAlive(ctx) })
	switch {
	case err == nil:
		n.releaseOrphans(t, d)
	case errors.Is(err, directory.ErrLeaseExpired):
		// The node's rooms are gone from the directory; its rooms here stop at their next
		// tick (Valid is false for good). A new handle serves new rooms.
		n.fail("keep-alive", err)
		n.log.Warn("room: directory lease lapsed; opening a new one", "node", n.cfg.Node, "err", err)
		n.dir.CompareAndSwap(h, nil)
		_, _ = offload.Do(t, func(ctx context.Context) (struct{}, error) { return struct{}{}, d.Close(ctx) })
		n.open(t, 1)
	default:
		n.fail("keep-alive", err)
	}
}

// publish publishes the node's load: the loops' utilisation (or the rooms' share over the
// last period, if higher: the utilisation's window is ten seconds and lags a new hog),
// the rooms' share, rooms and players. A negative share keeps the last one. The task's
// own.
func (n *node) publish(t *loop.Task, srv *loop.Server, share float64) {
	d := n.handle()
	if d == nil {
		return
	}
	if share < 0 {
		if p := n.published.Load(); p != nil {
			share = p.Load.RoomShare
		} else {
			share = 0
		}
	}
	share = min(1, max(0, share))
	if math.IsNaN(share) {
		share = 0
	}
	util, loops := 0.0, srv.Loops()
	for _, l := range loops {
		if u := l.Vitals().Utilisation; u > 0 {
			util += u
		}
	}
	util /= float64(max(1, len(loops)))
	rooms, players, _ := n.counts()
	st := directory.Status{
		Draining: n.draining.Load() || loops[0].Phase() != "serving",
		Load: directory.Load{Utilisation: max(util, share), RoomShare: share,
			Rooms: int(rooms), Players: int(players)},
	}
	_, err := offload.Do(t, func(ctx context.Context) (struct{}, error) { return struct{}{}, d.Publish(ctx, st) })
	if err != nil {
		n.fail("publish", err)
		return
	}
	n.published.Store(&st)
}

// nodeFigures is the stats section "cluster": the node, its lease, what it published last
// and the last placement it made (Join). Plain data.
type nodeFigures struct {
	Node      string               `json:"node"`
	Addr      string               `json:"public_addr"`
	Open      bool                 `json:"open"`  // the node holds a lease
	Valid     bool                 `json:"valid"` // its rooms may tick (Directory.Valid)
	LeaseTTL  time.Duration        `json:"lease_ttl_ns"`
	Opened    int64                `json:"leases_opened"`
	Published *directory.Status    `json:"published,omitempty"`
	Placement *directory.Placement `json:"last_placement,omitempty"`
	LastError string               `json:"last_error,omitempty"`
	Handoffs  handoffFigures       `json:"handoffs"`
	Seats     seatFigures          `json:"seats"`
}

// figures returns the node's figures now. Any goroutine.
func (n *node) figures() nodeFigures {
	f := nodeFigures{Node: n.cfg.Node, Addr: n.cfg.PublicAddr, Opened: n.opened.Load(),
		Published: n.published.Load(), Placement: n.placement.Load()}
	if d := n.handle(); d != nil {
		f.Open, f.Valid, f.LeaseTTL = true, d.Valid(), d.Lease().TTL
	}
	if e := n.lastErr.Load(); e != nil {
		f.LastError = *e
	}
	f.Handoffs = n.hos.take() // its percentiles in the section's Read, off the loop
	f.Seats = n.sts.figures()
	return f
}

// clusterSection is the stats section UseDirectory adds: the node's figures (one node per
// process, so every loop's are the same and the first loop's are the totals).
var clusterSection = loop.StatsSection{
	Name: "cluster",
	Take: func(l *loop.Loop, _ url.Values) (any, error) {
		v, ok := nodes.Load(weak.Make(l.Server()))
		if !ok {
			return nodeFigures{}, nil
		}
		return v.(*node).figures(), nil
	},
	Read: func(v any) any {
		f := v.(nodeFigures)
		f.Handoffs = f.Handoffs.read()
		return f
	},
	Series: func(v any) map[string]float64 {
		h := v.(nodeFigures).Handoffs
		return map[string]float64{
			"handoffs_started_total": float64(h.Started), "handoffs_completed_total": float64(h.Completed),
			"handoffs_failed_total": float64(h.Failed), "handoffs_accepted_total": float64(h.Accepted),
			"handoff_gap_p99_ms": float64(h.GapP99) / 1e6,
		}
	},
}

// claim claims the room in the directory for the tick task bt, before the first tick: it
// waits up to the node's request timeout for the node's handle (a room made as the
// server starts), then claims (offloaded). On failure the room stops, with the error as
// its cause, and Claimed returns it. The tick task's own.
func (c *core) claim(bt *loop.Task) bool {
	n := c.tbl.node
	d := n.handle()
	for wait := n.cfg.RequestTimeout; d == nil && wait > 0 && bt.Err() == nil; wait -= 50 * time.Millisecond {
		_ = bt.Sleep(50 * time.Millisecond)
		d = n.handle()
	}
	var cl directory.Claim
	var err error
	switch {
	case bt.Err() != nil:
		err = ErrRoomStopped
	case d == nil:
		why := "not opened yet"
		if e := n.lastErr.Load(); e != nil {
			why = *e
		}
		err = fmt.Errorf("room: claim of %q: %w: node %q holds no lease (%s)", c.name, directory.ErrUnavailable, n.cfg.Node, why)
	default:
		cl, err = offload.Do(bt, func(ctx context.Context) (directory.Claim, error) { return d.Claim(ctx, c.name) })
		if err != nil && bt.Err() != nil && !errors.Is(err, directory.ErrAlreadyOwned) {
			// Stopped while claiming: the claim may have been made. Give it back if so.
			c.tbl.l.Go("room:unclaim", func(t *loop.Task) {
				_, _ = offload.Do(t, func(ctx context.Context) (struct{}, error) {
					if cl, err := d.Lookup(ctx, c.name); err == nil && cl.Node == n.cfg.Node {
						return struct{}{}, d.Release(ctx, c.name, cl.Token)
					}
					return struct{}{}, nil
				})
			})
		}
	}
	if err != nil {
		if !errors.Is(err, ErrRoomStopped) {
			n.fail("claim", err)
		}
		c.claimed.Resolve(0, err)
		c.stopWith(err)
		return false
	}
	c.dir = d
	c.token.Store(int64(cl.Token))
	c.claimed.Resolve(cl.Token, nil)
	return true
}

// owned reports whether the room may tick: its node's lease, by the local monotonic
// clock, is valid with its margin. The first false is final: a lease renewed after its
// local deadline (it can revive: the backend may not have freed it yet) does not give a
// room back its ticks, since another node may have claimed it meanwhile. Loop-confined.
func (c *core) owned() bool {
	if !c.lapsed && !c.dir.Valid() {
		c.lapsed = true
	}
	return !c.lapsed
}

// lapse stops the room whose ownership lapsed: it is logged, OnMoved tells the members,
// and the room's tasks are cancelled with ErrMoved. The tick task's own.
func (c *core) lapse(bt *loop.Task) {
	c.tbl.logger.Warn("room: ownership lapsed; the room stops (its members are told it moved)",
		"room", c.name, "node", c.tbl.node.cfg.Node, "token", c.token.Load())
	if c.onMoved != nil && bt.Contain(c.onMoved) {
		c.rec.Panicked()
	}
	c.stopWith(ErrMoved)
}

// unclaim gives the room's claim back once the room has ended, if it still holds it: in
// place on the default node, else from a task (offloaded). After a lapse too: the lease
// may have revived (the local check lapses a margin before the backend's deadline), and a
// claim left behind would list a room that no node runs. Loop-confined.
func (c *core) unclaim() {
	tok := directory.Token(c.token.Load())
	n := c.tbl.node
	if tok == 0 || c.ho.movedOut {
		return
	}
	if n.local {
		if d := n.handle(); d != nil {
			_ = d.Release(context.Background(), c.name, tok)
		}
		return
	}
	d, name := c.dir, c.name
	if d == nil {
		return
	}
	c.tbl.l.Go("room:release", func(t *loop.Task) {
		_, err := offload.Do(t, func(ctx context.Context) (struct{}, error) { return struct{}{}, d.Release(ctx, name, tok) })
		if retryRelease(err) {
			n.keepOrphan(orphan{d, name, tok})
		}
	})
}

// charge charges d of loop time to the room at clock reading now, and to the node's
// figures.
func (c *core) charge(now int64, d time.Duration) {
	c.rec.LoopTime(now, d)
	c.tbl.figs.roomNanos.Add(int64(d))
}
