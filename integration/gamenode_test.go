package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/directory/etcd"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/loop/ws"
)

// The handoff tests (handoff_test.go) run game nodes as processes: this test binary,
// re-executed with gameEnvNode set, runs runGameNode instead of the tests. A game node is
// a node of a room directory (a shared file on one machine, or etcd) whose rooms carry
// their state across handoffs, with the routes of docs/client-protocol.md (room.Join;
// room.Admit and room.Play: the WebSocket with resume tokens, input sequence numbers and
// acks, the close 4001 when the room moves) and a log of every tick.
const (
	gameEnvNode    = "BATON_GAME_NODE"    // the node's ID
	gameEnvAddr    = "BATON_GAME_ADDR"    // host:port to listen on (shared by a process and its successor)
	gameEnvDir     = "BATON_GAME_DIR"     // "file:PATH" (directory.NewShared) or "etcd:URL,URL"
	gameEnvTickLog = "BATON_GAME_TICKLOG" // the file every tick is appended to
	gameEnvHandoff = "BATON_GAME_HANDOFF" // "1": a handoff key, rooms move on drain; else they end
	gameEnvOwnAddr = "BATON_GAME_OWNADDR" // "1": the handoff endpoint on a listener of its own (NodeConfig.HandoffAddr)

	// gameReady starts the line a node prints once it serves and holds its lease.
	gameReady = "READY "
	// gameFigures starts the line carrying the node's handoff figures (the stats section
	// "cluster"'s), printed at SIGTERM: the gaps of the rooms it accepted.
	gameFigures = "FIGURES "
	// gamePeriod is the rooms' tick period: 20 Hz.
	gamePeriod = 50 * time.Millisecond
)

var (
	gameHandoffKey = []byte("baton integration handoff key, 32+ bytes")
	gameSeatKey    = []byte("baton integration seat key, 32+ bytes long")
)

// machineNow reads CLOCK_MONOTONIC: one clock for every process of the machine.
func machineNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// gameInput is one player input as the room queues it: the player (stamped by room.Play's
// decode) and the client's input, which is its own sequence number (playClient), so that
// the state shows which inputs the room took and in which order.
type gameInput struct {
	Player string `json:"p"`
	N      uint64 `json:"n"`
}

// game is a room's state, all of it moved by the snapshot: the ticks it has run, and per
// player the last input applied by a tick, the sum of the inputs applied, and the inputs
// that came out of order (not the last applied + 1: a duplicate, or one skipped). A
// player removed (their seat's hold ran out: OnRemove) starts again from nothing, as a
// new seat numbers its inputs from 1. Loop-confined.
type game struct {
	Ticks      uint64            `json:"ticks"`
	Applied    map[string]uint64 `json:"applied"`
	Sum        map[string]uint64 `json:"sum"`
	OutOfOrder map[string]uint64 `json:"out_of_order"`
	Removed    uint64            `json:"removed"`
}

