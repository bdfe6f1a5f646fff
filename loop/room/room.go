// Package room runs game rooms on baton's loop: a tick function against absolute deadlines
// with a budget and a late-tick policy, a bounded queue of player inputs, member tasks whose
// loop time counts to the room, figures of its own (the stats section "rooms": the page
// /debug/baton/rooms, Snapshot.Sections["rooms"], the dashboard's rooms panel), and a
// drain that lets each room save and tell its players before the server stops.
//
// A Room lives on one loop: its tick, its members and the loop's room table are
// loop-confined and need no lock; Input, Stop, Done and Name may be called from any
// goroutine. Under the invariants build (go test -race) its loop-confined methods panic
// when called off its loop instead of racing. The package is a client of package loop's exported API only: tasks
// (Loop.Go, Task.OnEnd, Task.Cancel, Task.Totals, Task.Contain), the drain
// (Loop.OnDrain, Loop.HoldDrain) and the stats registry (Server.AddStats).
//
// Every room claims its name in a room directory (package directory): on its own a server
// is its own node on an in-memory directory; UseDirectory makes it a node of a shared one
// (etcd), whose lease it renews from a loop task, and then a room checks the lease before
// each tick and stops for good once it lapsed, Room.Token is its fencing token, and Join
// and Admit route players to the node that owns their room. A room with Snapshot and
// Restore hooks can move, live, to another node between two ticks (Room.Handoff, and on
// drain). Admit seats a player: the seat is held across a dropped connection
// (Config.Reconnect) and a move, and taken back with a single-use resume token; Play
// serves a seated player's WebSocket by the client protocol (numbered inputs, acks,
// retries, the close that names the room's new owner). docs/rooms.md describes rooms in
// full, docs/cluster.md the directory, docs/handoff.md the handoff,
// docs/client-protocol.md the players' wire contract.
package room

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/internal/invariants"
	"github.com/batonrt/baton/loop"
)

// Room errors.
var (
	// ErrDraining is returned by New once Shutdown has begun: a handler answers 503
	// with Retry-After (Error does) so the client goes to another instance.
	ErrDraining = errors.New("room: server is draining")
	// ErrInputFull is returned by Room.Input when the room's input queue is full and its
	// policy is RefuseInput: a handler answers 429 with Retry-After (Error does).
	ErrInputFull = errors.New("room: input queue full")
	// ErrInputDropped is returned by Room.Input when the room's input queue is full and
	// its policy is DropInput: the input was dropped and counted. A handler usually
	// ignores it (the client's next input supersedes this one).
	ErrInputDropped = errors.New("room: input dropped: queue full")
	// ErrRoomStopped is returned by Room methods once the room was stopped, and is the
	// cancellation cause of its tasks (their parks return it, their Context is cancelled
	// with it).
	ErrRoomStopped = errors.New("room: stopped")
	// ErrMoved is the cancellation cause of a room's tasks when the room stopped because
	// its ownership lapsed (the node's lease in the directory ran out, or the room's
	// claim could not be kept): another node may own the room now. A member tells its
	// player to ask a node where the room is (Join); a WebSocket member closes with
	// CloseMoved.
	ErrMoved = errors.New("room: moved: the room's ownership lapsed; ask any node where it is now")
)

// CloseMoved is the WebSocket close code (in the range for applications, 4000-4999) a
// room's WebSocket members close with when the room moved (ErrMoved, Config.OnMoved): the
// close reason is the room's name, and the client asks any node's join endpoint (Join)
// for the room's owner again.
const CloseMoved = 4001

// Defaults.
const (
	// DefaultInputQueue is Config.InputQueue when zero: at 20 Hz, 256 inputs per
	// tick is 64 players sending 4 inputs each between two ticks, far more than a room
	// receives, yet a flood stops at a few KiB of queued inputs.
	DefaultInputQueue = 256

	// overrunLogEvery rate-limits a room's overrun log lines: the first overrun is
	// logged, then at most one line per room per this interval (with the number of
	// overruns not logged); every overrun is counted.
	overrunLogEvery = 10 * time.Second

	// overrunLogBurst caps the overrun lines of a loop's rooms together, per second.
	overrunLogBurst = 10

	// retainStopped is how long a stopped room's figures stay on the rooms page (marked
	// stopped) before its slot is freed: the longest loop-share window, so a room that
	// stopped after hogging the loop is still there to be named.
	retainStopped = time.Minute

	// drainRetryAfter is the Retry-After of a 503 refusing a room while draining: the
	// server will not come back, so the client should try another instance soon.
	drainRetryAfter = 1
)

// LatePolicy says what a room does with tick deadlines that passed while a tick (or
// another task) held the loop: SkipLate or CatchUp(k).
type LatePolicy struct{ catchUp int }

