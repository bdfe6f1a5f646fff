// Package etcd is the room directory's etcd backend: directory.Directory on etcd v3
// through go.etcd.io/etcd/client/v3. It is a module of its own so that importers of
// baton's loop never get gRPC and the etcd client in their module graph.
//
// Each node holds one etcd lease. Under a prefix (DefaultPrefix unless given):
//
//	<prefix>nodes/<node>          the node's record (JSON), under its lease
//	<prefix>rooms/<room>          the room's claim (JSON: owner and its addresses), under the owner's lease
//	<prefix>owned/<node>/<room>   the same claim, indexed by owner, under the same lease
//
// A claim is written by a transaction that requires the room key's create revision to be
// 0 (no live claim) and the node's record to be under the node's lease; the revision of
// that transaction is the room's fencing token (the room key's mod revision). Release and
// Move compare the room key's mod revision with the token. When a lease lapses, etcd
// deletes the node's record and all its claims in one revision. docs/cluster.md describes
// the design.
package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/internal/leaseclock"
)

// DefaultPrefix is the key prefix New uses when given none.
const DefaultPrefix = "/baton/directory/"

// maxTxnOps is etcd's default limit of operations in one transaction (--max-txn-ops).
const maxTxnOps = 128

// Backend opens node handles on an etcd cluster (directory.Opener). Safe for concurrent
// use.
type Backend struct {
	cli    *clientv3.Client
	prefix string
}

// MaxReconnectDelay caps Connect's reconnection backoff: gRPC's default grows to two
// minutes, and a node whose client waits that long after etcd came back keeps its rooms
// refused (and its lease unrenewed) for as long.
const MaxReconnectDelay = 250 * time.Millisecond

// Connect returns an etcd client of endpoints for a node: reconnection attempts at most
// MaxReconnectDelay apart, a dial timeout of 2 s, and no client log (the directory reports
// what matters: ErrUnavailable). For TLS or auth, build the client yourself with
// clientv3.New and the same DialOptions. Any goroutine.
func Connect(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: MaxReconnectDelay},
			MinConnectTimeout: time.Second,
		})},
		Logger: zap.NewNop(),
	})
}

// New returns a backend keeping its keys under prefix ("" means DefaultPrefix; a prefix
// not ending in '/' gets one) through cli, which the caller configures (endpoints, TLS,
// auth) and closes after closing the handles. Any goroutine.
func New(cli *clientv3.Client, prefix string) *Backend {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Backend{cli: cli, prefix: prefix}
}

func (b *Backend) nodeKey(id string) string          { return b.prefix + "nodes/" + id }
func (b *Backend) roomKey(room string) string        { return b.prefix + "rooms/" + room }
func (b *Backend) ownedPrefix(node string) string    { return b.prefix + "owned/" + node + "/" }
func (b *Backend) ownedKey(node, room string) string { return b.ownedPrefix(node) + room }

// nodeWire is a node record's JSON form.
type nodeWire struct {
	ID          string  `json:"id"`
	Public      string  `json:"public,omitempty"`
	Internal    string  `json:"internal,omitempty"`
	Loops       int     `json:"loops"`
	Draining    bool    `json:"draining,omitempty"`
	Utilisation float64 `json:"utilisation"`
	RoomShare   float64 `json:"roomShare"`
	Rooms       int     `json:"rooms"`
	Players     int     `json:"players"`
}

// claimWire is a claim's JSON form (the room's name and token are its key and revision).
type claimWire struct {
	Node     string `json:"node"`
	Public   string `json:"public,omitempty"`
	Internal string `json:"internal,omitempty"`
}

func encodeNode(n directory.NodeInfo) string {
	b, err := json.Marshal(nodeWire{ID: n.ID, Public: n.PublicAddr, Internal: n.InternalAddr, Loops: n.Loops, Draining: n.Draining,
		Utilisation: n.Load.Utilisation, RoomShare: n.Load.RoomShare, Rooms: n.Load.Rooms, Players: n.Load.Players})
	if err != nil {
		panic(err) // unreachable: Status.Validate refuses NaN and infinities
	}
	return string(b)
}

