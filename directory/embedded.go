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
// round trips are a mutex, never a network. NewShared makes one whose state is a file that
// the processes of one machine share.
type Embedded struct {
	mu   sync.Mutex
	st   memState    // guarded by mu; for a shared one, read from its file by each call
	file *sharedFile // nil: in memory only; immutable
	base time.Time   // the in-memory clock's origin; immutable
}

// memState is the directory's whole state: what a shared directory keeps in its file.
type memState struct {
	Rev       int64               `json:"rev"` // the last revision handed out
	LastLease int64               `json:"last_lease"`
	Leases    map[int64]*memLease `json:"leases"`
	Nodes     map[string]memNode  `json:"nodes"`
	Rooms     map[string]memRoom  `json:"rooms"`
}

type memLease struct {
	Node   string              `json:"node"`
	TTL    time.Duration       `json:"ttl"`
	Expiry int64               `json:"expiry"` // by the directory's clock (now); the lease lapses once now is after it
	Rooms  map[string]struct{} `json:"rooms"`
}

type memNode struct {
	Info  NodeInfo `json:"info"`
	Lease int64    `json:"lease"`
}

type memRoom struct {
	Claim Claim `json:"claim"`
	Lease int64 `json:"lease"`
}

func newState() memState {
	return memState{Leases: map[int64]*memLease{}, Nodes: map[string]memNode{}, Rooms: map[string]memRoom{}}
}

// NewEmbedded returns an empty in-memory directory. Any goroutine.
func NewEmbedded() *Embedded {
	return &Embedded{st: newState(), base: time.Now()}
}

// now reads the directory's clock, in nanoseconds: the process's monotonic clock in
// memory, the machine's (CLOCK_MONOTONIC, which every process reads alike) for a shared
// directory.
func (e *Embedded) now() int64 {
	if e.file != nil {
		return machineClock()
	}
	return int64(time.Since(e.base))
}