// SkipLate skips the deadlines already passed and ticks at the next one: the default,
// because a late tick's DT already covers the lost time, and running missed ticks back to
// back would hold the loop longer exactly when it is overloaded.
var SkipLate = LatePolicy{}

// CatchUp runs at most k missed ticks back to back (each with its own N and Deadline)
// after a late one, and skips the rest: for a fixed-step simulation that must not lose
// steps to a short hiccup. k must be at least 1.
func CatchUp(k int) LatePolicy { return LatePolicy{catchUp: k} }

// String returns "skip" or "catch-up(k)".
func (p LatePolicy) String() string {
	if p.catchUp == 0 {
		return "skip"
	}
	return "catch-up(" + strconv.Itoa(p.catchUp) + ")"
}

// InputPolicy says what Room.Input does when the room's input queue is full.
type InputPolicy int

const (
	// DropInput drops the input offered to a full queue, counts it and returns
	// ErrInputDropped: the default, because a player's next input supersedes a lost one
	// and the sender need not be told.
	DropInput InputPolicy = iota
	// RefuseInput refuses the input with ErrInputFull (counted): the handler answers 429
	// with Retry-After, for inputs that must not be lost silently (orders, purchases).
	RefuseInput
)

// Config configures a room. Name, Period and Tick are required.
type Config[I any] struct {
	// Name names the room on the rooms page; its tick task is named "room:<Name>" on the
	// tasks page, in the stall log and in CPU accounting.
	Name string
	// Period is the time between tick deadlines (50 ms for 20 Hz).
	Period time.Duration
	// FirstTick is how long after New the first tick is due; zero means one Period.
	// Tick N is due FirstTick + (N-1)·Period after New. Rooms made together (a server
	// restoring its rooms at start) tick together unless their FirstTicks spread them over
	// the period, and a loop whose ticks come due in bunches makes the last of each bunch
	// late (docs/rooms.md, "Spreading rooms").
	FirstTick time.Duration
	// Tick runs once per deadline, on the loop, as a slice of the room's tick task. It
	// may park (t.Task.Sleep, offload calls) but the next tick waits for it.
	Tick func(r *Room[I], t *Tick[I])
	// Late says what to do with deadlines missed while a tick ran late: SkipLate (the
	// zero value) or CatchUp(k).
	Late LatePolicy
	// Budget is how long a tick may run before it counts as an overrun; zero means
	// Period/2, leaving the other half of each period to the rest of the loop.
	Budget time.Duration
	// InputQueue bounds the inputs waiting for the next tick; zero means
	// DefaultInputQueue.
	InputQueue int
	// InputFull says what Input does when the queue is full: DropInput (the zero value)
	// or RefuseInput.
	InputFull InputPolicy
	// OnDrain runs on the loop when Shutdown begins, with the drain deadline (zero when
	// the Shutdown context has none): save the game, tell the players, then Stop the room.
	// The room keeps ticking until it is stopped; rooms still running at the deadline are
	// forced (their tasks are unwound). Without OnDrain a room is stopped when the drain
	// begins. A room with Snapshot and Restore on a node with a HandoffKey is handed to
	// another node instead, and drained this way only if no node takes it in time.
	OnDrain func(r *Room[I], deadline time.Time)
	// OnMoved runs on the loop when the room stops because its ownership lapsed (the node's
	// lease ran out: the loop stalled, the process was paused, the directory was out of
	// reach), before its member tasks are cancelled with ErrMoved: end the game here. The
	// members' own handlers close their WebSockets with CloseMoved when their task ends
	// with ErrMoved (a close from OnMoved, on the tick task, would wait for each close
	// handshake; docs/cluster.md has the recipe). The room runs no further tick, under its
	// old token or any other.
	OnMoved func(r *Room[I])
	// Snapshot and Restore let the room move live to another node (Room.Handoff, and
	// handoff on drain with UseDirectory and NodeConfig.HandoffKey): Snapshot turns the
	// room's state into bytes between two ticks, on the loop; Restore, on the target, sets
	// a fresh room's state from them before its first tick. The runtime carries the tick
	// number, the next deadline and the queued inputs itself. JSONState and GobState make
	// both. Without them the room drains as it always did. docs/handoff.md.
	Snapshot func(r *Room[I]) ([]byte, error)
	Restore  func(r *Room[I], state []byte) error
	// Reconnect is how long a seated player's seat (Admit) is held after their
	// connection drops, for them to take it back with their resume token (or a new seat
	// token): zero means 30 s; negative, not held (the player is removed at once). A seat
	// held when the room moves travels with it, and the move's closed connections are
	// held from the freeze. docs/client-protocol.md.
	Reconnect time.Duration
	// OnLeave, OnReturn and OnRemove tell the room's code about its seated players, on
	// the tick task between two ticks (before the next tick), in the order things
	// happened: OnLeave when a player's connection dropped (the seat is held for
	// Reconnect), OnReturn when they took it back, OnRemove when the hold ran out (remove
	// the player from the game). A move is no leave: a player whose connection a handoff
	// closed is not reported as leaving, and OnRemove runs on the new owner if they do
	// not come back there in time.
	OnLeave  func(r *Room[I], player string)
	OnReturn func(r *Room[I], player string)
	OnRemove func(r *Room[I], player string)
}

