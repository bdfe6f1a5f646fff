// Package servers implements the routes of every baton-bench scenario twice, with the same
// paths, status codes and bodies: on baton (handlers as tasks on one event loop, shared
// state in plain maps) and on net/http (a goroutine per connection, shared state behind a
// mutex, the idiomatic baseline).
package servers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// Target names of the built-in servers.
const (
	Baton   = "baton"
	NetHTTP = "nethttp"
	// BatonNoAccounting is baton with accounting off (Config.NoAccounting), for measuring
	// what accounting costs: run it beside Baton (-targets baton,baton-noacct).
	BatonNoAccounting = "baton-noacct"
	// Floor is the least a server can do for the rooms, ws-broadcast and arena traffic
	// on Linux (floor_linux.go): raw system calls on one thread, no framework, no
	// accounting. It serves only FloorScenarios' routes; its CPU per unit of work is the
	// limit the other targets are measured against.
	Floor = "floor"
)

// Targets lists the built-in servers that serve every scenario's routes.
var Targets = []string{Baton, NetHTTP}

// FloorScenarios names the scenarios whose routes the Floor target serves.
var FloorScenarios = []string{"rooms", "ws-broadcast", "arena"}

// Serves reports whether the built-in target serves scenario's routes.
func Serves(target, scenario string) bool {
	if target != Floor {
		return true
	}
	for _, s := range FloorScenarios {
		if s == scenario {
			return true
		}
	}
	return false
}

// Constants shared by both implementations.
const (
	// Hello is the plaintext body: 13 bytes.
	Hello = "Hello, World!"
	// Players is the number of players the game state starts with (ids p0 ... p999).
	Players = 1000
	// HogBurn is the CPU a hog request burns.
	HogBurn = 20 * time.Millisecond
	// HogSlice is how often the yielding hog yields (baton: Ctx.Yield; net/http: nothing to
	// yield to, it burns in its own goroutine and the Go scheduler preempts it).
	HogSlice = time.Millisecond
	// IdleTimeout is the keep-alive idle timeout of both servers (baton's default).
	IdleTimeout = 2 * time.Minute

	// FastCall and SlowCall are the blocking calls of the slow-flood routes (a quick indexed
	// query and a slow report).
	FastCall = time.Millisecond
	SlowCall = 200 * time.Millisecond
	// FloodTokens is the size of each slow-flood pool: baton's offload pools (with lanes:
	// the default quarter, 4 tokens, for the slow lane) and net/http's database/sql-like
	// pool of connections.
	FloodTokens = 16
	// FloodMaxWaiting bounds each baton flood pool lane's queue; past it the call gets 503.
	FloodMaxWaiting = 64

	// TaskGate is the number of request_task calls admitted at once; TaskCall is the
	// blocking work each does while admitted (a locked transaction).
	TaskGate = 5
	TaskCall = 20 * time.Millisecond
)

// Route documents one route served by both targets.
type Route struct {
	Method, Path string
	Scenario     string
	Doc          string
}

