package directory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Directory is one node's handle on a room directory: it holds the node's lease, publishes
// the node's record under it, claims, releases and moves rooms, and answers lookups and
// placement. A handle is one lease: once the lease has lapsed (ErrLeaseExpired) or the
// handle is closed, every call that writes fails and the node opens a new handle.
//
// Implementations are safe for concurrent use by any goroutine. The methods taking a
// context make a round trip to the backend (they block: loop code offloads them); Node,
// Lease and Valid are local and never block.
type Directory interface {
	// Node returns the node's ID (Config.Node). Never blocks.
	Node() string

	// Lease returns what this node knows locally of its lease: ID, TTL and deadline by the
	// monotonic clock. Never blocks.
	Lease() Lease

	// Valid reports whether the lease is still valid by the local monotonic clock: now is
	// before the lease's deadline minus the safety margin (Lease.ValidUntil). A room asks it
	// before each tick; it turns false before the backend can free the node's rooms. Never
	// blocks; cheap enough to call on every tick.
	Valid() bool

	// KeepAlive renews the lease once and returns its new deadline (by the local monotonic
	// clock, counted from when the request was sent). It returns ErrLeaseExpired if the
	// backend no longer has the lease (the node's rooms and record are gone), and
	// ErrUnavailable if the backend did not answer; the deadline stays where it was then.
	// Call it every Config.KeepAlivePeriod(). Blocks.
	KeepAlive(ctx context.Context) (time.Time, error)

	// Publish replaces the node's record with the given status (draining flag and load),
	// under the lease. The record's ID, addresses and loops come from Config. A status
	// that does not pass Status.Validate gets ErrInvalid. Blocks.
	Publish(ctx context.Context, st Status) error

	// Claim claims room for this node under its lease and returns the claim, whose Token is
	// the room's fencing token. If the room is owned already it returns an *OwnedError
	// (errors.Is ErrAlreadyOwned) naming the owner. Blocks.
	Claim(ctx context.Context, room string) (Claim, error)

	// Release gives up room, which this node must own with the given token; otherwise it
	// returns a *NotOwnerError (errors.Is ErrNotOwner). Blocks.
	Release(ctx context.Context, room string, token Token) error

	// Lookup returns the room's current claim, or ErrNotClaimed if no live node owns it.
	// Blocks.
	Lookup(ctx context.Context, room string) (Claim, error)

	// Move hands room over to the node named to, if the room's current token is token
	// (compare-and-swap), and returns the new claim: owned by to, under to's lease, with a
	// new, greater token. A stale token gets a *NotOwnerError (errors.Is ErrNotOwner); a
	// node that has no live record gets ErrUnknownNode. Any node holding the token may move
	// the room (the owner handing it off). Blocks.
	Move(ctx context.Context, room string, token Token, to string) (Claim, error)

	// Rooms returns the claims of the rooms the node named node owns, in room order.
	// Blocks.
	Rooms(ctx context.Context, node string) ([]Claim, error)

	// Nodes returns the records of the live nodes (those whose lease has not lapsed), in ID
	// order. Blocks.
	Nodes(ctx context.Context) ([]NodeInfo, error)

	// Place chooses the node a new room should go to: the live node with the most headroom
	// by load, never a draining one (see Choose), with the figures of the choice. It returns
	// ErrNoNode if no node can take a room. Blocks.
	Place(ctx context.Context) (Placement, error)

	// Close revokes the lease, which frees the node's rooms and removes its record, and
	// ends the handle. Blocks. Closing twice returns nil.
	Close(ctx context.Context) error
}

// Opener opens node handles on a directory backend: Embedded, or the etcd backend. Safe
// for concurrent use.
type Opener interface {
	// Open grants the node a lease and publishes its first record (not draining, no load)
	// under it. It returns ErrNodeInUse if a live node of the same ID exists (a restarted
	// node waits for its old lease to lapse). Blocks.
	Open(ctx context.Context, cfg Config) (Directory, error)
}

// Token is a room's fencing token: the revision of the room's claim in the directory. For
// a room it strictly increases across claims and moves, by any node, so a side effect
// stamped with a token can be refused once a greater one has been seen.
type Token int64

// Claim is the directory's record that a node owns a room.
type Claim struct {
	Room  string // the room's name
	Node  string // the owner's ID
	Token Token  // the claim's fencing token

	// The owner's addresses when it claimed the room (Config.PublicAddr and InternalAddr):
	// where a client and where another node reach the room.
	PublicAddr   string
	InternalAddr string
}

