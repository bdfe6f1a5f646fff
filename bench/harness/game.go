package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/gorilla/websocket"

	"github.com/batonrt/baton/bench/loadgen"
)

// Sizes of the game scenario: the flagship issue's 2,000 players in 500 matches in the full
// suite, 200 in 50 with -quick (-game-players overrides both).
const (
	FullGamePlayers  = 2000
	QuickGamePlayers = 200
	// GameMatchSize is the players per match (the server's -players).
	GameMatchSize = 4
	// GameInputRate is the inputs each player sends per second, on its own timer (not in
	// step with the snapshots it receives, so that inputs land at every phase of the tick).
	GameInputRate = 10
	// FullGameMatch and QuickGameMatch are the match lengths: matches end during the
	// window, so the database writer has batches to write and players queue again.
	FullGameMatch  = 15 * time.Second
	QuickGameMatch = 4 * time.Second
)

func gamePlayers(p Params) int {
	switch {
	case p.GamePlayers > 0:
		return p.GamePlayers
	case p.Quick:
		return QuickGamePlayers
	}
	return FullGamePlayers
}

// GameExtra is extra.game of a game run.
type GameExtra struct {
	Players   int `json:"players"`    // players asked for
	MatchSize int `json:"match_size"` // players per match
	// Playing is the players that had received a state when the warm-up began.
	Playing int `json:"playing"`
	// States is the snapshots the players received in the window; InputsSent the inputs
	// they sent, InputsAcked those a snapshot acknowledged in the window, Rejoins the
	// times a player's match ended and it queued again.
	States      uint64 `json:"states"`
	InputsSent  uint64 `json:"inputs_sent"`
	InputsAcked uint64 `json:"inputs_acked"`
	Rejoins     uint64 `json:"rejoins"`
	// Arenas is the match rooms the server listed at the window's end; the tick figures
	// are over each room's life so far (matches that started in the warm-up included),
	// in milliseconds: the worst room's p99 lateness, the median room's, the worst
	// lateness seen, the worst room's p99 tick duration, and the overruns of all rooms.
	Arenas              int     `json:"arenas"`
	TickLateP99WorstMs  float64 `json:"tick_lateness_p99_worst_ms"`
	TickLateP99MedianMs float64 `json:"tick_lateness_p99_median_ms"`
	TickLateMaxMs       float64 `json:"tick_lateness_max_ms"`
	TickDurP99WorstMs   float64 `json:"tick_duration_p99_worst_ms"`
	Overruns            uint64  `json:"overruns"`
	// DBBatches is the writer's batches begun in the window, DBMatches the finished
	// matches they held, DBBatch* their latency (handed to the offload pool until the
	// write returned) in milliseconds.
	DBBatches     int     `json:"db_batches"`
	DBMatches     int     `json:"db_matches"`
	DBBatchP50Ms  float64 `json:"db_batch_p50_ms"`
	DBBatchP99Ms  float64 `json:"db_batch_p99_ms"`
	DBBatchMaxMs  float64 `json:"db_batch_max_ms"`
	DroppedInputs int64   `json:"dropped_inputs"` // the server's inputs over the rate limit, whole run
}

func init() {
	Register(&Scenario{
		Name:    "game",
		Summary: "examples/gameserver with 2,000 WebSocket players in 500 matches of 4: input-to-snapshot latency, tick lateness, server CPU and RSS, database batch latency",
		Spec: `The harness builds examples/gameserver (go build, in its own module; or -gameserver PATH) and
runs it as the server, pinned like the built-in ones, with a fresh -data directory, no bots
(-bots=false), an admin address on a free loopback port (the stats pages are served
there only), the per-address ticket limit and the queue and match caps lifted past the
fleet (every player comes from 127.0.0.1), matches of 4 players that last 15 s (4 s with
-quick) and no score limit. -targets does not apply: there is no net/http baseline. N players (2000 in the
full suite, 200 with -quick, or -game-players) each open GET /ws?player=ID (and &key=, the
player key its first ticket was issued, when it joins again; which queues a
matchmaking ticket and saves the player's profile through the offload pool), wait for the
assignment and play: every 100 ms on its own timer (random phase) a player sends an input
{"dx","dy","seq"}; every tick (20 Hz) the server sends each player the room's state, which
carries per player the seq of the last input applied. When a match ends the server closes
the WebSocket and the player queues again at once. The warm-up starts once (nearly) every
player has received a state. Row input: req/s = inputs acknowledged per second; latency =
input-to-snapshot, from writing an input to reading the first state whose seq for that player
is at least the input's (it includes the wait for the next tick, 0-50 ms, uniform since inputs
are not in step with ticks: p50 near 25 ms and p99 near 50 ms is the floor; what lies above is
the server's and the network's delay); errors: inputs never acknowledged (a full input queue
drops them, a match ending loses them) and failed connects. Row db: the database writer room's
batches begun in the window (finished matches written in one transaction every 250 ms through
the offload pool, from the server's GET /rooms db_batches); latency = from handing the batch to
the pool until the write returned. Tick lateness comes from /debug/baton/rooms (every arena,
p99 over each room's life so far: extra.game). srv µs/req is the server's CPU per
acknowledged input; srv µs/state its CPU per state delivered.`,
		Process: gameProcess,
		Phases: func(p Params) []Phase {
			warm, dur := windows(p, QuickWarmup, 5*time.Second, FullWarmup, FullDuration)
			n := gamePlayers(p)
			match := gameMatchArg(p)
			return []Phase{{
				Name:        fmt.Sprintf("p%d", n),
				Description: fmt.Sprintf("%d players in %d matches of %d (%v each), %d inputs/s each", n, n/GameMatchSize, GameMatchSize, match, GameInputRate),
				Warmup:      warm, Duration: dur,
				Custom: func(ctx context.Context, env *Env) (*Figures, error) { return gameDriver(ctx, env, n) },
			}}
		},
		Summarize: gameSummary,
	})
}

