package directory

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/internal/leaseclock"
)

// Embedded is the in-memory directory backend: one process, no set-up, the default. Its
// leases, node records and claims behave as the etcd backend's do (a lease lapses TTL after
// its last renewal and takes the node's rooms and record with it; tokens are revisions of
// one counter), so code written against it runs unchanged on etcd. Lapsed leases are swept
// by the next call, so it starts no goroutine. Safe for concurrent use; its handles'
// round trips are a mutex, never a network.
type Embedded struct {
	mu        sync.Mutex
	rev       int64 // the last revision handed out; guarded by mu
	lastLease int64 // guarded by mu
	leases    map[int64]*memLease
	nodes     map[string]memNode
	rooms     map[string]memRoom
}

type memLease struct {
	node   string
	ttl    time.Duration
	expiry time.Time // monotonic; the lease lapses once now is after it
	rooms  map[string]struct{}
}

type memNode struct {
	info  NodeInfo
	lease int64
}

type memRoom struct {
	claim Claim
	lease int64
}

// NewEmbedded returns an empty in-memory directory. Any goroutine.
func NewEmbedded() *Embedded {
	return &Embedded{
		leases: map[int64]*memLease{},
		nodes:  map[string]memNode{},
		rooms:  map[string]memRoom{},
	}
}

