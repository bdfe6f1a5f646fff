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
// their state across handoffs, with the routes a game written to docs/client-protocol.md
// has (join, play over WebSocket with input sequence numbers and acks, close 4001 when the
// room moves) and a log of every tick.
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

// gameInput is one player input as the room queues it.
type gameInput struct {
	Player string `json:"p"`
	Seq    uint64 `json:"s"`
	Value  int64  `json:"v"`
}

// game is a room's state, all of it moved by the snapshot: the ticks it has run, and per
// player the last input sequence number taken (queued, answered with an ack), the last
// applied by a tick, and the sum of the values applied. Loop-confined.
type game struct {
	Ticks   uint64            `json:"ticks"`
	Taken   map[string]uint64 `json:"taken"`
	Applied map[string]uint64 `json:"applied"`
	Sum     map[string]int64  `json:"sum"`
}

// clientMsg is a message from the client (docs/client-protocol.md, 4.).
type clientMsg struct {
	Type  string `json:"type"`
	Seq   uint64 `json:"seq"`
	Input int64  `json:"input"`
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
		g := &game{Taken: map[string]uint64{}, Applied: map[string]uint64{}, Sum: map[string]int64{}}
		var line []byte
		cfg := room.Config[gameInput]{Name: name, Period: gamePeriod, Late: room.CatchUp(1000),
			Tick: func(r *room.Room[gameInput], t *room.Tick[gameInput]) {
				start := machineNow()
				games[name] = g // the latest room of the name here (after a restore, before its first tick, it is not listed)
				t.DrainInputs(func(in gameInput) {
					if in.Seq == g.Applied[in.Player]+1 { // once each, in order (the queue holds each seq once)
						g.Applied[in.Player] = in.Seq
						g.Sum[in.Player] += in.Value
					}
				})
				g.Ticks++
				line = fmt.Appendf(line[:0], "%s %s %d %d %d %d %d\n", id, name, r.Token(), start, machineNow(), t.N, g.Ticks)
				_, _ = tickLog.Write(line)
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
	srv.Handle("GET /play/{room}", func(c *loop.Ctx) {
		name := c.PathValue("room")
		var g *game
		r, seat, ok := room.Admit(c, name, func(l *loop.Loop) (*room.Room[gameInput], error) {
			return room.New(l, config(name))
		})
		if !ok {
			return
		}
		// KeepOnDrain: the drain does not close the players with 1001 at once; each is
		// closed when its room has moved (4001) or, if it could not move, stopped (1001).
		conn, err := ws.Upgrade(c, ws.Config{KeepOnDrain: true, CheckOrigin: func(*loop.Ctx, string) bool { return true }})
		if err != nil {
			return
		}
		closeFor := func(err error) {
			switch {
			case errors.Is(err, room.ErrMoved):
				reason, _ := json.Marshal(map[string]string{"room": name})
				_ = conn.Close(room.CloseMoved, string(reason))
			case err != nil: // the room stopped (the node drains without handoff)
				_ = conn.Close(1001, "server going away")
			}
		}
		if err := r.Attach(&c.Task); err != nil {
			closeFor(err)
			return
		}
		player := seat.Player
		// The room's state: the one its first tick here listed, or (a room made or
		// restored here that has not ticked yet) wait for it.
		for g = games[name]; g == nil; g = games[name] {
			if c.Sleep(5*time.Millisecond) != nil {
				closeFor(c.Err())
				return
			}
		}
		hello, _ := json.Marshal(map[string]any{"type": "joined", "room": name, "node": id, "token": r.Token(),
			"player": player, "ack": g.Taken[player], "resumed": false})
		if conn.WriteText(hello) != nil {
			return
		}
		var out []byte
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				break
			}
			var m clientMsg
			if json.Unmarshal(data, &m) != nil || m.Type != "input" || m.Seq == 0 {
				_ = conn.WriteText([]byte(`{"type":"error","error":"not an input"}`))
				continue
			}
			taken := g.Taken[player]
			switch {
			case m.Seq <= taken: // a resend of an input taken: acked again, not taken twice
				out = fmt.Appendf(out[:0], `{"type":"ack","seq":%d}`, m.Seq)
			case m.Seq > taken+1:
				out = fmt.Appendf(out[:0], `{"type":"retry","seq":%d,"ack":%d,"after_ms":0,"error":"out of order"}`, m.Seq, taken)
			default:
				switch err := r.Input(gameInput{Player: player, Seq: m.Seq, Value: m.Input}); {
				case err == nil:
					g.Taken[player] = m.Seq
					out = fmt.Appendf(out[:0], `{"type":"ack","seq":%d}`, m.Seq)
				case errors.Is(err, room.ErrHandingOff), errors.Is(err, room.ErrInputFull):
					out = fmt.Appendf(out[:0], `{"type":"retry","seq":%d,"ack":%d,"after_ms":50,"error":%q}`, m.Seq, taken, err.Error())
				default: // moved or stopped: the close follows
					out = out[:0]
				}
			}
			if len(out) > 0 && conn.WriteText(out) != nil {
				break
			}
		}
		closeFor(c.Err())
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