// Validate reports the first invalid field, naming it. Any goroutine.
func (c Config[I]) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("room: Config.Name is empty")
	case c.Period <= 0:
		return fmt.Errorf("room: Config.Period (%v) must be positive", c.Period)
	case c.Tick == nil:
		return errors.New("room: Config.Tick is nil")
	case c.Late.catchUp < 0:
		return fmt.Errorf("room: Config.Late: CatchUp(%d) must catch up at least 1 tick", c.Late.catchUp)
	case c.FirstTick < 0:
		return fmt.Errorf("room: Config.FirstTick (%v) must not be negative", c.FirstTick)
	case c.Budget < 0:
		return fmt.Errorf("room: Config.Budget (%v) must not be negative", c.Budget)
	case c.InputQueue < 0:
		return fmt.Errorf("room: Config.InputQueue (%d) must not be negative", c.InputQueue)
	case c.InputFull != DropInput && c.InputFull != RefuseInput:
		return fmt.Errorf("room: Config.InputFull (%d) is not DropInput or RefuseInput", c.InputFull)
	case (c.Snapshot == nil) != (c.Restore == nil):
		return errors.New("room: Config.Snapshot and Config.Restore must be set together")
	}
	return nil
}

// Tick is what a room's tick function gets: which tick this is and how it is timed. The
// room reuses it: do not keep it past the tick.
type Tick[I any] struct {
	// N is the tick's deadline number: the deadline is the room's start +
	// Config.FirstTick + (N-1)·Period. It starts at 1; deadlines skipped by the late
	// policy leave gaps, so (N-1)·Period is the game time since the first tick.
	N uint64
	// DT is the time since the previous tick started (since the room started, for the
	// first): what a variable-step simulation advances by.
	DT time.Duration
	// Deadline is when the tick was due.
	Deadline time.Time
	// Late is how long after Deadline the tick started.
	Late time.Duration
	// Task is the room's tick task: park it (Sleep, offload calls) or pass its Context.
	Task *loop.Task

	room *Room[I]
}

// DrainInputs calls fn for every input queued since the last drain, oldest first, and
// empties the queue. Inputs that arrive while fn runs wait for the next drain. It does not
// allocate. The tick's task only.
func (t *Tick[I]) DrainInputs(fn func(I)) { t.room.drainInputs(fn) }

// Inputs returns the queued inputs as an iterator that drains them (see DrainInputs).
// Breaking out of the loop leaves the rest queued, in front of newer inputs. The iterator
// may cost an allocation; DrainInputs does not. The tick's task only.
func (t *Tick[I]) Inputs() iter.Seq[I] {
	return func(yield func(I) bool) { t.room.drainSeq(yield) }
}

// Stats returns the room's figures so far (see Stats). The tick's task only.
func (t *Tick[I]) Stats() Stats { return t.room.Stats() }

// Stats is a room's figures: ticks, overruns, skipped and caught-up ticks, tick
// duration and lateness percentiles, loop share, inputs and members. docs/rooms.md says
// what each means.
type Stats = accounting.RoomSnapshot

// Room is a game session: a tick function run against absolute deadlines on the loop, a
// bounded queue of player inputs it drains, and the member tasks (request handlers,
// WebSocket connections, tasks started with Go) that belong to it: their loop time counts
// to the room, and Stop cancels them. Rooms always run on the loop, in both modes.
//
// Methods say on which goroutine they may be called: Input, Stop, Done and Name from any;
// the others on the room's loop (a loop-mode handler, a task, a tick, or a function passed
// to the loop's Post; in multi-thread mode handlers run off the loop, so use Post).
type Room[I any] struct {
	// First, with the core's first fields: what every tick touches, in as few cache lines
	// as possible (a thousand rooms' state is out of cache by a room's next tick).
	tick     Tick[I]
	tickFn   func(r *Room[I], t *Tick[I])
	tickCall func() // calls tickFn with the room and its tick: made once, run under Contain
	in       []I    // queued inputs; guarded by core.inMu
	out      []I    // inputs being drained; the tick's
	core     core
	cfg      Config[I]
}