// Status is the part of a node's record that changes: Publish sends it.
type Status struct {
	Draining bool // the node takes no new rooms (it is shutting down or being emptied)
	Load     Load
}

// Validate reports why st cannot be published: a load figure negative, NaN or infinite.
// The error matches ErrInvalid. Any goroutine.
func (st Status) Validate() error {
	l := st.Load
	for _, f := range []struct {
		name string
		v    float64
	}{{"Utilisation", l.Utilisation}, {"RoomShare", l.RoomShare}, {"Rooms", float64(l.Rooms)}, {"Players", float64(l.Players)}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("directory: %w: Load.%s (%v) must be a finite number, not negative", ErrInvalid, f.name, f.v)
		}
	}
	return nil
}

// Load is what a node's loops are busy with, as the node measured it last.
type Load struct {
	// Utilisation is the loops' busy fraction averaged over the node's loops, 0 to 1: 0.6
	// on a one-loop node means the loop runs tasks 60% of the time.
	Utilisation float64
	// RoomShare is the part of that time spent in room ticks, as a fraction of the loops'
	// time (so RoomShare <= Utilisation): one room burning 30 ms per tick at 20 Hz on one
	// loop is 0.6.
	RoomShare float64
	Rooms     int // rooms running on the node
	Players   int // players seated in them
}

// NodeInfo is a node's record in the directory.
type NodeInfo struct {
	ID           string
	PublicAddr   string // where clients reach the node (host:port)
	InternalAddr string // where other nodes reach it
	Loops        int    // the node's event loops (its capacity, in loops)
	Status
}

// Config configures a node's handle (Opener.Open).
type Config struct {
	// Node is the node's ID, unique among live nodes: printable UTF-8, no '/', at most
	// MaxNameLen bytes.
	Node string
	// PublicAddr and InternalAddr are published in the node's record and in its claims.
	PublicAddr   string
	InternalAddr string
	// Loops is the node's event loops; 0 means 1.
	Loops int
	// TTL is the lease's time to live: a node that stops renewing loses its rooms after
	// about this long. 0 means DefaultTTL. A backend may round it up (etcd grants whole
	// seconds, and not fewer than its minimum); Lease().TTL is what was granted.
	TTL time.Duration
	// Margin is subtracted from the lease's deadline in the local validity check: it must
	// exceed the longest tick plus the clock rate difference between the node and the
	// backend over a TTL. 0 means TTL/5. It must be less than TTL.
	Margin time.Duration
	// RequestTimeout bounds each backend round trip whose context has no earlier deadline;
	// past it the call fails with ErrUnavailable. 0 means 2 s.
	RequestTimeout time.Duration
	// Placement tunes Place (see Choose).
	Placement PlaceConfig
}

// Defaults of Config.
const (
	DefaultTTL            = 5 * time.Second
	defaultRequestTimeout = 2 * time.Second
	// MaxNameLen is the longest room name or node ID, in bytes.
	MaxNameLen = 256
)

// WithDefaults returns c with its zero fields set to their defaults. Any goroutine.
func (c Config) WithDefaults() Config {
	if c.Loops == 0 {
		c.Loops = 1
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 5
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = defaultRequestTimeout
	}
	c.Placement = c.Placement.withDefaults()
	return c
}

// Validate reports the first invalid field of c (after defaults), naming it. Any goroutine.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if err := CheckNode(c.Node); err != nil {
		return fmt.Errorf("directory: Config.Node: %w", err)
	}
	switch {
	case c.Loops < 0:
		return fmt.Errorf("directory: Config.Loops (%d) must not be negative", c.Loops)
	case c.TTL < 0:
		return fmt.Errorf("directory: Config.TTL (%v) must not be negative", c.TTL)
	case c.Margin < 0 || c.Margin >= c.TTL:
		return fmt.Errorf("directory: Config.Margin (%v) must be positive and less than the TTL (%v)", c.Margin, c.TTL)
	case c.RequestTimeout < 0:
		return fmt.Errorf("directory: Config.RequestTimeout (%v) must not be negative", c.RequestTimeout)
	}
	return c.Placement.validate()
}