// gameMatchArg is the match length the server is started with, by Params.
func gameMatchArg(p Params) time.Duration {
	if p.GameMatch > 0 {
		return p.GameMatch
	}
	if p.Quick {
		return QuickGameMatch
	}
	return FullGameMatch
}

// gamePlay and gameAdmin are the running gameserver's game and admin addresses, read from
// its output (one gameserver runs at a time: the game scenario's only target).
var gamePlay, gameAdmin atomic.Pointer[string]

// gameProcess builds (or takes) the gameserver binary.
func gameProcess(ctx context.Context, p Params) (*Process, error) {
	proc := &Process{
		Name: "gameserver",
		Path: p.GameServer,
		Args: func(dir string) []string {
			// Every bench player comes from 127.0.0.1: the per-address ticket limit and the
			// queue and match caps are lifted past the fleet's size (the flagship's bounds are
			// for the public internet, not for one load generator).
			return []string{"-addr", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-data", dir, "-bots=false",
				"-addr-rate", "1000000", "-addr-burst", "1000000", "-max-queued", "1000000", "-max-arenas", "1000000",
				"-players", strconv.Itoa(GameMatchSize), "-wait", "30s", "-match", gameMatchArg(p).String(), "-score-limit", "0"}
		},
		Addr: func(line string) (string, bool) {
			// The game address comes first; the admin address (the stats pages are served
			// there only) on the next line, and the process counts as up once both are known.
			if rest, ok := strings.CutPrefix(line, "gameserver: play at http://"); ok {
				addr, _, _ := strings.Cut(rest, "/")
				gamePlay.Store(&addr)
				return "", false
			}
			rest, ok := strings.CutPrefix(line, "gameserver: dashboard at http://")
			if !ok {
				return "", false
			}
			admin, _, _ := strings.Cut(rest, "/")
			gameAdmin.Store(&admin)
			if play := gamePlay.Load(); play != nil {
				return *play, true
			}
			return "", false
		},
	}
	if proc.Path != "" {
		return proc, nil
	}
	path, release, err := BuildGameServer(ctx)
	if err != nil {
		return nil, err
	}
	proc.Path, proc.Release = path, release
	return proc, nil
}

// BuildGameServer builds examples/gameserver (found from the working directory upwards)
// with the go toolchain into a temporary directory and returns the binary's path and a
// function that removes it. Any goroutine.
func BuildGameServer(ctx context.Context) (string, func(), error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", nil, errors.New("the go toolchain is not on PATH to build examples/gameserver (or give -gameserver PATH)")
	}
	src, err := findGameServer()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "baton-bench-gameserver-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "gameserver")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building examples/gameserver: %v: %s", err, bytes.TrimSpace(out))
	}
	return bin, func() { _ = os.RemoveAll(dir) }, nil
}

// findGameServer returns the examples/gameserver directory above the working directory.
func findGameServer() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		src := filepath.Join(dir, "examples", "gameserver")
		if _, err := os.Stat(filepath.Join(src, "go.mod")); err == nil {
			return src, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no examples/gameserver/go.mod above %s (run from the repository, or give -gameserver PATH)", wd)
		}
	}
}