// core is the part of a room that does not depend on its input type: what the loop's room
// table, the drain and the member tasks see.
type core struct {
	// Touched by every tick first.
	tbl        *table
	period     int64
	catchUp    int
	lastOnLoop time.Duration
	tickTask   *loop.Task // nil once ended
	members    []member

	inMu                     sync.Mutex
	closed                   bool   // guarded by inMu: Input refuses once set
	inputs, dropped, refused uint64 // guarded by inMu
	queueLen                 int    // guarded by inMu
	inputCap                 int
	refuse                   bool

	rec record // its per-tick fields first

	name     string
	taskName string // "room:" + name
	budget   time.Duration
	slot     int  // index in table.all
	stopping bool // Stop arrived (or the drain stopped it)
	ended    bool
	endedAt  int64
	onDrain  func(deadline time.Time)
	release  func() // the room's hold on the loop's drain (Loop.HoldDrain)

	nextLog    int64
	suppressed uint64

	stopOnce sync.Once
	done     chan struct{}
	synced   [3]uint64 // what rec already has of the input counters

	// Ownership in the directory (Node).
	dir     directory.Directory           // the handle the room claimed under; nil for the default node and before the claim
	token   atomic.Int64                  // the claim's fencing token; 0 before the claim. Any goroutine
	claimed *loop.Future[directory.Token] // settled by the claim; set in New
	lapsed  bool                          // the ownership check failed once: final
	onMoved func()                        // Config.OnMoved
	self    any                           // the *Room[I], for Admit

	sendBuf []any        // Broadcast's copy of the members' conns (members.go); nil while one runs
	ho      handoffState // handoff.go

	// Seats (seats.go). Loop-confined.
	seats     map[string]*seat
	seatEv    []seatEvent            // hooks to run before the next tick
	seatHooks [3]func(player string) // OnLeave, OnReturn, OnRemove
	hold      time.Duration          // Config.Reconnect, defaulted
}

// member is a task that belongs to a room.
type member struct {
	t      *loop.Task
	cancel func()        // removes the OnEnd hook that detaches it
	last   time.Duration // its loop time already charged to the room
	conn   any           // what Broadcast sends to (AttachConn); nil for a member without one
	seat   *seat         // the player's seat it holds (Admit); nil for none
}

// New starts a room on loop l: its first tick is Config.FirstTick (by default one Period)
// from now. It returns an error naming the invalid Config field, ErrNotOnLoop when called
// from a goroutine that is not l's, ErrDraining once Shutdown has begun (answer 503:
// Error), or loop.ErrServerClosed after the server stopped. Loop-confined: call it on l,
// from a handler (loop mode), a task, a tick or a function passed to l.Post (also before
// ListenAndServe: the function runs once the server is ready). In a handler pass c.Loop()
// (the handler's loop); srv.LoopFor(id) names a room's home loop, reached with its Post.
func New[I any](l *loop.Loop, cfg Config[I]) (*Room[I], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch l.Phase() {
	case "stopped":
		return nil, loop.ErrServerClosed
	case "draining":
		return nil, ErrDraining
	}
	if !l.OnLoop() {
		return nil, ErrNotOnLoop
	}
	cfg, err := fill(cfg)
	if err != nil {
		return nil, err
	}
	tbl := tableOf(l)
	claimed := loop.NewFuture[directory.Token](l)
	var token directory.Token
	if n := tbl.node; n.local {
		// The default node's directory is in memory: the claim is a mutex, made here.
		cl, err := n.handle().Claim(context.Background(), cfg.Name)
		if err != nil {
			return nil, fmt.Errorf("room: New: %w", err)
		}
		token = cl.Token
		claimed.Resolve(token, nil)
	}
	r := build(tbl, cfg, claimed, token)
	first := cfg.FirstTick
	if first == 0 {
		first = cfg.Period
	}
	now := tbl.now()
	if err := r.launch(now, now+int64(first), 1); err != nil {
		return nil, err
	}
	return r, nil
}

// fill sets cfg's defaults and checks its name. Any goroutine.
func fill[I any](cfg Config[I]) (Config[I], error) {
	if cfg.Budget == 0 {
		cfg.Budget = cfg.Period / 2
	}
	if cfg.InputQueue == 0 {
		cfg.InputQueue = DefaultInputQueue
	}
	if err := directory.CheckRoom(cfg.Name); err != nil {
		return cfg, fmt.Errorf("room: Config.Name: %w", err)
	}
	return cfg, nil
}