func decodeNode(key string, v []byte) (directory.NodeInfo, error) {
	var w nodeWire
	if err := json.Unmarshal(v, &w); err != nil {
		return directory.NodeInfo{}, fmt.Errorf("directory/etcd: bad node record at key %q: %w", key, err)
	}
	return directory.NodeInfo{ID: w.ID, PublicAddr: w.Public, InternalAddr: w.Internal, Loops: w.Loops,
		Status: directory.Status{Draining: w.Draining, Load: directory.Load{Utilisation: w.Utilisation, RoomShare: w.RoomShare, Rooms: w.Rooms, Players: w.Players}}}, nil
}

func encodeClaim(node, public, internal string) string {
	b, _ := json.Marshal(claimWire{Node: node, Public: public, Internal: internal})
	return string(b)
}

func decodeClaim(room string, key []byte, v []byte, rev int64) (directory.Claim, error) {
	var w claimWire
	if err := json.Unmarshal(v, &w); err != nil {
		return directory.Claim{}, fmt.Errorf("directory/etcd: bad claim at key %q: %w", key, err)
	}
	return directory.Claim{Room: room, Node: w.Node, Token: directory.Token(rev), PublicAddr: w.Public, InternalAddr: w.Internal}, nil
}

// Open grants the node a lease of cfg.TTL (rounded up to whole seconds; etcd may grant
// more, Lease().TTL says) and creates its record under it, unless a live node of that ID
// exists (directory.ErrNodeInUse). Any goroutine; blocks.
func (b *Backend) Open(ctx context.Context, cfg directory.Config) (directory.Directory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	n := &node{b: b, cfg: cfg, key: b.nodeKey(cfg.Node)}
	rctx, cancel := n.bound(ctx)
	defer cancel()
	sent := time.Now()
	g, err := b.cli.Grant(rctx, int64((cfg.TTL+time.Second-1)/time.Second))
	if err != nil {
		return nil, directory.Unavailable("open: grant lease", err)
	}
	n.lease = g.ID
	resp, err := b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(n.key), "=", 0)).
		Then(clientv3.OpPut(n.key, encodeNode(recordOf(cfg, directory.Status{})), clientv3.WithLease(g.ID))).
		Else(clientv3.OpGet(n.key)).
		Commit()
	if err == nil && resp.Succeeded {
		n.clock = leaseclock.New(int64(g.ID), sent, time.Duration(g.TTL)*time.Second, cfg.Margin)
		return n, nil
	}
	// Give the lease back; it would lapse anyway.
	rc, rcancel := n.bound(context.WithoutCancel(ctx))
	_, _ = b.cli.Revoke(rc, g.ID)
	rcancel()
	if err != nil {
		return nil, directory.Unavailable("open: create node record", err)
	}
	other := clientv3.LeaseID(0)
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		other = clientv3.LeaseID(kvs[0].Lease)
	}
	return nil, fmt.Errorf("%w: node %q (lease %x)", directory.ErrNodeInUse, cfg.Node, other)
}

// node is a node's handle on the etcd directory. Safe for concurrent use.
type node struct {
	b      *Backend
	cfg    directory.Config // immutable
	key    string           // the node record's key
	lease  clientv3.LeaseID // immutable after Open
	clock  *leaseclock.Clock
	closed atomic.Bool
}

// bound returns ctx bounded by the request timeout.
func (n *node) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, n.cfg.RequestTimeout)
}

// begin checks that the handle is open and bounds ctx.
func (n *node) begin(ctx context.Context, op string) (context.Context, context.CancelFunc, error) {
	if n.closed.Load() {
		return nil, nil, fmt.Errorf("directory/etcd: %s: %w", op, directory.ErrClosed)
	}
	rctx, cancel := n.bound(ctx)
	return rctx, cancel, nil
}

// fail maps an etcd client error: a missing lease is ErrLeaseExpired (and the handle's
// clock expires), anything else that kept etcd from answering is ErrUnavailable.
func (n *node) fail(op string, err error) error {
	if isLeaseNotFound(err) {
		return n.expired(op)
	}
	return directory.Unavailable(op, err)
}

func (n *node) expired(op string) error {
	n.clock.Expire()
	return fmt.Errorf("directory/etcd: %s: %w: node %q, lease %x", op, directory.ErrLeaseExpired, n.cfg.Node, int64(n.lease))
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || (err != nil && strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error()))
}