// Routes lists the routes both targets serve, for the docs and the parity test.
var Routes = []Route{
	{"GET", "/plaintext", "plaintext, idle-conns, cpu-hog", `200 text/plain; charset=utf-8, body "Hello, World!" (13 bytes)`},
	{"GET", "/json/players/{id}", "json", "200 application/json PlayerReply of player id (404 text/plain if unknown); reads shared game state"},
	{"POST", "/json/players/{id}/move", "json", "200 application/json PlayerReply after moving player id (created if new); mutates shared game state"},
	{"GET", "/hog/spin", "cpu-hog", "burns HogBurn of CPU without yielding; 200 application/json HogReply"},
	{"GET", "/hog/yield", "cpu-hog", "burns HogBurn of CPU in HogSlice pieces, yielding between them (baton); 200 application/json HogReply"},
	{"GET", "/hog/stats", "cpu-hog", "200 application/json HogStats: sums over the hog requests served so far"},
	{"GET", "/flood/lanes/fast", "slow-flood", `blocking call of FastCall in a pool with lanes; 200 text/plain "fast", 503 "busy" (Retry-After) when the pool's queue is full`},
	{"GET", "/flood/lanes/slow", "slow-flood", `blocking call of SlowCall in the same pool; 200 text/plain "slow", or 503 like fast`},
	{"GET", "/flood/nolanes/fast", "slow-flood", "as /flood/lanes/fast, in a pool of the same size without lanes"},
	{"GET", "/flood/nolanes/slow", "slow-flood", "as /flood/lanes/slow, in the pool without lanes"},
	{"POST", "/burst/heartbeat/{worker}", "reconnect-burst", `records the worker as seen; 200 text/plain "ok"`},
	{"POST", "/burst/request_task", "reconnect-burst", `admitted through a gate of TaskGate (non-blocking): does TaskCall of blocking work, 200 application/json TaskReply; gate full: 429 "busy" with Retry-After`},
	{"GET", "/burst/stats", "reconnect-burst", "200 application/json BurstStats"},
	{"POST", "/rooms/setup", "rooms", `JSON RoomSetup: makes the rooms (staggered over one period); 200 "ok", 400 invalid, 409 already set up`},
	{"POST", "/rooms/{id}/input", "rooms", `body "p=P&dx=X&dy=Y": queues the input for room id's next tick; 200 "ok", 429 "busy" (Retry-After) when its queue is full, 404 unknown room, 400 bad input`},
	{"POST", "/rooms/reset", "rooms", `clears the tick figures (the harness calls it when its window opens); 200 "ok"`},
	{"GET", "/rooms/stats", "rooms", "200 application/json RoomStats since the reset"},
	{"GET", "/ws/{room}", "ws-broadcast", "WebSocket upgrade; the connection joins room room-N and only receives (404 for other names)"},
	{"POST", "/ws/start", "ws-broadcast", `JSON WSStart: every room starts pushing WSPayload-byte messages to its members at 20 Hz; 200 "ok", 409 already started`},
	{"GET", "/ws/stats", "ws-broadcast", "200 application/json WSStats"},
	{"GET", "/arena?room={R}&slot={S}", "arena", "WebSocket upgrade; joins arena room R (made at its first player) as player S (0..3); 16-byte inputs in, a 120-byte state out per 50 ms tick; 400 for a bad room or slot"},
}

// TaskReply is the JSON body of a successful /burst/request_task.
type TaskReply struct {
	Task int `json:"task"`
}

// BurstStats is the JSON body of /burst/stats.
type BurstStats struct {
	Heartbeats int `json:"heartbeats"` // heartbeats received
	Workers    int `json:"workers"`    // distinct workers seen
	Tasks      int `json:"tasks"`      // request_task calls admitted and done
	Rejected   int `json:"rejected"`   // request_task calls refused by the gate (429)
}

// sleepCtx is the simulated blocking call: it blocks its goroutine for d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PlayerReply is the JSON body of the json scenario's routes.
type PlayerReply struct {
	ID         string `json:"id"`
	X          int    `json:"x"`
	Y          int    `json:"y"`
	Moves      int    `json:"moves"`
	Players    int    `json:"players"`
	TotalMoves int    `json:"total_moves"`
}

type player struct{ x, y, moves int }

// game is the shared state of the json scenario. It has no lock: baton uses it as is (one
// handler runs at a time), net/http wraps it in a mutex.
type game struct {
	players    map[string]*player
	totalMoves int
}

func newGame() *game {
	g := &game{players: make(map[string]*player, Players)}
	for i := range Players {
		g.players[fmt.Sprintf("p%d", i)] = &player{x: i % 64, y: i / 64}
	}
	return g
}

func (g *game) reply(id string, p *player) PlayerReply {
	return PlayerReply{ID: id, X: p.x, Y: p.y, Moves: p.moves, Players: len(g.players), TotalMoves: g.totalMoves}
}

func (g *game) get(id string) (PlayerReply, bool) {
	p, ok := g.players[id]
	if !ok {
		return PlayerReply{}, false
	}
	return g.reply(id, p), true
}

func (g *game) move(id string) PlayerReply {
	p, ok := g.players[id]
	if !ok {
		p = &player{}
		g.players[id] = p
	}
	p.moves++
	p.x = (p.x + 1) % 64
	if p.x == 0 {
		p.y = (p.y + 1) % 64
	}
	g.totalMoves++
	return g.reply(id, p)
}

// HogReply is the JSON body of /hog/spin and /hog/yield: the request's own scheduling
// figures. The scheduler fields (rounds, on_loop_us, max_slice_us, queue_delay_us) come
// from baton's Ctx.Stats and are zero for net/http.
type HogReply struct {
	BurnUs       int64  `json:"burn_us"`        // CPU burnt, by design HogBurn
	YieldEveryUs int64  `json:"yield_every_us"` // 0 for /hog/spin
	WallUs       int64  `json:"wall_us"`        // handler start to end
	Rounds       uint64 `json:"rounds"`         // slices the task ran in
	OnLoopUs     int64  `json:"on_loop_us"`     // time it held the loop
	MaxSliceUs   int64  `json:"max_slice_us"`   // its longest slice
	QueueDelayUs int64  `json:"queue_delay_us"` // time it waited ready to run
}