// Open opens a node's handle (Opener.Open): it grants the node a lease of Config.TTL and
// publishes its first record. Any goroutine.
func (e *Embedded) Open(ctx context.Context, cfg Config) (Directory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if err := ctx.Err(); err != nil {
		return nil, Unavailable("open", err)
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sweepLocked(now)
	if n, ok := e.nodes[cfg.Node]; ok {
		return nil, fmt.Errorf("%w: node %q (lease %d)", ErrNodeInUse, cfg.Node, n.lease)
	}
	e.lastLease++
	id := e.lastLease
	e.leases[id] = &memLease{node: cfg.Node, ttl: cfg.TTL, expiry: now.Add(cfg.TTL), rooms: map[string]struct{}{}}
	e.rev++
	e.nodes[cfg.Node] = memNode{info: cfg.record(Status{}), lease: id}
	return &embeddedNode{e: e, cfg: cfg, lease: id, clock: leaseclock.New(id, now, cfg.TTL, cfg.Margin)}, nil
}

// sweepLocked drops the leases that lapsed by now, with their rooms and node records.
func (e *Embedded) sweepLocked(now time.Time) {
	for id, l := range e.leases {
		if now.After(l.expiry) {
			e.revokeLocked(id)
		}
	}
}

func (e *Embedded) revokeLocked(id int64) {
	l, ok := e.leases[id]
	if !ok {
		return
	}
	for room := range l.rooms {
		delete(e.rooms, room)
	}
	if n, ok := e.nodes[l.node]; ok && n.lease == id {
		delete(e.nodes, l.node)
	}
	delete(e.leases, id)
	e.rev++
}

// embeddedNode is a node's handle on an Embedded directory. Safe for concurrent use.
type embeddedNode struct {
	e      *Embedded
	cfg    Config // immutable
	lease  int64  // immutable
	clock  *leaseclock.Clock
	closed atomic.Bool
}

func (n *embeddedNode) Node() string { return n.cfg.Node }
func (n *embeddedNode) Lease() Lease { return Lease(n.clock.Lease()) }
func (n *embeddedNode) Valid() bool  { return n.clock.Valid() }

// begin checks the handle and the context, takes the directory's lock and sweeps lapsed
// leases. With live set, it also checks that this node's lease is alive.
func (n *embeddedNode) begin(ctx context.Context, op string, live bool) (*memLease, error) {
	if n.closed.Load() {
		return nil, fmt.Errorf("directory: %s: %w", op, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, Unavailable(op, err)
	}
	n.e.mu.Lock()
	n.e.sweepLocked(time.Now())
	if !live {
		return nil, nil
	}
	l, ok := n.e.leases[n.lease]
	if !ok {
		n.e.mu.Unlock()
		n.clock.Expire()
		return nil, fmt.Errorf("directory: %s: %w: node %q, lease %d", op, ErrLeaseExpired, n.cfg.Node, n.lease)
	}
	return l, nil
}

func (n *embeddedNode) KeepAlive(ctx context.Context) (time.Time, error) {
	sent := time.Now()
	l, err := n.begin(ctx, "keep-alive", true)
	if err != nil {
		return n.clock.Deadline(), err
	}
	l.expiry = time.Now().Add(l.ttl)
	n.e.mu.Unlock()
	return n.clock.Renewed(sent, l.ttl), nil
}

func (n *embeddedNode) Publish(ctx context.Context, st Status) error {
	if err := st.Validate(); err != nil {
		return err
	}
	if _, err := n.begin(ctx, "publish", true); err != nil {
		return err
	}
	defer n.e.mu.Unlock()
	n.e.rev++
	n.e.nodes[n.cfg.Node] = memNode{info: n.cfg.record(st), lease: n.lease}
	return nil
}

func (n *embeddedNode) Claim(ctx context.Context, room string) (Claim, error) {
	if err := CheckRoom(room); err != nil {
		return Claim{}, fmt.Errorf("directory: claim: %w: room: %w", ErrInvalid, err)
	}
	l, err := n.begin(ctx, "claim", true)
	if err != nil {
		return Claim{}, err
	}
	defer n.e.mu.Unlock()
	if r, ok := n.e.rooms[room]; ok {
		return Claim{}, &OwnedError{Owner: r.claim}
	}
	n.e.rev++
	c := Claim{Room: room, Node: n.cfg.Node, Token: Token(n.e.rev), PublicAddr: n.cfg.PublicAddr, InternalAddr: n.cfg.InternalAddr}
	n.e.rooms[room] = memRoom{claim: c, lease: n.lease}
	l.rooms[room] = struct{}{}
	return c, nil
}

func (n *embeddedNode) Release(ctx context.Context, room string, token Token) error {
	if err := CheckRoom(room); err != nil {
		return fmt.Errorf("directory: release: %w: room: %w", ErrInvalid, err)
	}
	if _, err := n.begin(ctx, "release", false); err != nil {
		return err
	}
	defer n.e.mu.Unlock()
	r, ok := n.e.rooms[room]
	if !ok || r.claim.Token != token {
		return &NotOwnerError{Room: room, Token: token, Owner: r.claim}
	}
	delete(n.e.rooms, room)
	if l, ok := n.e.leases[r.lease]; ok {
		delete(l.rooms, room)
	}
	n.e.rev++
	return nil
}

func (n *embeddedNode) Lookup(ctx context.Context, room string) (Claim, error) {
	if err := CheckRoom(room); err != nil {
		return Claim{}, fmt.Errorf("directory: lookup: %w: room: %w", ErrInvalid, err)
	}
	if _, err := n.begin(ctx, "lookup", false); err != nil {
		return Claim{}, err
	}
	defer n.e.mu.Unlock()
	r, ok := n.e.rooms[room]
	if !ok {
		return Claim{}, fmt.Errorf("%w: %q", ErrNotClaimed, room)
	}
	return r.claim, nil
}

func (n *embeddedNode) Move(ctx context.Context, room string, token Token, to string) (Claim, error) {
	if err := CheckRoom(room); err != nil {
		return Claim{}, fmt.Errorf("directory: move: %w: room: %w", ErrInvalid, err)
	}
	if err := CheckNode(to); err != nil {
		return Claim{}, fmt.Errorf("directory: move: %w: target node: %w", ErrInvalid, err)
	}
	if _, err := n.begin(ctx, "move", false); err != nil {
		return Claim{}, err
	}
	defer n.e.mu.Unlock()
	r, ok := n.e.rooms[room]
	if !ok || r.claim.Token != token {
		return Claim{}, &NotOwnerError{Room: room, Token: token, Owner: r.claim}
	}
	target, ok := n.e.nodes[to]
	if !ok {
		return Claim{}, fmt.Errorf("directory: move %q: %w: %q", room, ErrUnknownNode, to)
	}
	if l, ok := n.e.leases[r.lease]; ok {
		delete(l.rooms, room)
	}
	n.e.leases[target.lease].rooms[room] = struct{}{}
	n.e.rev++
	c := Claim{Room: room, Node: to, Token: Token(n.e.rev), PublicAddr: target.info.PublicAddr, InternalAddr: target.info.InternalAddr}
	n.e.rooms[room] = memRoom{claim: c, lease: target.lease}
	return c, nil
}

func (n *embeddedNode) Rooms(ctx context.Context, node string) ([]Claim, error) {
	if err := CheckNode(node); err != nil {
		return nil, fmt.Errorf("directory: rooms: %w: node: %w", ErrInvalid, err)
	}
	if _, err := n.begin(ctx, "rooms", false); err != nil {
		return nil, err
	}
	defer n.e.mu.Unlock()
	var out []Claim
	for _, r := range n.e.rooms {
		if r.claim.Node == node {
			out = append(out, r.claim)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Room < out[j].Room })
	return out, nil
}

func (n *embeddedNode) Nodes(ctx context.Context) ([]NodeInfo, error) {
	if _, err := n.begin(ctx, "nodes", false); err != nil {
		return nil, err
	}
	defer n.e.mu.Unlock()
	return n.e.nodesLocked(), nil
}

func (e *Embedded) nodesLocked() []NodeInfo {
	out := make([]NodeInfo, 0, len(e.nodes))
	for _, nd := range e.nodes {
		out = append(out, nd.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (n *embeddedNode) Place(ctx context.Context) (Placement, error) {
	if _, err := n.begin(ctx, "place", false); err != nil {
		return Placement{}, err
	}
	nodes := n.e.nodesLocked()
	claimed := make(map[string]int, len(nodes))
	for _, r := range n.e.rooms {
		claimed[r.claim.Node]++
	}
	n.e.mu.Unlock()
	return Choose(nodes, claimed, n.cfg.Placement)
}

func (n *embeddedNode) Close(ctx context.Context) error {
	if n.closed.Swap(true) {
		return nil
	}
	n.clock.Expire()
	n.e.mu.Lock()
	defer n.e.mu.Unlock()
	n.e.revokeLocked(n.lease)
	return nil
}