func (n *node) Node() string           { return n.cfg.Node }
func (n *node) Lease() directory.Lease { return directory.Lease(n.clock.Lease()) }
func (n *node) Valid() bool            { return n.clock.Valid() }
func (n *node) alive() clientv3.Cmp {
	return clientv3.Compare(clientv3.LeaseValue(n.key), "=", n.lease)
}
func (n *node) claimValue() string {
	return encodeClaim(n.cfg.Node, n.cfg.PublicAddr, n.cfg.InternalAddr)
}

func (n *node) KeepAlive(ctx context.Context) (time.Time, error) {
	rctx, cancel, err := n.begin(ctx, "keep-alive")
	if err != nil {
		return n.clock.Deadline(), err
	}
	defer cancel()
	sent := time.Now()
	resp, err := n.b.cli.KeepAliveOnce(rctx, n.lease)
	if err != nil {
		return n.clock.Deadline(), n.fail("keep-alive", err)
	}
	if resp.TTL <= 0 {
		return n.clock.Deadline(), n.expired("keep-alive")
	}
	return n.clock.Renewed(sent, time.Duration(resp.TTL)*time.Second), nil
}

func (n *node) Publish(ctx context.Context, st directory.Status) error {
	if err := st.Validate(); err != nil {
		return err
	}
	rctx, cancel, err := n.begin(ctx, "publish")
	if err != nil {
		return err
	}
	defer cancel()
	resp, err := n.b.cli.Txn(rctx).If(n.alive()).
		Then(clientv3.OpPut(n.key, encodeNode(recordOf(n.cfg, st)), clientv3.WithLease(n.lease))).
		Commit()
	if err != nil {
		return n.fail("publish", err)
	}
	if !resp.Succeeded {
		return n.expired("publish")
	}
	return nil
}

func (n *node) Claim(ctx context.Context, room string) (directory.Claim, error) {
	if err := directory.CheckRoom(room); err != nil {
		return directory.Claim{}, fmt.Errorf("directory/etcd: claim: %w: room: %w", directory.ErrInvalid, err)
	}
	rctx, cancel, err := n.begin(ctx, "claim")
	if err != nil {
		return directory.Claim{}, err
	}
	defer cancel()
	rk := n.b.roomKey(room)
	val := n.claimValue()
	resp, err := n.b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(rk), "=", 0), n.alive()).
		Then(clientv3.OpPut(rk, val, clientv3.WithLease(n.lease)), clientv3.OpPut(n.b.ownedKey(n.cfg.Node, room), val, clientv3.WithLease(n.lease))).
		Else(clientv3.OpGet(rk)).
		Commit()
	if err != nil {
		return directory.Claim{}, n.fail("claim", err)
	}
	if resp.Succeeded {
		return directory.Claim{Room: room, Node: n.cfg.Node, Token: directory.Token(resp.Header.Revision),
			PublicAddr: n.cfg.PublicAddr, InternalAddr: n.cfg.InternalAddr}, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return directory.Claim{}, n.expired("claim") // the room is free: our record is gone
	}
	owner, err := decodeClaim(room, kvs[0].Key, kvs[0].Value, kvs[0].ModRevision)
	if err != nil {
		return directory.Claim{}, err
	}
	return directory.Claim{}, &directory.OwnedError{Owner: owner}
}

// current reads room's claim; ok is false if it is not claimed.
func (n *node) current(ctx context.Context, op, room string) (c directory.Claim, ok bool, err error) {
	resp, err := n.b.cli.Get(ctx, n.b.roomKey(room))
	if err != nil {
		return directory.Claim{}, false, n.fail(op, err)
	}
	if len(resp.Kvs) == 0 {
		return directory.Claim{}, false, nil
	}
	kv := resp.Kvs[0]
	c, err = decodeClaim(room, kv.Key, kv.Value, kv.ModRevision)
	return c, err == nil, err
}