// gameShards spreads the players' latency recording over this many locked histograms.
const gameShards = 16

type gameShard struct {
	mu  sync.Mutex
	lat *hdrhistogram.Histogram // input-to-snapshot, µs
}

// gameFleet is the simulated players of one run.
type gameFleet struct {
	host      string
	measuring atomic.Bool
	stopping  atomic.Bool
	shards    [gameShards]gameShard

	playing                      atomic.Int64 // players that have received a state (ever)
	states, sent, acked, rejoins atomic.Uint64
	unacked, connErr             atomic.Uint64

	mu    sync.Mutex
	conns map[*websocket.Conn]struct{} // open connections, closed by stop
}

// gamePlayer is one player's in-flight inputs.
type gamePlayer struct {
	mu      sync.Mutex
	pending []gameInput
}

type gameInput struct {
	seq  uint32
	at   time.Time
	inWd bool // sent in the window
}

// gameDriver connects the players, waits until they play, and measures a window.
func gameDriver(ctx context.Context, env *Env, players int) (*Figures, error) {
	f := &gameFleet{host: env.Host, conns: map[*websocket.Conn]struct{}{}}
	for i := range f.shards {
		f.shards[i].lat = loadgen.NewHistogram()
	}
	var wg sync.WaitGroup
	for i := range players {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.play(i)
		}()
	}
	defer func() {
		f.stop()
		wg.Wait()
	}()
	// Players join over a few seconds (each ticket saves a profile through the pool).
	want := int64(players) * 95 / 100
	deadline := time.Now().Add(30*time.Second + time.Duration(players)*5*time.Millisecond)
	for f.playing.Load() < max(want, 1) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d players got a state before the deadline (%d connect errors)", f.playing.Load(), players, f.connErr.Load())
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	ex := GameExtra{Players: players, MatchSize: GameMatchSize, Playing: int(f.playing.Load())}
	if err := sleep(ctx, env.Warmup); err != nil {
		return nil, err
	}
	f.measuring.Store(true)
	env.MeasureStart()
	start := time.Now()
	if err := sleep(ctx, env.Duration); err != nil {
		return nil, err
	}
	env.MeasureEnd()
	f.measuring.Store(false)
	end := time.Now()

	var rooms struct {
		Rooms []struct {
			Name     string `json:"name"`
			Overruns uint64 `json:"overruns"`
			Lateness struct {
				P99 float64 `json:"p99_seconds"`
				Max float64 `json:"max_seconds"`
			} `json:"tick_lateness"`
			Duration struct {
				P99 float64 `json:"p99_seconds"`
			} `json:"tick_duration"`
		} `json:"rooms"`
	}
	admin := gameAdmin.Load()
	if admin == nil {
		return nil, errors.New("the gameserver did not say its admin address")
	}
	if err := getJSON(ctx, "http://"+*admin+"/debug/baton/rooms?top=1000000", &rooms); err != nil {
		return nil, err
	}
	var app struct {
		Dropped int64 `json:"dropped_inputs"`
		Batches []struct {
			At      int64   `json:"at_unix_ms"`
			Ms      float64 `json:"ms"`
			Matches int     `json:"matches"`
			Failed  bool    `json:"failed"`
		} `json:"db_batches"`
	}
	if err := getJSON(ctx, env.Base()+"/rooms", &app); err != nil {
		return nil, err
	}
	f.stop()
	wg.Wait()

	var lateP99 []float64
	for _, r := range rooms.Rooms {
		if !strings.HasPrefix(r.Name, "arena-") {
			continue
		}
		ex.Arenas++
		lateP99 = append(lateP99, r.Lateness.P99*1e3)
		ex.TickLateMaxMs = max(ex.TickLateMaxMs, r.Lateness.Max*1e3)
		ex.TickDurP99WorstMs = max(ex.TickDurP99WorstMs, r.Duration.P99*1e3)
		ex.Overruns += r.Overruns
	}
	if len(lateP99) > 0 {
		slices.Sort(lateP99)
		ex.TickLateP99WorstMs = lateP99[len(lateP99)-1]
		ex.TickLateP99MedianMs = lateP99[len(lateP99)/2]
	}
	db := loadgen.NewHistogram()
	dbErr := map[string]uint64{}
	for _, b := range app.Batches {
		at := time.UnixMilli(b.At)
		if at.Before(start) || !at.Before(end) {
			continue
		}
		ex.DBBatches++
		ex.DBMatches += b.Matches
		_ = db.RecordValue(max(int64(b.Ms*1e3), 1))
		if b.Failed {
			dbErr["failed"]++
		}
	}
	if ex.DBBatches > 0 {
		ex.DBBatchP50Ms = float64(db.ValueAtQuantile(50)) / 1e3
		ex.DBBatchP99Ms = float64(db.ValueAtQuantile(99)) / 1e3
		ex.DBBatchMaxMs = float64(db.Max()) / 1e3
	}
	ex.DroppedInputs = app.Dropped
	ex.States, ex.InputsSent, ex.InputsAcked, ex.Rejoins = f.states.Load(), f.sent.Load(), f.acked.Load(), f.rejoins.Load()

	lat := loadgen.NewHistogram()
	for i := range f.shards {
		lat.Merge(f.shards[i].lat)
	}
	inErr := map[string]uint64{}
	if n := f.unacked.Load(); n > 0 {
		inErr["unacked"] = n
	}
	if n := f.connErr.Load(); n > 0 {
		inErr["connect"] = n
	}
	in := &loadgen.GroupResult{Name: "input", Conns: players, Rate: float64(players * GameInputRate),
		Duration: end.Sub(start), Sent: ex.InputsSent, Requests: ex.InputsAcked, Latency: lat, Errors: inErr}
	dbg := &loadgen.GroupResult{Name: "db", Conns: 1, Rate: float64(time.Second / (250 * time.Millisecond)),
		Duration: end.Sub(start), Sent: uint64(ex.DBBatches), Requests: uint64(ex.DBBatches), Latency: db, Errors: dbErr}
	return &Figures{
		Groups: []*loadgen.GroupResult{in, dbg}, Modes: map[string]string{"input": "ws", "db": "batch"},
		Work: ex.States, Unit: "state", Extra: map[string]any{"game": ex},
	}, nil
}