// build makes the room's structure; launch starts it. Loop-confined.
func build[I any](tbl *table, cfg Config[I], claimed *loop.Future[directory.Token], token directory.Token) *Room[I] {
	r := &Room[I]{cfg: cfg, tickFn: cfg.Tick}
	r.tick.room = r
	r.tickCall = func() { r.tickFn(r, &r.tick) }
	c := &r.core
	now := tbl.now()
	*c = core{
		tbl: tbl, name: cfg.Name, taskName: "room:" + cfg.Name, period: int64(cfg.Period), budget: cfg.Budget,
		catchUp: cfg.Late.catchUp,
		done:    make(chan struct{}), inputCap: cfg.InputQueue, refuse: cfg.InputFull == RefuseInput,
	}
	c.rec.Init(cfg.Name, cfg.Period, cfg.Budget, now)
	c.token.Store(int64(token))
	c.claimed, c.self = claimed, r
	if cfg.OnDrain != nil {
		c.onDrain = func(deadline time.Time) { cfg.OnDrain(r, deadline) }
	}
	if cfg.OnMoved != nil {
		c.onMoved = func() { cfg.OnMoved(r) }
	}
	c.ho.hooks = cfg.Snapshot != nil
	c.hold = cfg.Reconnect
	if c.hold == 0 {
		c.hold = defaultReconnect
	}
	for i, fn := range [3]func(*Room[I], string){cfg.OnLeave, cfg.OnReturn, cfg.OnRemove} {
		if fn != nil {
			c.seatHooks[i] = func(p string) { fn(r, p) }
		}
	}
	return r
}

// launch registers the room in its loop's table and starts its tick task: the previous
// tick (or the start) at clock reading prev, tick n due at next. Loop-confined.
func (r *Room[I]) launch(prev, next int64, n uint64) error {
	c := &r.core
	tbl, l := c.tbl, c.tbl.l
	tbl.add(c, tbl.now())
	c.release = l.HoldDrain() // the drain waits for the room to end
	h := l.Go(c.taskName, func(bt *loop.Task) { r.run(bt, prev, next, n) })
	bt := h.Task()
	if bt == nil { // the loop is stopping: the task will not run
		c.stopping = true
		c.checkEnded()
		return loop.ErrServerClosed
	}
	c.tickTask = bt
	bt.OnEnd(func() { c.tickEnded(bt) }) // the tick task is not a member, but its end ends the room
	return nil
}

// ErrNotOnLoop is returned by New when called from a goroutine that is not the loop's: a
// room's state is loop-confined, and making it elsewhere would race with the loop.
var ErrNotOnLoop = errors.New("room: New called off the loop (call it from a task or a function posted to the loop)")

// Token returns the room's fencing token: the revision of its claim in the directory,
// which strictly increases for a room name across claims and owners. Stamp side effects
// with it (a store that keeps the highest token seen per room refuses older ones); 0
// until the claim is made (see Claimed). Any goroutine.
func (r *Room[I]) Token() directory.Token { return directory.Token(r.core.token.Load()) }

// Claimed parks w until the room's claim in the directory is settled and returns its
// token, or why the room could not be claimed: a *directory.OwnedError (errors.Is
// directory.ErrAlreadyOwned) naming the node that owns it, directory.ErrUnavailable, or
// ErrRoomStopped. The room stops when its claim fails. On the default node the claim is
// made by New, so Claimed returns at once. w is a task of the room's loop.
func (r *Room[I]) Claimed(w loop.Waiter) (directory.Token, error) { return r.core.claimed.Await(w, 0) }

// Name returns the room's name. Any goroutine.
func (r *Room[I]) Name() string { return r.core.name }

// Loop returns the loop the room runs on. Any goroutine.
func (r *Room[I]) Loop() *loop.Loop { return r.core.tbl.l }

// Done returns a channel closed once the room has ended: it was stopped (or the server
// stopped) and its tick task and member tasks have all finished. Any goroutine.
func (r *Room[I]) Done() <-chan struct{} { return r.core.done }

// Stop stops the room: no further tick runs (one running finishes), inputs are refused
// with ErrRoomStopped, and its member tasks are cancelled with ErrRoomStopped (their parks
// return it, so they return and their deferred functions run). Done is closed once they
// have all ended. Stop returns at once; stopping a stopped room does nothing. Any
// goroutine, also from the room's own tick or tasks.
func (r *Room[I]) Stop() {
	c := &r.core
	c.stopOnce.Do(func() {
		c.inMu.Lock()
		c.closed = true
		c.inMu.Unlock()
		if c.tbl.l.Post(c.stopOnLoop) != nil {
			c.end() // the loop is gone, and the room with it
		}
	})
}

// Members returns the number of member tasks (the tick task not included). Loop-confined.
func (r *Room[I]) Members() int {
	r.core.confined("Members")
	return len(r.core.members)
}

// confined panics, in the invariants build (go test -race), when the caller is not on the
// room's loop: the entry points of a room's loop-confined state would race there. The
// check reads a stack trace (about a microsecond), hence the invariants build only.
func (c *core) confined(method string) {
	if invariants.Enabled {
		invariants.Assert(c.tbl.l.OnLoop(), "room: Room.%s of room %q called off its loop (loop %d): a room's state is loop-confined; post to r.Loop()", method, c.name, c.tbl.l.Index())
	}
}