func (n *node) Release(ctx context.Context, room string, token directory.Token) error {
	if err := directory.CheckRoom(room); err != nil {
		return fmt.Errorf("directory/etcd: release: %w: room: %w", directory.ErrInvalid, err)
	}
	rctx, cancel, err := n.begin(ctx, "release")
	if err != nil {
		return err
	}
	defer cancel()
	// Read the owner (for its index key), then delete if the token still holds: a token
	// that holds means the owner read is the owner.
	cur, ok, err := n.current(rctx, "release", room)
	if err != nil {
		return err
	}
	if !ok || cur.Token != token {
		return &directory.NotOwnerError{Room: room, Token: token, Owner: cur}
	}
	rk := n.b.roomKey(room)
	resp, err := n.b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.ModRevision(rk), "=", int64(token))).
		Then(clientv3.OpDelete(rk), clientv3.OpDelete(n.b.ownedKey(cur.Node, room))).
		Commit()
	if err != nil {
		return n.fail("release", err)
	}
	if !resp.Succeeded {
		cur, _, err := n.current(rctx, "release", room)
		if err != nil {
			return err
		}
		return &directory.NotOwnerError{Room: room, Token: token, Owner: cur}
	}
	return nil
}

func (n *node) Lookup(ctx context.Context, room string) (directory.Claim, error) {
	if err := directory.CheckRoom(room); err != nil {
		return directory.Claim{}, fmt.Errorf("directory/etcd: lookup: %w: room: %w", directory.ErrInvalid, err)
	}
	rctx, cancel, err := n.begin(ctx, "lookup")
	if err != nil {
		return directory.Claim{}, err
	}
	defer cancel()
	c, ok, err := n.current(rctx, "lookup", room)
	if err != nil {
		return directory.Claim{}, err
	}
	if !ok {
		return directory.Claim{}, fmt.Errorf("%w: %q", directory.ErrNotClaimed, room)
	}
	return c, nil
}

func (n *node) Move(ctx context.Context, room string, token directory.Token, to string) (directory.Claim, error) {
	if err := directory.CheckRoom(room); err != nil {
		return directory.Claim{}, fmt.Errorf("directory/etcd: move: %w: room: %w", directory.ErrInvalid, err)
	}
	if err := directory.CheckNode(to); err != nil {
		return directory.Claim{}, fmt.Errorf("directory/etcd: move: %w: target node: %w", directory.ErrInvalid, err)
	}
	rctx, cancel, err := n.begin(ctx, "move")
	if err != nil {
		return directory.Claim{}, err
	}
	defer cancel()
	rk, tk := n.b.roomKey(room), n.b.nodeKey(to)
	// Read the room and the target's record (for its lease and addresses) at one revision.
	read, err := n.b.cli.Txn(rctx).Then(clientv3.OpGet(rk), clientv3.OpGet(tk)).Commit()
	if err != nil {
		return directory.Claim{}, n.fail("move", err)
	}
	var cur directory.Claim
	if kvs := read.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if cur, err = decodeClaim(room, kvs[0].Key, kvs[0].Value, kvs[0].ModRevision); err != nil {
			return directory.Claim{}, err
		}
	}
	if cur.Node == "" || cur.Token != token {
		return directory.Claim{}, &directory.NotOwnerError{Room: room, Token: token, Owner: cur}
	}
	tkvs := read.Responses[1].GetResponseRange().Kvs
	if len(tkvs) == 0 {
		return directory.Claim{}, fmt.Errorf("directory/etcd: move %q: %w: %q", room, directory.ErrUnknownNode, to)
	}
	target, err := decodeNode(string(tk), tkvs[0].Value)
	if err != nil {
		return directory.Claim{}, err
	}
	tl := clientv3.LeaseID(tkvs[0].Lease)
	val := encodeClaim(to, target.PublicAddr, target.InternalAddr)
	ops := []clientv3.Op{clientv3.OpPut(rk, val, clientv3.WithLease(tl)), clientv3.OpPut(n.b.ownedKey(to, room), val, clientv3.WithLease(tl))}
	if cur.Node != to {
		ops = append(ops, clientv3.OpDelete(n.b.ownedKey(cur.Node, room)))
	}
	resp, err := n.b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.ModRevision(rk), "=", int64(token)), clientv3.Compare(clientv3.LeaseValue(tk), "=", tl)).
		Then(ops...).
		Else(clientv3.OpGet(rk), clientv3.OpGet(tk)).
		Commit()
	if err != nil {
		if isLeaseNotFound(err) { // the target's lease lapsed between the read and the write
			return directory.Claim{}, fmt.Errorf("directory/etcd: move %q: %w: %q (its lease lapsed)", room, directory.ErrUnknownNode, to)
		}
		return directory.Claim{}, directory.Unavailable("move", err)
	}
	if resp.Succeeded {
		return directory.Claim{Room: room, Node: to, Token: directory.Token(resp.Header.Revision), PublicAddr: target.PublicAddr, InternalAddr: target.InternalAddr}, nil
	}
	cur = directory.Claim{}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if cur, err = decodeClaim(room, kvs[0].Key, kvs[0].Value, kvs[0].ModRevision); err != nil {
			return directory.Claim{}, err
		}
	}
	if cur.Token != token {
		return directory.Claim{}, &directory.NotOwnerError{Room: room, Token: token, Owner: cur}
	}
	return directory.Claim{}, fmt.Errorf("directory/etcd: move %q: %w: %q (its lease changed)", room, directory.ErrUnknownNode, to)
}