// stop closes every connection and makes the players return. Any goroutine.
func (f *gameFleet) stop() {
	f.stopping.Store(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
	}
}

// track adds c to the open connections, or closes it if the fleet is stopping.
func (f *gameFleet) track(c *websocket.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping.Load() {
		_ = c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *gameFleet) untrack(c *websocket.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	_ = c.Close()
}

// play is player i: join, play until the match ends, join again, until the fleet stops.
func (f *gameFleet) play(i int) {
	id := "bench" + strconv.Itoa(i)
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	sh := &f.shards[i%gameShards]
	everPlayed := false
	var key string // the player's key, issued with its first ticket: later joins must show it
	for matches := 0; !f.stopping.Load(); matches++ {
		q := url.Values{"player": {id}}
		if key != "" {
			q.Set("key", key)
		}
		u := url.URL{Scheme: "ws", Host: f.host, Path: "/ws", RawQuery: q.Encode()}
		c, resp, err := d.Dial(u.String(), nil)
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		if err != nil {
			if f.stopping.Load() {
				return
			}
			f.connErr.Add(1)
			time.Sleep(200 * time.Millisecond) // e.g. 429 over the ticket rate limit
			continue
		}
		if !f.track(c) {
			return
		}
		if matches > 0 && f.measuring.Load() {
			f.rejoins.Add(1)
		}
		f.session(c, id, sh, &everPlayed, &key)
		f.untrack(c)
	}
}

// session plays one match on c: an input writer on its own timer, states read here.
func (f *gameFleet) session(c *websocket.Conn, id string, sh *gameShard, everPlayed *bool, key *string) {
	p := &gamePlayer{}
	done := make(chan struct{})
	var writer sync.WaitGroup
	defer func() {
		close(done)
		writer.Wait()
		if f.measuring.Load() {
			p.mu.Lock()
			for _, in := range p.pending {
				if in.inWd {
					f.unacked.Add(1)
				}
			}
			p.mu.Unlock()
		}
	}()
	me := []byte(`{"id":"` + id + `"`)
	seqKey := []byte(`"seq":`)
	assigned := false
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		switch {
		case bytes.HasPrefix(msg, []byte(`{"type":"ticket"`)) && *key == "":
			var hello struct {
				PlayerKey string `json:"player_key"`
			}
			if json.Unmarshal(msg, &hello) == nil && hello.PlayerKey != "" {
				*key = hello.PlayerKey
			}
			continue
		case bytes.HasPrefix(msg, []byte(`{"type":"state"`)):
		case bytes.HasPrefix(msg, []byte(`{"type":"assigned"`)) && !assigned:
			assigned = true
			writer.Add(1)
			go func() {
				defer writer.Done()
				f.inputs(c, p, done)
			}()
			continue
		default:
			continue
		}
		now := time.Now()
		if !*everPlayed {
			*everPlayed = true
			f.playing.Add(1)
		}
		measuring := f.measuring.Load()
		if measuring {
			f.states.Add(1)
		}
		j := bytes.Index(msg, me)
		if j < 0 {
			continue
		}
		k := bytes.Index(msg[j:], seqKey)
		if k < 0 {
			continue
		}
		rest := msg[j+k+len(seqKey):]
		e := 0
		for e < len(rest) && rest[e] >= '0' && rest[e] <= '9' {
			e++
		}
		ack, err := strconv.ParseUint(string(rest[:e]), 10, 32)
		if err != nil {
			continue
		}
		p.mu.Lock()
		n := 0
		for _, in := range p.pending {
			if in.seq > uint32(ack) {
				p.pending[n] = in
				n++
				continue
			}
			if measuring && in.inWd {
				sh.mu.Lock()
				_ = sh.lat.RecordValue(max(now.Sub(in.at).Microseconds(), 1))
				sh.mu.Unlock()
				f.acked.Add(1)
			}
		}
		p.pending = p.pending[:n]
		p.mu.Unlock()
	}
}