// HogStats is the JSON body of /hog/stats: totals over the hog requests served so far.
type HogStats struct {
	Count        int    `json:"count"`
	Yielding     int    `json:"yielding"` // of which /hog/yield
	WallUs       int64  `json:"wall_us"`
	Rounds       uint64 `json:"rounds"`
	OnLoopUs     int64  `json:"on_loop_us"`
	MaxSliceUs   int64  `json:"max_slice_us"` // the longest slice of any hog
	QueueDelayUs int64  `json:"queue_delay_us"`
}

func (s *HogStats) add(r HogReply) {
	s.Count++
	if r.YieldEveryUs > 0 {
		s.Yielding++
	}
	s.WallUs += r.WallUs
	s.Rounds += r.Rounds
	s.OnLoopUs += r.OnLoopUs
	s.MaxSliceUs = max(s.MaxSliceUs, r.MaxSliceUs)
	s.QueueDelayUs += r.QueueDelayUs
}

var sink atomic.Uint64 // keeps the burn loops from being optimised away

// burn spins the CPU for d of wall time.
func burn(d time.Duration) {
	start := time.Now()
	x := uint64(1)
	for time.Since(start) < d {
		for range 512 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink.Add(x)
}

// Running is a started server.
type Running struct {
	addr  string
	close func() error
}

// Addr returns the "host:port" the server listens on.
func (r *Running) Addr() string { return r.addr }

// Close stops the server at once.
func (r *Running) Close() error { return r.close() }

// Start starts target ("baton", "nethttp", "baton-noacct" or "floor") on addr ("127.0.0.1:0" picks a port) in this
// process and returns once it accepts connections. logger may be nil.
func Start(target, addr string, logger *slog.Logger) (*Running, error) {
	return StartWith(target, addr, logger, Options{})
}

// Options change how a built-in target runs. The zero value is Start's.
type Options struct {
	// Shards is baton's Config.Shards (0 or 1: one loop). With more, the baton targets
	// serve only the plaintext and rooms scenarios' routes (ShardedRoutes); the net/http
	// baseline ignores it (it uses every core already).
	Shards int
}

// ShardedRoutes names the scenarios whose routes a baton target serves with
// Options.Shards > 1: the others keep one loop's state in plain values.
var ShardedRoutes = []string{"plaintext", "rooms"}

// StartWith is Start with options.
func StartWith(target, addr string, logger *slog.Logger, opt Options) (*Running, error) {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch target {
	case Baton:
		return startBaton(addr, logger, false, opt.Shards)
	case BatonNoAccounting:
		return startBaton(addr, logger, true, opt.Shards)
	case NetHTTP:
		return startNetHTTP(addr, logger)
	case Floor:
		return startFloor(addr, logger)
	}
	return nil, fmt.Errorf("servers: unknown target %q (want %q, %q, %q or %q)", target, Baton, NetHTTP, BatonNoAccounting, Floor)
}

// ListenPrefix starts the line a child server prints on stdout once it listens, followed by
// its address.
const ListenPrefix = "baton-bench listening on "

// ServeChild runs target on addr as a child process of the harness: it raises the open
// file limit, starts the server, prints ListenPrefix and the address on out, and serves
// until SIGTERM, SIGINT or stop is closed.
func ServeChild(target, addr string, out io.Writer, stop <-chan struct{}) error {
	return ServeChildWith(target, addr, Options{}, out, stop)
}

// ServeChildWith is ServeChild with options.
func ServeChildWith(target, addr string, opt Options, out io.Writer, stop <-chan struct{}) error {
	if err := RaiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, "baton-bench server:", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := StartWith(target, addr, logger, opt)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s%s\n", ListenPrefix, srv.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case <-stop:
	}
	return srv.Close()
}

// RaiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit (every connection is a
// file descriptor) and returns the new soft limit's error, if any.
func RaiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= lim.Max {
		return nil
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return errors.Join(errors.New("raising the open file limit"), err)
	}
	return nil
}

// FileLimit returns the soft RLIMIT_NOFILE.
func FileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return uint64(lim.Cur) // int64 on the BSDs
}