func (n *node) Rooms(ctx context.Context, owner string) ([]directory.Claim, error) {
	if err := directory.CheckNode(owner); err != nil {
		return nil, fmt.Errorf("directory/etcd: rooms: %w: node: %w", directory.ErrInvalid, err)
	}
	rctx, cancel, err := n.begin(ctx, "rooms")
	if err != nil {
		return nil, err
	}
	defer cancel()
	p := n.b.ownedPrefix(owner)
	resp, err := n.b.cli.Get(rctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, n.fail("rooms", err)
	}
	// The index key is written in the same transaction as the room key, so its mod
	// revision is the room's token.
	out := make([]directory.Claim, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		c, err := decodeClaim(strings.TrimPrefix(string(kv.Key), p), kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Room < out[j].Room })
	return out, nil
}

func (n *node) Nodes(ctx context.Context) ([]directory.NodeInfo, error) {
	rctx, cancel, err := n.begin(ctx, "nodes")
	if err != nil {
		return nil, err
	}
	defer cancel()
	nodes, _, err := n.nodes(rctx, "nodes")
	return nodes, err
}

// nodes reads the live node records, in ID order, and the revision read at.
func (n *node) nodes(ctx context.Context, op string) ([]directory.NodeInfo, int64, error) {
	resp, err := n.b.cli.Get(ctx, n.b.prefix+"nodes/", clientv3.WithPrefix())
	if err != nil {
		return nil, 0, n.fail(op, err)
	}
	out := make([]directory.NodeInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ni, err := decodeNode(string(kv.Key), kv.Value)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, ni)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, resp.Header.Revision, nil
}

func (n *node) Place(ctx context.Context) (directory.Placement, error) {
	rctx, cancel, err := n.begin(ctx, "place")
	if err != nil {
		return directory.Placement{}, err
	}
	defer cancel()
	nodes, rev, err := n.nodes(rctx, "place")
	if err != nil {
		return directory.Placement{}, err
	}
	// Count each node's claims at the revision the records were read at, up to
	// maxTxnOps counts per transaction.
	claimed := make(map[string]int, len(nodes))
	for start := 0; start < len(nodes); start += maxTxnOps {
		batch := nodes[start:min(len(nodes), start+maxTxnOps)]
		ops := make([]clientv3.Op, len(batch))
		for i, nd := range batch {
			ops[i] = clientv3.OpGet(n.b.ownedPrefix(nd.ID), clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(rev))
		}
		resp, err := n.b.cli.Txn(rctx).Then(ops...).Commit()
		if err != nil {
			return directory.Placement{}, n.fail("place", err)
		}
		for i, nd := range batch {
			claimed[nd.ID] = int(resp.Responses[i].GetResponseRange().Count)
		}
	}
	return directory.Choose(nodes, claimed, n.cfg.Placement)
}

func (n *node) Close(ctx context.Context) error {
	if n.closed.Swap(true) {
		return nil
	}
	n.clock.Expire()
	rctx, cancel := n.bound(ctx)
	defer cancel()
	if _, err := n.b.cli.Revoke(rctx, n.lease); err != nil && !isLeaseNotFound(err) {
		return directory.Unavailable("close: revoke lease", err)
	}
	return nil
}

// recordOf returns the node record cfg (with its defaults) describes, with status st.
func recordOf(cfg directory.Config, st directory.Status) directory.NodeInfo {
	return directory.NodeInfo{ID: cfg.Node, PublicAddr: cfg.PublicAddr, InternalAddr: cfg.InternalAddr, Loops: cfg.Loops, Status: st}
}