// KeepAlivePeriod is how often the node should call KeepAlive: a third of the TTL, so
// that two renewals in a row may fail before the local check (TTL minus Margin) lapses.
// Any goroutine.
func (c Config) KeepAlivePeriod() time.Duration {
	return c.WithDefaults().TTL / 3
}

// record returns the node record c describes, with status st. Any goroutine.
func (c Config) record(st Status) NodeInfo {
	c = c.WithDefaults()
	return NodeInfo{ID: c.Node, PublicAddr: c.PublicAddr, InternalAddr: c.InternalAddr, Loops: c.Loops, Status: st}
}

// CheckRoom reports why room is not a valid room name: empty, longer than MaxNameLen
// bytes, not UTF-8, or holding a control character. Any goroutine.
func CheckRoom(room string) error {
	return checkName(room, false)
}

// CheckNode reports why id is not a valid node ID: as CheckRoom, and no '/'. Any
// goroutine.
func CheckNode(id string) error {
	return checkName(id, true)
}

func checkName(s string, node bool) error {
	switch {
	case s == "":
		return errors.New("empty name")
	case len(s) > MaxNameLen:
		return fmt.Errorf("name of %d bytes, longer than %d", len(s), MaxNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("name %q is not UTF-8", s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("name %q holds a control character", s)
	case node && strings.Contains(s, "/"):
		return fmt.Errorf("node ID %q holds a '/'", s)
	}
	return nil
}

// Errors. Backends wrap them, so test with errors.Is.
var (
	// ErrAlreadyOwned: the room is claimed by a live node (an *OwnedError names it).
	ErrAlreadyOwned = errors.New("directory: room already owned")
	// ErrNotOwner: the token given is not the room's current one (a *NotOwnerError says
	// who owns the room now, if anyone).
	ErrNotOwner = errors.New("directory: not the room's owner")
	// ErrNotClaimed: no live node owns the room.
	ErrNotClaimed = errors.New("directory: room not claimed")
	// ErrLeaseExpired: the node's lease has lapsed (or was revoked); its rooms and record
	// are gone and the handle can no longer write. Open a new handle.
	ErrLeaseExpired = errors.New("directory: lease expired")
	// ErrUnavailable: the backend did not answer (down, unreachable, no quorum) in time.
	// The operation may or may not have taken effect; Lookup tells.
	ErrUnavailable = errors.New("directory: backend unavailable")
	// ErrNodeInUse: Open found a live node with the same ID.
	ErrNodeInUse = errors.New("directory: node ID in use by a live node")
	// ErrUnknownNode: Move's target has no live record.
	ErrUnknownNode = errors.New("directory: no live node of that ID")
	// ErrNoNode: Place found no node that can take a room (none live, or all draining).
	ErrNoNode = errors.New("directory: no node can take a room")
	// ErrClosed: the handle was closed.
	ErrClosed = errors.New("directory: handle closed")
	// ErrInvalid: a bad room name, node ID or token.
	ErrInvalid = errors.New("directory: invalid argument")
)

// OwnedError is Claim's error when the room is owned already. It matches ErrAlreadyOwned.
type OwnedError struct {
	Owner Claim // the current claim
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("directory: room %q already owned by node %q (token %d)", e.Owner.Room, e.Owner.Node, e.Owner.Token)
}

// Is makes errors.Is(err, ErrAlreadyOwned) true.
func (e *OwnedError) Is(target error) bool { return target == ErrAlreadyOwned }

// NotOwnerError is the error of Release and Move when the token given is not the room's
// current one. It matches ErrNotOwner.
type NotOwnerError struct {
	Room  string
	Token Token // the token given
	// Owner is the room's current claim; its zero value (Node == "") means nobody owns
	// the room now.
	Owner Claim
}

func (e *NotOwnerError) Error() string {
	if e.Owner.Node == "" {
		return fmt.Sprintf("directory: token %d of room %q is stale: the room is not claimed", e.Token, e.Room)
	}
	return fmt.Sprintf("directory: token %d of room %q is stale: node %q owns it with token %d", e.Token, e.Room, e.Owner.Node, e.Owner.Token)
}

// Is makes errors.Is(err, ErrNotOwner) true.
func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// Unavailable wraps cause, the backend's error, for operation op: the result matches
// ErrUnavailable and cause. For backends. Any goroutine.
func Unavailable(op string, cause error) error {
	return fmt.Errorf("directory: %s: %w: %w", op, ErrUnavailable, cause)
}