// sameLoop panics when t runs on another loop than the room: its hooks and totals belong
// to that loop. A pointer compare, so always on. A zero Task (never started) passes, to be
// refused as not running.
func (c *core) sameLoop(method string, t *loop.Task) {
	if tl := t.Loop(); tl != nil && tl != c.tbl.l {
		panic(fmt.Sprintf("room: Room.%s of room %q (loop %d) with a task of loop %d: a room's members run on its loop; make the room on the task's loop (LoopFor), or post the work to r.Loop()", method, c.name, c.tbl.l.Index(), tl.Index()))
	}
}

// Stats returns the room's figures so far (see Stats). It computes percentiles over two
// small histograms and shares over 60 one-second buckets (a few µs): read it when the
// game needs it, not on every tick of a thousand rooms. Loop-confined.
func (r *Room[I]) Stats() Stats {
	c := &r.core
	c.confined("Stats")
	c.sync()
	return c.rec.Snapshot(c.tbl.now())
}

// Input queues v for the room's next tick. It never parks. When the queue is full it
// drops v and returns ErrInputDropped (DropInput) or returns ErrInputFull (RefuseInput);
// both are counted. After Stop it returns ErrRoomStopped. It does not allocate once the
// queue has grown. Any goroutine.
func (r *Room[I]) Input(v I) error {
	c := &r.core
	c.inMu.Lock()
	switch {
	case c.ho.frozen != 0:
		err := c.ho.refusal()
		c.inMu.Unlock()
		return err
	case c.closed:
		c.inMu.Unlock()
		return ErrRoomStopped
	case len(r.in) >= c.inputCap:
		if c.refuse {
			c.refused++
			c.inMu.Unlock()
			return ErrInputFull
		}
		c.dropped++
		c.inMu.Unlock()
		return ErrInputDropped
	}
	r.in = append(r.in, v)
	c.inputs++
	c.queueLen = len(r.in)
	c.inMu.Unlock()
	return nil
}

func (r *Room[I]) takeInputs() []I {
	c := &r.core
	c.inMu.Lock()
	r.in, r.out = r.out[:0], r.in
	c.queueLen = 0
	c.inMu.Unlock()
	return r.out
}

func (r *Room[I]) drainInputs(fn func(I)) {
	out := r.takeInputs()
	for _, v := range out {
		fn(v)
	}
	clear(out) // let the inputs' memory go
}

func (r *Room[I]) drainSeq(yield func(I) bool) {
	out := r.takeInputs()
	defer clear(out)
	for i, v := range out {
		if !yield(v) {
			// Stopped early: put the rest back in front of what arrived meanwhile.
			rest := out[i+1:]
			c := &r.core
			c.inMu.Lock()
			r.in = append(append(r.out[:0:0], rest...), r.in...)
			c.queueLen = len(r.in)
			c.inMu.Unlock()
			return
		}
	}
}

// Go starts fn as a member task of the room, named "room:<room>/<name>": like the loop's
// Go, but its loop time counts to the room and Stop cancels it. In a stopped room fn does
// not run and the handle is done within the loop turn. Loop-confined.
func (r *Room[I]) Go(name string, fn func(t *loop.Task)) *loop.TaskHandle {
	if fn == nil {
		panic("room: Room.Go(" + name + ", nil)")
	}
	c := &r.core
	c.confined("Go")
	if c.stopping || c.ended {
		return c.tbl.l.Go(c.taskName+"/"+name, func(*loop.Task) {})
	}
	h := c.tbl.l.Go(c.taskName+"/"+name, fn)
	if bt := h.Task(); bt != nil {
		c.attach(bt)
	}
	return h
}

// Attach makes t a member of the room: t's loop time counts to the room from now on, and
// Stop cancels it. Pass a handler's task (&c.Task; a WebSocket connection's task is its
// upgrading handler's) or a background task's. A task belongs to one room at a time:
// attaching it moves it. In a stopped room it returns ErrRoomStopped; a task that has
// ended (or not started) is refused. A task of another loop than the room's panics
// (it would race). Loop-confined: a multi-thread handler attaches its task through the
// loop's Post; the invariants build (go test -race) panics on a call off the loop.
func (r *Room[I]) Attach(t *loop.Task) error {
	r.core.sameLoop("Attach", t)
	r.core.confined("Attach")
	return r.core.join(t)
}

// Detach ends t's membership: its loop time so far stays counted. A task of another loop
// panics, as in Attach. Loop-confined.
func (r *Room[I]) Detach(t *loop.Task) {
	r.core.sameLoop("Detach", t)
	r.core.confined("Detach")
	if r.core.tbl.owner[t] == &r.core {
		r.core.detach(t)
	}
}