// runGameNode is a game node until SIGTERM, when it drains (Shutdown, 10 s).
func runGameNode() int {
	id := os.Getenv(gameEnvNode)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fail := func(err error) int { logger.Error("game node "+id, "err", err); return 1 }
	tickLog, err := os.OpenFile(os.Getenv(gameEnvTickLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(err)
	}
	defer tickLog.Close()
	var op directory.Opener
	spec := os.Getenv(gameEnvDir)
	// The default TTL (5 s): a 2 s lease lapsed once in 30 runs under -race, the first
	// node's loop saturated by every bot joining at once on 2 shared cores.
	ttl := directory.DefaultTTL
	switch {
	case strings.HasPrefix(spec, "file:"):
		if op, err = directory.NewShared(strings.TrimPrefix(spec, "file:")); err != nil {
			return fail(err)
		}
	case strings.HasPrefix(spec, "etcd:"):
		cli, err := etcd.Connect(strings.Split(strings.TrimPrefix(spec, "etcd:"), ","))
		if err != nil {
			return fail(err)
		}
		defer cli.Close()
		op = etcd.New(cli, "/rolling/")
	default:
		return fail(fmt.Errorf("%s=%q: want file:PATH or etcd:URLS", gameEnvDir, spec))
	}
	seats, err := directory.NewSeatSigner(directory.SeatConfig{Key: gameSeatKey})
	if err != nil {
		return fail(err)
	}
	srv := loop.New(loop.Config{Addr: os.Getenv(gameEnvAddr), Logger: logger})
	handoff := os.Getenv(gameEnvHandoff) == "1"
	nc := room.NodeConfig{
		Directory: directory.Config{Node: id, TTL: ttl, RequestTimeout: 500 * time.Millisecond},
		Seats:     seats, PublishEvery: 200 * time.Millisecond,
	}
	if handoff {
		nc.HandoffKey = gameHandoffKey
		if os.Getenv(gameEnvOwnAddr) == "1" {
			nc.HandoffAddr = "127.0.0.1:0"
		}
	}
	if err := room.UseDirectory(srv, op, nc); err != nil {
		return fail(err)
	}
	games := map[string]*game{} // this node's rooms' states, by name: loop-confined (one loop)
	config := func(name string) room.Config[gameInput] {
		g := &game{Applied: map[string]uint64{}, Sum: map[string]uint64{}, OutOfOrder: map[string]uint64{}}
		var line []byte
		cfg := room.Config[gameInput]{Name: name, Period: gamePeriod, Late: room.CatchUp(1000), InputFull: room.RefuseInput,
			Tick: func(r *room.Room[gameInput], t *room.Tick[gameInput]) {
				start := machineNow()
				games[name] = g // the latest room of the name here (after a restore, before its first tick, it is not listed)
				t.DrainInputs(func(in gameInput) {
					if in.N != g.Applied[in.Player]+1 {
						g.OutOfOrder[in.Player]++
					}
					g.Applied[in.Player] = in.N
					g.Sum[in.Player] += in.N
				})
				g.Ticks++
				line = fmt.Appendf(line[:0], "%s %s %d %d %d %d %d\n", id, name, r.Token(), start, machineNow(), t.N, g.Ticks)
				_, _ = tickLog.Write(line)
			},
			OnRemove: func(_ *room.Room[gameInput], p string) {
				delete(g.Applied, p)
				delete(g.Sum, p)
				g.Removed++
			}}
		cfg.OnMoved = func(*room.Room[gameInput]) {
			if games[name] == g {
				delete(games, name)
			}
		}
		if handoff {
			cfg.Snapshot, cfg.Restore = room.JSONState[gameInput](g)
		}
		return cfg
	}
	if handoff {
		if err := room.AcceptHandoffs(srv, func(name string) (room.Config[gameInput], error) { return config(name), nil }); err != nil {
			return fail(err)
		}
	}
	srv.Handle("GET /join/{room}", func(c *loop.Ctx) { room.Join(c, c.PathValue("room"), c.Query("player")) })
	srv.Handle("GET /state/{room}", func(c *loop.Ctx) {
		g := games[c.PathValue("room")]
		if g == nil {
			c.String(404, "not here")
			return
		}
		c.JSON(200, g)
	})
	// The players' route, by the client protocol: room.Admit seats the player its seat or
	// resume token names (taking back a seat held after a drop or a move), room.Play
	// serves the connection (hello, seq/ack/retry, the close 4001 naming the new owner).
	// KeepOnDrain: the drain does not close the players with 1001 at once; room.Play
	// closes each when its room has moved (4001) or, if it could not move, ended (1000).
	srv.Handle("GET /play/{room}", func(c *loop.Ctx) {
		name := c.PathValue("room")
		r, _, ok := room.Admit(c, name, func(l *loop.Loop) (*room.Room[gameInput], error) {
			return room.New(l, config(name))
		})
		if !ok {
			return
		}
		conn, err := ws.Upgrade(c, ws.Config{KeepOnDrain: true, CheckOrigin: func(*loop.Ctx, string) bool { return true }})
		if err != nil {
			return
		}
		_ = room.Play(c, r, conn, func(player string, raw json.RawMessage) (gameInput, error) {
			in := gameInput{Player: player}
			return in, json.Unmarshal(raw, &in.N)
		})
	})

	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case <-srv.Ready():
	case err := <-errc:
		return fail(err)
	}
	// Ready once the node holds its lease: its cluster page says it is open.
	for {
		if f, ok := clusterFigures(srv); ok && f.Open {
			fmt.Printf("%s%s\n", gameReady, srv.Addr())
			break
		}
		select {
		case err := <-errc:
			return fail(err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	if f, ok := clusterFigures(srv); ok {
		b, _ := json.Marshal(f.Handoffs)
		fmt.Printf("%s%s\n", gameFigures, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return fail(err)
	}
	if err := <-errc; !errors.Is(err, loop.ErrServerClosed) {
		return fail(err)
	}
	return 0
}

// nodeFigures is what the tests read of the stats section "cluster" (its page's JSON).
type nodeFigures struct {
	Open     bool           `json:"open"`
	Handoffs handoffFigures `json:"handoffs"`
}

// handoffFigures are the section's handoff figures.
type handoffFigures struct {
	Started   int64   `json:"started"`
	Completed int64   `json:"completed"`
	Failed    int64   `json:"failed"`
	Accepted  int64   `json:"accepted"`
	GapsTotal int64   `json:"gaps_total"`
	Gaps      int     `json:"gaps"`
	GapP50    int64   `json:"gap_p50_ns"`
	GapP99    int64   `json:"gap_p99_ns"`
	GapMax    int64   `json:"gap_max_ns"`
	GapSum    int64   `json:"gap_sum_ns"`
	Bounds    []int64 `json:"gap_bounds_ns"`
	LE        []int64 `json:"gap_le"`
}

// clusterFigures reads srv's cluster section.
func clusterFigures(srv *loop.Server) (nodeFigures, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	snap, err := stats.Take(ctx, srv, stats.ViewSections)
	if err != nil {
		return nodeFigures{}, false
	}
	b, err := json.Marshal(snap.Sections["cluster"])
	if err != nil {
		return nodeFigures{}, false
	}
	var f nodeFigures
	return f, json.Unmarshal(b, &f) == nil
}