// tx runs fn on the state under the directory's lock, after sweeping lapsed leases: for a
// shared directory, under the file's lock, on the state read from the file, written back
// if fn changed it and returned nil. A file that cannot be read or written is the backend
// not answering (ErrUnavailable).
func (e *Embedded) tx(op string, fn func(st *memState) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var loaded []byte
	if e.file != nil {
		unlock, err := e.file.lock()
		if err != nil {
			return Unavailable(op, err)
		}
		defer unlock()
		if loaded, err = e.file.read(&e.st); err != nil {
			return Unavailable(op, err)
		}
	}
	e.sweepLocked(e.now())
	if err := fn(&e.st); err != nil {
		if e.file != nil {
			_ = e.file.write(&e.st, loaded) // the sweep's changes
		}
		return err
	}
	if e.file != nil {
		if err := e.file.write(&e.st, loaded); err != nil {
			return Unavailable(op, err)
		}
	}
	return nil
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
	var id int64
	now := time.Now()
	err := e.tx("open", func(st *memState) error {
		if n, ok := st.Nodes[cfg.Node]; ok {
			return fmt.Errorf("%w: node %q (lease %d)", ErrNodeInUse, cfg.Node, n.Lease)
		}
		st.LastLease++
		id = st.LastLease
		st.Leases[id] = &memLease{Node: cfg.Node, TTL: cfg.TTL, Expiry: e.now() + int64(cfg.TTL), Rooms: map[string]struct{}{}}
		st.Rev++
		st.Nodes[cfg.Node] = memNode{Info: cfg.record(Status{}), Lease: id}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &embeddedNode{e: e, cfg: cfg, lease: id, clock: leaseclock.New(id, now, cfg.TTL, cfg.Margin)}, nil
}

// sweepLocked drops the leases that lapsed by now, with their rooms and node records. A
// lease whose expiry is further than its TTL ahead was written before the clock restarted
// (a shared directory's file from before a reboot): lapsed too.
func (e *Embedded) sweepLocked(now int64) {
	for id, l := range e.st.Leases {
		if now > l.Expiry || l.Expiry-now > int64(l.TTL) {
			e.st.revoke(id)
		}
	}
}

func (st *memState) revoke(id int64) {
	l, ok := st.Leases[id]
	if !ok {
		return
	}
	for room := range l.Rooms {
		delete(st.Rooms, room)
	}
	if n, ok := st.Nodes[l.Node]; ok && n.Lease == id {
		delete(st.Nodes, l.Node)
	}
	delete(st.Leases, id)
	st.Rev++
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

// do checks the handle and the context and runs fn in a transaction. With live set, fn
// gets this node's lease, which must be alive.
func (n *embeddedNode) do(ctx context.Context, op string, live bool, fn func(st *memState, l *memLease) error) error {
	if n.closed.Load() {
		return fmt.Errorf("directory: %s: %w", op, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return Unavailable(op, err)
	}
	expired := false
	err := n.e.tx(op, func(st *memState) error {
		var l *memLease
		if live {
			var ok bool
			if l, ok = st.Leases[n.lease]; !ok {
				expired = true
				return fmt.Errorf("directory: %s: %w: node %q, lease %d", op, ErrLeaseExpired, n.cfg.Node, n.lease)
			}
		}
		return fn(st, l)
	})
	if expired {
		n.clock.Expire()
	}
	return err
}

func (n *embeddedNode) KeepAlive(ctx context.Context) (time.Time, error) {
	sent := time.Now()
	var ttl time.Duration
	err := n.do(ctx, "keep-alive", true, func(_ *memState, l *memLease) error {
		l.Expiry, ttl = n.e.now()+int64(l.TTL), l.TTL
		return nil
	})
	if err != nil {
		return n.clock.Deadline(), err
	}
	return n.clock.Renewed(sent, ttl), nil
}

func (n *embeddedNode) Publish(ctx context.Context, st Status) error {
	if err := st.Validate(); err != nil {
		return err
	}
	return n.do(ctx, "publish", true, func(s *memState, _ *memLease) error {
		s.Rev++
		s.Nodes[n.cfg.Node] = memNode{Info: n.cfg.record(st), Lease: n.lease}
		return nil
	})
}

func (n *embeddedNode) Claim(ctx context.Context, room string) (Claim, error) {
	if err := CheckRoom(room); err != nil {
		return Claim{}, fmt.Errorf("directory: claim: %w: room: %w", ErrInvalid, err)
	}
	var c Claim
	err := n.do(ctx, "claim", true, func(st *memState, l *memLease) error {
		if r, ok := st.Rooms[room]; ok {
			return &OwnedError{Owner: r.Claim}
		}
		st.Rev++
		c = Claim{Room: room, Node: n.cfg.Node, Token: Token(st.Rev), PublicAddr: n.cfg.PublicAddr, InternalAddr: n.cfg.InternalAddr}
		st.Rooms[room] = memRoom{Claim: c, Lease: n.lease}
		l.Rooms[room] = struct{}{}
		return nil
	})
	return c, err
}

func (n *embeddedNode) Release(ctx context.Context, room string, token Token) error {
	if err := CheckRoom(room); err != nil {
		return fmt.Errorf("directory: release: %w: room: %w", ErrInvalid, err)
	}
	return n.do(ctx, "release", false, func(st *memState, _ *memLease) error {
		r, ok := st.Rooms[room]
		if !ok || r.Claim.Token != token {
			return &NotOwnerError{Room: room, Token: token, Owner: r.Claim}
		}
		delete(st.Rooms, room)
		if l, ok := st.Leases[r.Lease]; ok {
			delete(l.Rooms, room)
		}
		st.Rev++
		return nil
	})
}

func (n *embeddedNode) Lookup(ctx context.Context, room string) (Claim, error) {
	if err := CheckRoom(room); err != nil {
		return Claim{}, fmt.Errorf("directory: lookup: %w: room: %w", ErrInvalid, err)
	}
	var c Claim
	err := n.do(ctx, "lookup", false, func(st *memState, _ *memLease) error {
		r, ok := st.Rooms[room]
		if !ok {
			return fmt.Errorf("%w: %q", ErrNotClaimed, room)
		}
		c = r.Claim
		return nil
	})
	return c, err
}

func (n *embeddedNode) Move(ctx context.Context, room string, token Token, to string) (Claim, error) {
	if err := CheckRoom(room); err != nil {
		return Claim{}, fmt.Errorf("directory: move: %w: room: %w", ErrInvalid, err)
	}
	if err := CheckNode(to); err != nil {
		return Claim{}, fmt.Errorf("directory: move: %w: target node: %w", ErrInvalid, err)
	}
	var c Claim
	err := n.do(ctx, "move", false, func(st *memState, _ *memLease) error {
		r, ok := st.Rooms[room]
		if !ok || r.Claim.Token != token {
			return &NotOwnerError{Room: room, Token: token, Owner: r.Claim}
		}
		target, ok := st.Nodes[to]
		if !ok {
			return fmt.Errorf("directory: move %q: %w: %q", room, ErrUnknownNode, to)
		}
		if l, ok := st.Leases[r.Lease]; ok {
			delete(l.Rooms, room)
		}
		st.Leases[target.Lease].Rooms[room] = struct{}{}
		st.Rev++
		c = Claim{Room: room, Node: to, Token: Token(st.Rev), PublicAddr: target.Info.PublicAddr, InternalAddr: target.Info.InternalAddr}
		st.Rooms[room] = memRoom{Claim: c, Lease: target.Lease}
		return nil
	})
	return c, err
}

func (n *embeddedNode) Rooms(ctx context.Context, node string) ([]Claim, error) {
	if err := CheckNode(node); err != nil {
		return nil, fmt.Errorf("directory: rooms: %w: node: %w", ErrInvalid, err)
	}
	var out []Claim
	err := n.do(ctx, "rooms", false, func(st *memState, _ *memLease) error {
		for _, r := range st.Rooms {
			if r.Claim.Node == node {
				out = append(out, r.Claim)
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Room < out[j].Room })
	return out, err
}

func (n *embeddedNode) Nodes(ctx context.Context) ([]NodeInfo, error) {
	var out []NodeInfo
	err := n.do(ctx, "nodes", false, func(st *memState, _ *memLease) error {
		out = st.nodes()
		return nil
	})
	return out, err
}

func (st *memState) nodes() []NodeInfo {
	out := make([]NodeInfo, 0, len(st.Nodes))
	for _, nd := range st.Nodes {
		out = append(out, nd.Info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (n *embeddedNode) Place(ctx context.Context) (Placement, error) {
	var nodes []NodeInfo
	var claimed map[string]int
	err := n.do(ctx, "place", false, func(st *memState, _ *memLease) error {
		nodes = st.nodes()
		claimed = make(map[string]int, len(nodes))
		for _, r := range st.Rooms {
			claimed[r.Claim.Node]++
		}
		return nil
	})
	if err != nil {
		return Placement{}, err
	}
	return Choose(nodes, claimed, n.cfg.Placement)
}

func (n *embeddedNode) Close(ctx context.Context) error {
	if n.closed.Swap(true) {
		return nil
	}
	n.clock.Expire()
	return n.e.tx("close", func(st *memState) error {
		st.revoke(n.lease)
		return nil
	})
}