// run is the body of the room's tick task, for a room started (or its last tick begun,
// for a room restored from a handoff) at start (a clock reading): ticks n, n+1... against
// absolute deadlines first, first + Period..., with the late policy deciding about
// deadlines that passed during a tick. Between two ticks it does a handoff asked for.
func (r *Room[I]) run(bt *loop.Task, start, first int64, n uint64) {
	c := &r.core
	tbl := c.tbl
	defer r.takeInputs() // the queue's memory goes with the room
	defer c.ho.abandon() // a handoff asked for and never begun
	r.tick.Task = bt
	if !c.claimed.Done() && !c.claim(bt) {
		return
	}
	next, prev := first, start
	behind := 0  // ticks run back to back to catch up since the last on-time one
	end := start // the clock at the end of the previous tick: one reading serves both
	for {
		if c.ho.req != nil && c.ho.req.ready(tbl.node) { // between two ticks: the room's state is whole
			var moved bool
			if end, moved = r.handOff(bt, n, next, prev); moved {
				return
			}
		}
		if next > end {
			if err := bt.Sleep(time.Duration(next - end)); err != nil {
				return
			}
		} else if bt.Err() != nil {
			return
		}
		if fencing && c.dir != nil && !c.owned() {
			c.lapse(bt)
			return
		}
		if len(c.seats) > 0 || len(c.seatEv) > 0 {
			c.seatTurn(bt, tbl.now())
		}
		began := tbl.now()
		if c.ho.resumed != 0 {
			c.ho.firstTick(tbl.node)
		}
		c.chargeTick(bt, began)
		r.tick.N, r.tick.DT, r.tick.Late = n, time.Duration(began-prev), time.Duration(began-next)
		r.tick.Deadline = tbl.timeAt(next)
		var off0 time.Duration
		if tbl.acct {
			_, q, p := bt.Totals()
			off0 = q + p
		}
		if bt.Contain(r.tickCall) {
			c.rec.Panicked() // logged and counted by the loop; the room goes on
		}
		end = tbl.now()
		wall := time.Duration(end - began)
		dur := wall // without per-task figures a tick's on-loop time is its wall time
		if tbl.acct {
			// Its slices only: a tick that parks (offload, Sleep, a Future) holds the loop
			// for less than its wall time, and the budget is about holding the loop. Both
			// readings are taken inside a slice, so the parks and queue waits between them
			// are complete in the task's totals: they are the tick's time off the loop.
			_, q, p := bt.Totals()
			dur = min(max(wall-(q+p-off0), 0), wall)
		}
		if c.rec.Tick(r.tick.Late, dur, wall) {
			c.overrun(n, dur, wall, end)
		}
		if !tbl.acct {
			c.charge(end, dur) // no per-task figures: a tick's loop time is its length
		}
		c.chargeMembers(end)
		prev = began
		n++
		next += c.period
		if next > end {
			behind = 0
			continue
		}
		missed := (end-next)/c.period + 1 // deadlines already passed
		allowed := int64(max(c.catchUp-behind, 0))
		if skip := missed - allowed; skip > 0 {
			n += uint64(skip)
			next += skip * c.period
			c.rec.Skipped(uint64(skip))
		}
		if next <= end {
			behind++
			c.rec.CaughtUp()
		} else {
			behind = 0
		}
	}
}

// attach adds t to the members. Loop-confined.
func (c *core) attach(t *loop.Task) error {
	cancel, ok := t.OnEnd(func() { c.memberEnded(t) })
	if !ok {
		return errors.New("room: Room.Attach: the task is not running")
	}
	var last time.Duration
	if c.tbl.acct {
		last, _, _ = t.Totals()
	}
	c.tbl.owner[t] = c
	c.members = append(c.members, member{t: t, cancel: cancel, last: last})
	c.tbl.figs.players.Add(1)
	if c.stopping {
		t.Cancel(ErrRoomStopped)
	}
	return nil
}

// detach removes t from the members, charging its loop time since the last charge.
// Loop-confined.
func (c *core) detach(t *loop.Task) {
	for i := range c.members {
		if m := &c.members[i]; m.t == t {
			c.seatDropped(m)
			m.cancel()
			c.remove(i)
			break
		}
	}
	c.checkEnded()
}

// memberEnded is a member's OnEnd hook: the task ended. Loop-confined.
func (c *core) memberEnded(t *loop.Task) {
	for i := range c.members {
		if c.members[i].t == t {
			c.seatDropped(&c.members[i])
			c.remove(i)
			break
		}
	}
	c.checkEnded()
}

// remove drops member i, charging its loop time since the last charge. Loop-confined.
func (c *core) remove(i int) {
	m := &c.members[i]
	if c.tbl.acct {
		on, _, _ := m.t.Totals()
		c.charge(c.tbl.now(), on-m.last)
	}
	delete(c.tbl.owner, m.t)
	c.tbl.figs.players.Add(-1)
	last := len(c.members) - 1
	c.members[i] = c.members[last]
	c.members[last] = member{}
	c.members = c.members[:last]
}