// inputs sends GameInputRate inputs a second on c until done, starting at a random phase.
func (f *gameFleet) inputs(c *websocket.Conn, p *gamePlayer, done <-chan struct{}) {
	every := time.Second / GameInputRate
	first := time.NewTimer(rand.N(every))
	select {
	case <-first.C:
	case <-done:
		first.Stop()
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var seq uint32
	buf := make([]byte, 0, 64)
	for {
		seq++
		dx := 1
		if seq/20%2 == 1 { // back and forth across the arena
			dx = -1
		}
		buf = append(buf[:0], `{"dx":`...)
		buf = strconv.AppendInt(buf, int64(dx), 10)
		buf = append(buf, `,"dy":0,"seq":`...)
		buf = strconv.AppendUint(buf, uint64(seq), 10)
		buf = append(buf, '}')
		inWd := f.measuring.Load()
		p.mu.Lock()
		if len(p.pending) < 64 { // an input never acknowledged is not kept for ever
			p.pending = append(p.pending, gameInput{seq: seq, at: time.Now(), inWd: inWd})
		}
		p.mu.Unlock()
		if inWd {
			f.sent.Add(1)
		}
		if c.WriteMessage(websocket.TextMessage, buf) != nil {
			return
		}
		select {
		case <-t.C:
		case <-done:
			return
		}
	}
}

func gameSummary(s *ScenarioResult) []SummaryItem {
	if len(s.Phases) == 0 {
		return nil
	}
	var out []SummaryItem
	for _, r := range s.Phases[0].Runs {
		ex, ok := r.Extra["game"].(GameExtra)
		if !ok {
			continue
		}
		if g := r.Group("input"); g != nil && g.Latency.Count > 0 {
			out = append(out, SummaryItem{Name: "game: input-to-snapshot p50", Value: float64(g.Latency.P50) / 1e3, Unit: "ms",
				Note: fmt.Sprintf("p99 %s, max %s over %d acknowledged inputs (floor: the wait for the next 50 ms tick)", fmtUs(g.Latency.P99), fmtUs(g.Latency.Max), g.Latency.Count)})
			out = append(out, SummaryItem{Name: "game: input-to-snapshot p99", Value: float64(g.Latency.P99) / 1e3, Unit: "ms"})
		}
		out = append(out, SummaryItem{Name: "game: tick lateness p99 (worst arena)", Value: ex.TickLateP99WorstMs, Unit: "ms",
			Note: fmt.Sprintf("median arena %.2f ms, max %.2f ms over %d arenas; %d overruns", ex.TickLateP99MedianMs, ex.TickLateMaxMs, ex.Arenas, ex.Overruns)})
		if r.Server != nil {
			out = append(out, SummaryItem{Name: "game: server CPU", Value: 100 * r.Server.CPUUtil, Unit: "% of a core",
				Note: fmt.Sprintf("RSS %.1f MiB at the window's end, peak %.1f MiB", float64(r.Server.RSSEnd)/(1<<20), float64(r.Server.RSSPeak)/(1<<20))})
		}
		if ex.DBBatches > 0 {
			out = append(out, SummaryItem{Name: "game: database batch p99", Value: ex.DBBatchP99Ms, Unit: "ms",
				Note: fmt.Sprintf("p50 %.2f ms, max %.2f ms over %d batches of %d matches", ex.DBBatchP50Ms, ex.DBBatchMaxMs, ex.DBBatches, ex.DBMatches)})
		}
	}
	return out
}