// tickEnded is the tick task's OnEnd hook. Loop-confined.
func (c *core) tickEnded(bt *loop.Task) {
	c.chargeTick(bt, c.tbl.now())
	c.tickTask = nil
	c.checkEnded()
}

// chargeTick charges the tick task's loop time since the last charge (its slices up to
// the latest switch) to the room.
func (c *core) chargeTick(bt *loop.Task, now int64) {
	if !c.tbl.acct {
		return
	}
	on, _, _ := bt.Totals()
	c.charge(now, on-c.lastOnLoop)
	c.lastOnLoop = on
}

// chargeMembers charges the members' loop time since the last charge. Loop-confined.
func (c *core) chargeMembers(now int64) {
	if !c.tbl.acct {
		return
	}
	for i := range c.members {
		m := &c.members[i]
		on, _, _ := m.t.Totals()
		c.charge(now, on-m.last)
		m.last = on
	}
}

// sync brings the room's input counters and member count into its recorder.
// Loop-confined.
func (c *core) sync() {
	c.inMu.Lock()
	in, dr, rf, q := c.inputs, c.dropped, c.refused, c.queueLen
	c.inMu.Unlock()
	c.rec.Input(in-c.synced[0], dr-c.synced[1], rf-c.synced[2])
	c.synced = [3]uint64{in, dr, rf}
	c.rec.SetMembers(len(c.members), q)
}

// overrun logs a tick over budget, at most once per room per overrunLogEvery and within
// the loop-wide room log limit.
func (c *core) overrun(n uint64, dur, wall time.Duration, now int64) {
	tbl := c.tbl
	if now < c.nextLog {
		c.suppressed++
		return
	}
	if !tbl.logAllowed(now) {
		c.suppressed++
		return
	}
	c.nextLog = now + int64(overrunLogEvery)
	tbl.logger.Warn("room: tick overran its budget", "room", c.name, "task", c.taskName, "tick", n,
		"duration", dur, "wall", wall, "budget", c.budget, "period", time.Duration(c.period),
		"overruns", c.rec.Overruns(), "not_logged", c.suppressed)
	c.suppressed = 0
}

// stopOnLoop stops the room. Loop-confined.
func (c *core) stopOnLoop() { c.stopWith(ErrRoomStopped) }

// stopWith stops the room, cancelling its tasks with cause. Loop-confined.
func (c *core) stopWith(cause error) {
	if c.stopping {
		return
	}
	c.stopping = true
	c.inMu.Lock()
	c.closed = true
	c.inMu.Unlock()
	if c.tickTask != nil {
		c.tickTask.Cancel(cause)
	}
	for _, m := range append([]member(nil), c.members...) { // a cancel may end a member at once
		m.t.Cancel(cause)
	}
	c.checkEnded()
}

// checkEnded ends the room once it was stopped (or its tick task ended) and nothing of it
// runs any more. Loop-confined.
func (c *core) checkEnded() {
	if c.ended || c.tickTask != nil {
		return
	}
	if len(c.members) > 0 && c.tbl.l.Phase() != "stopped" {
		if !c.stopping {
			c.stopOnLoop() // the tick task ended by itself (its context's server stops): cancel the rest
		}
		return
	}
	c.end()
	c.tbl.ended(c)
}

// end closes Done. Any goroutine, once.
func (c *core) end() {
	c.ended = true
	select {
	case <-c.done:
	default:
		close(c.done)
	}
}

// Error answers c's request refused by a room call and reports whether it did: 503 with
// Retry-After for ErrDraining (or loop.ErrServerClosed), 429 with Retry-After for
// ErrInputFull, 410 for ErrRoomStopped. Other errors (nil, ErrInputDropped) are left to
// the handler. The handler's task only.
func Error(c *loop.Ctx, err error) bool {
	switch {
	case errors.Is(err, ErrDraining), errors.Is(err, loop.ErrServerClosed):
		c.SetHeader("Retry-After", strconv.Itoa(drainRetryAfter))
		c.String(503, "503 Service Unavailable: draining\n")
	case errors.Is(err, ErrHandingOff):
		c.SetHeader("Retry-After", "0") // the room is moving: resend at once
		c.String(503, "503 Service Unavailable: room handing off; resend\n")
	case errors.Is(err, ErrInputFull):
		c.SetHeader("Retry-After", "1") // a tick drains the queue: the next second has room
		c.String(429, "429 Too Many Requests: room input queue full\n")
	case errors.Is(err, ErrRoomStopped):
		c.String(410, "410 Gone: room stopped\n")
	case errors.Is(err, ErrMoved):
		c.String(410, "410 Gone: room moved (ask a node where it is now)\n")
	default:
		return false
	}
	return true
}
