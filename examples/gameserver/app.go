package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/examples/gameserver/game"
	"github.com/batonrt/baton/examples/gameserver/store"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/health"
	"github.com/batonrt/baton/loop/ratelimit"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/ws"
	"github.com/batonrt/baton/offload"
)

// options are the command line's settings; tests fill them directly.
type options struct {
	Loop       loop.Config    // the server (Addr from -addr, the rest from BATON_*)
	Admin      string         // admin address for stats and health; "" turns it off
	DB         string         // the SQLite file
	Bots       bool           // fill short matches with bots and keep bot arenas running
	BotRooms   int            // arenas of bots only, restarted when they end (with Bots)
	Size       int            // players per match
	Wait       time.Duration  // longest wait for a full match before bots fill it
	Match      time.Duration  // match length
	ScoreLimit int            // points that end a match (0: none)
	Heavy      bool           // one bot arena burns heavyBurn per tick
	BlockLoop  bool           // a background task blocks the loop now and then
	MaxQueued  int            // tickets queued at most: past it POST /tickets and /ws answer 503 (0: defaultMaxQueued)
	MaxArenas  int            // live matches formed from tickets at most; the rest wait queued (0: defaultMaxArenas)
	AddrRate   float64        // new tickets per second per client address (0: defaultAddrRate)
	AddrBurst  int            // and at once (0: defaultAddrBurst)
	TicketAge  time.Duration  // a queued ticket expires after this long (0: maxTicketAge)
	PlayerTTL  time.Duration  // a profile that never finished a match is deleted after this long (0: defaultPlayerTTL)
	Drain      time.Duration  // the graceful shutdown's deadline (0: drainTimeout)
	DBBusy     time.Duration  // how long a write waits for a locked database (0: store's default)
	Log        *slog.Logger   // nil: slog.Default()
	Arena      game.Config    // filled from the above by newApp
	Etcd       []string       // cluster: etcd endpoints (-etcd); empty: one process
	Node       string         // cluster: this node's ID (-node)
	Public     string         // cluster: the address players reach it at (-public)
	SeatKey    []byte         // cluster: the seat key every node shares (GAMESERVER_SEAT_KEY)
	Cluster    *clusterConfig // nil: one process on the embedded directory; else a node of a shared one (-etcd)
}

const (
	tickPeriod   = 50 * time.Millisecond   // 20 Hz: the arenas' tick and snapshot rate
	dbPeriod     = 250 * time.Millisecond  // how often finished matches are written, in one batch
	heavyBurn    = 30 * time.Millisecond   // CPU a heavy arena burns per tick (-heavy-room)
	blockEvery   = 10 * time.Second        // -block-loop: how often the loop is blocked
	blockFor     = 1200 * time.Millisecond // -block-loop: for how long (past /healthz's 1 s: it fails, naming the task)
	keepEnded    = 30 * time.Second        // an ended arena's final state stays readable this long
	maxLongPoll  = 25 * time.Second        // longest ?wait of a long-poll
	maxTicketAge = 2 * time.Minute         // a queued ticket expires after this long (-ticket-age)
	maxDT        = 250 * time.Millisecond  // a tick never simulates more than this (a stalled loop)

	defaultMaxQueued = 1000             // -max-queued
	defaultMaxArenas = 250              // -max-arenas: 1,000 players in matches of 4
	defaultAddrRate  = 2.0              // -addr-rate: new tickets a second per client address
	defaultAddrBurst = 10               // -addr-burst
	defaultPlayerTTL = 10 * time.Minute // -unplayed-ttl
)

// app is the game server: loop-owned state shared by handlers and ticks without locks.
// Every field below srv is touched only on the loop (handlers, ticks, posted functions).
type app struct {
	opts   options
	srv    *loop.Server
	health *health.Checker // /healthz and /readyz; safe for concurrent use
	st     *store.Store
	log    *slog.Logger

	addrLimit   *ratelimit.Limiter // POST /tickets and new tickets over WebSocket, per client address (first)
	ticketLimit *ratelimit.Limiter // the same per player, once the player's key is checked
	inputLimit  *ratelimit.Limiter // inputs, per player, once the ticket's secret is checked

	mm        *game.Matchmaker
	waits     map[string]*loop.Future[assignment] // by ticket id
	arenas    map[string]*arena                   // by match id, running and recently ended
	handed    map[string]*arena                   // matches handed to this node, until adopted (arenaOf); cluster mode with a HandoffKey
	live      int                                 // arenas not yet ended
	matches   int                                 // of those, matches formed from tickets (capped: MaxArenas)
	claiming  map[game.PlayerID]bool              // players whose new ticket is between its checks and Enqueue
	db        *room.Room[store.Finished]          // the writer: finished matches are its inputs
	backlog   []store.Finished                    // finished matches not yet written, oldest first
	writing   *dbWrite                            // the batch in the pool, or nil
	dbDrain   bool                                // the drain began: the writer stops once all is written
	nextMatch uint64
	prefix    string // match ids are prefix + counter: unique across restarts
	index     []byte // the page, with the admin address (setAdmin)

	dbBatches     []dbBatch    // the last maxDBBatches batches written (GET /rooms shows them)
	recorded      atomic.Int64 // matches written to the database (tests and logs read it)
	droppedInputs atomic.Int64 // inputs over the rate limit, dropped
}

// assignment is what a ticket's long-poll or WebSocket learns: the match to play.
type assignment struct {
	Ticket string `json:"ticket"`
	Match  string `json:"match"`
	State  string `json:"state"` // "/rooms/<match>/state", for clients without WebSocket
	Input  string `json:"input"` // "/rooms/<match>/input"
}

// errDraining resolves the waits of tickets still queued when the drain begins;
// errExpired those of tickets queued longer than TicketAge.
var (
	errDraining = errors.New("gameserver: server is draining")
	errExpired  = errors.New("gameserver: the ticket expired before a match had room for it")
)

// withDefaults fills the zero bounds with their defaults.
func (o options) withDefaults() options {
	if o.MaxQueued <= 0 {
		o.MaxQueued = defaultMaxQueued
	}
	if o.MaxArenas <= 0 {
		o.MaxArenas = defaultMaxArenas
	}
	if o.AddrRate <= 0 {
		o.AddrRate = defaultAddrRate
	}
	if o.AddrBurst <= 0 {
		o.AddrBurst = defaultAddrBurst
	}
	if o.TicketAge <= 0 {
		o.TicketAge = maxTicketAge
	}
	if o.PlayerTTL <= 0 {
		o.PlayerTTL = defaultPlayerTTL
	}
	return o
}

// newApp builds the server on opts and an open store; ListenAndServe is the caller's.
func newApp(opts options, st *store.Store, log *slog.Logger) (*app, error) {
	ac := game.DefaultConfig()
	ac.MaxPlayers = max(opts.Size, 1)
	ac.Duration = opts.Match
	ac.ScoreLimit = opts.ScoreLimit
	if err := ac.Validate(); err != nil {
		return nil, err
	}
	opts.Arena = ac
	mm, err := game.NewMatchmaker(game.MatchmakerConfig{Size: opts.Size, MaxWait: opts.Wait, FillWithBots: opts.Bots})
	if err != nil {
		return nil, err
	}
	if err := opts.Loop.Validate(); err != nil {
		return nil, err
	}
	if opts.Loop.Shards > 1 { // its maps, rooms and writer live on one loop, without locks
		return nil, fmt.Errorf("the game server runs on one loop; Shards (BATON_SHARDS) is %d", opts.Loop.Shards)
	}
	opts = opts.withDefaults()
	addrCfg := ratelimit.Config{Rate: opts.AddrRate, Burst: opts.AddrBurst}
	if err := addrCfg.Validate(); err != nil {
		return nil, fmt.Errorf("-addr-rate and -addr-burst: %w", err)
	}
	a := &app{
		opts: opts, st: st, log: log, mm: mm,
		srv:         loop.New(opts.Loop),
		addrLimit:   ratelimit.New(addrCfg),
		ticketLimit: ratelimit.New(ratelimit.Config{Rate: 1, Burst: 5}),
		inputLimit:  ratelimit.New(ratelimit.Config{Rate: 30, Burst: 30}),
		waits:       map[string]*loop.Future[assignment]{},
		arenas:      map[string]*arena{},
		claiming:    map[game.PlayerID]bool{},
		prefix:      "m" + strconv.FormatInt(time.Now().UnixMilli(), 36) + "-",
	}
	if a.health, err = health.New(a.srv, health.Config{}); err != nil {
		return nil, err
	}
	if cl := opts.Cluster; cl != nil {
		// Room names are the cluster's: this node's own rooms (the writer, matches from its
		// tickets, bot arenas) carry its ID.
		a.prefix = cl.Node + "-" + a.prefix
		if err := room.UseDirectory(a.srv, cl.Directory, room.NodeConfig{
			Directory: directory.Config{Node: cl.Node, PublicAddr: cl.Public}, Seats: cl.Seats, HandoffKey: cl.HandoffKey}); err != nil {
			return nil, err
		}
		if cl.HandoffKey != nil {
			a.handed = map[string]*arena{}
			if err := room.AcceptHandoffs(a.srv, a.handedConfig); err != nil {
				return nil, err
			}
		}
		a.clusterRoutes()
	}
	a.routes()
	a.srv.OnStart(a.start) // rooms are made on the loop, before its first connection
	return a, nil
}

// routes registers the HTTP and WebSocket routes on the main port.
func (a *app) routes() {
	s := a.srv
	s.Handle("GET /", a.serveIndex) // exactly "/": the router matches whole paths
	s.Handle("GET /baton.mjs", a.serveClient)
	s.Handle("POST /tickets", a.addrLimit.Middleware(addrKey)(a.postTicket))
	s.Handle("GET /tickets/{id}", a.getTicket)
	s.Handle("DELETE /tickets/{id}", a.deleteTicket)
	s.Handle("GET /ws", a.serveWS)
	_ = s.AddStats(ws.Section) // the websockets page answers before the first upgrade
	s.Handle("GET /rooms/{id}/state", a.roomState)
	s.Handle("POST /rooms/{id}/input", a.postInput) // limited per player once authenticated
	s.Handle("GET /leaderboard", a.leaderboard)
	s.Handle("GET /players/{id}", a.profile)
	s.Handle("GET /rooms", a.listRooms)
	// The stats pages (goroutine stacks with ?stacks=1) and the dashboard are served on the
	// admin address only (main.go), never on the public game port.
	a.health.Mount()
}

// start runs on the loop (OnStart) before it accepts a connection: the writer, the
// matchmaker, bot arenas, the drain hook and the demo switches. Without the writer the
// server does not start: ListenAndServe returns the error.
func (a *app) start(l *loop.Loop) error {
	db, err := room.New(l, room.Config[store.Finished]{
		Name:       a.writerName(),
		Period:     dbPeriod,
		Tick:       a.writeTick,
		InputQueue: 4096,
		InputFull:  room.RefuseInput, // a result is never dropped: it goes to the backlog
		OnDrain:    func(*room.Room[store.Finished], time.Time) { a.dbDrain = true },
	})
	if err != nil {
		return fmt.Errorf("the database writer: %w", err)
	}
	a.db = db
	l.Every("matchmaker", 100*time.Millisecond, a.matchmake)
	l.Every("player-sweep", min(max(a.opts.PlayerTTL/2, dbPeriod), time.Minute), a.sweepPlayers)
	l.OnDrain(a.beginDrain)
	if a.opts.Bots {
		for i := range a.opts.BotRooms {
			a.startBotArena(a.opts.Heavy && i == 0)
		}
	}
	if a.opts.BlockLoop {
		// The bad pattern, on purpose: a blocking call on the loop. The stall detector logs
		// it with this task's name and stack, and every room's lateness shows it.
		l.Every("block-loop-demo", blockEvery, func(*loop.Task) { time.Sleep(blockFor) })
	}
	return nil
}

// writerName is the writer room's name: "db-writer", with the node's ID in a cluster
// (every node has its writer and its database).
func (a *app) writerName() string {
	if a.opts.Cluster != nil {
		return a.opts.Cluster.Node + "-db-writer"
	}
	return "db-writer"
}

// beginDrain runs on the loop when Shutdown begins (OnDrain): no more matches; queued
// tickets are cancelled and their waiters answered 503. The arenas end their matches in
// their own OnDrain; the writer writes everything before it stops.
func (a *app) beginDrain(time.Time) {
	for id, f := range a.waits {
		if t, ok := a.mm.Ticket(id); ok && t.State == game.TicketQueued {
			a.mm.Cancel(id, time.Now())
			f.Resolve(assignment{}, errDraining)
		}
	}
}

// matchmake forms matches from the queue: an Every task on the loop.
func (a *app) matchmake(t *loop.Task) {
	now := t.Loop().Now()
	if !a.srv.Draining().Done() {
		for _, tk := range a.mm.Expire(now, a.opts.TicketAge) {
			if f := a.waits[tk.ID]; f != nil {
				f.Resolve(assignment{}, errExpired)
			}
		}
		for _, g := range a.mm.FormAtMost(now, a.opts.MaxArenas-a.matches) {
			a.startArena(g, now)
		}
	}
	for _, id := range a.mm.Forget(now) {
		delete(a.waits, id)
	}
	for id, ar := range a.arenas {
		if ar.ended && now.Sub(ar.endedAt) > keepEnded {
			delete(a.arenas, id)
		}
	}
}

// newMatchID returns a match id unique across restarts of this database.
func (a *app) newMatchID() string {
	a.nextMatch++
	return a.prefix + strconv.FormatUint(a.nextMatch, 10)
}

// startArena starts a match for a group and answers its tickets' waiters.
func (a *app) startArena(g game.Group, now time.Time) {
	ar, err := a.newArena(a.newMatchID(), false, false)
	if err != nil {
		for _, tk := range g.Tickets {
			a.mm.Cancel(tk.ID, now)
			if f := a.waits[tk.ID]; f != nil {
				f.Resolve(assignment{}, err)
			}
		}
		a.log.Warn("gameserver: cannot start a match", "err", err)
		return
	}
	ar.fromTickets, ar.started = true, now
	a.matches++
	for _, tk := range g.Tickets {
		_ = ar.m.Join(tk.Player, tk.Name, false)
		ar.seats[tk.Player] = tk // its secret is the player's credential in this match
	}
	for i := range g.Bots {
		id := game.PlayerID(fmt.Sprintf("bot-%d", i+1))
		_ = ar.m.Join(id, botName(i), true)
		ar.bots = append(ar.bots, id)
	}
	a.mm.Assign(g, ar.id, now)
	for _, tk := range g.Tickets {
		if f := a.waits[tk.ID]; f != nil {
			f.Resolve(assignmentFor(tk.ID, ar.id), nil)
		}
	}
}

func assignmentFor(ticket, match string) assignment {
	return assignment{Ticket: ticket, Match: match, State: "/rooms/" + match + "/state", Input: "/rooms/" + match + "/input"}
}

var botNames = []string{"Ada", "Bit", "Cog", "Dot", "Eve", "Fox", "Gus", "Hex"}

func botName(i int) string { return "bot " + botNames[i%len(botNames)] }

// startBotArena starts an arena of bots only, which starts another when it ends, so the
// page and the stats have something to show at once. A heavy one burns heavyBurn per tick.
func (a *app) startBotArena(heavy bool) {
	if a.srv.Draining().Done() {
		return
	}
	id := a.newMatchID()
	if heavy {
		id += "-heavy"
	}
	ar, err := a.newArena(id, true, heavy)
	if err != nil {
		a.log.Warn("gameserver: cannot start a bot arena", "err", err)
		return
	}
	for i := range a.opts.Arena.MaxPlayers {
		pid := game.PlayerID(fmt.Sprintf("bot-%d", i+1))
		_ = ar.m.Join(pid, botName(i), true)
		ar.bots = append(ar.bots, pid)
	}
}

// submit hands a finished match to the writer; a refusal (queue full, writer stopped)
// keeps it in the backlog, which the writer also drains. Loop-confined.
func (a *app) submit(f store.Finished) {
	if a.db == nil || a.db.Input(f) != nil {
		a.backlog = append(a.backlog, f)
	}
}

// writeTick is the writer room's tick: every dbPeriod it writes the finished matches
// queued since the last tick in one transaction, through the offload pool (the tick
// parks; the loop goes on). The batch stays in the backlog until its transaction has
// committed, so a failed batch is retried and a write cut short by the drain's deadline
// (the tick is unwound while it parks) loses nothing: run counts what is left. While
// draining it stops once every arena has ended and everything is written: the drain
// waits for it.
func (a *app) writeTick(r *room.Room[store.Finished], t *room.Tick[store.Finished]) {
	t.DrainInputs(func(f store.Finished) { a.backlog = append(a.backlog, f) })
	if n := len(a.backlog); n > 0 {
		w := &dbWrite{n: n, batch: slices.Clone(a.backlog), done: make(chan struct{})}
		a.writing = w
		began := time.Now()
		_, err := offload.Do(t.Task, w.run(a.st))
		a.noteBatch(began, n, err)
		if err != nil {
			if errors.Is(err, room.ErrRoomStopped) || errors.Is(err, context.Canceled) {
				return // the outcome is w's: run reads it once the loop has stopped
			}
			a.writing = nil
			a.log.Warn("gameserver: writing finished matches failed; retrying", "matches", n, "err", err)
		} else {
			a.writing = nil
			a.written(w)
		}
	}
	if a.dbDrain && a.live == 0 && len(a.backlog) == 0 {
		r.Stop()
	}
}

// dbWrite is one batch handed to the offload pool: the first n matches of the backlog.
// The worker sets recorded and err, then closes done; the loop (or run, once the loop has
// stopped) reads them after done is closed, or after offload.Do returned normally.
type dbWrite struct {
	n        int
	batch    []store.Finished
	recorded int
	err      error
	done     chan struct{}
}

// run returns the function the pool runs.
func (w *dbWrite) run(st *store.Store) func(ctx context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		defer close(w.done)
		w.recorded, w.err = st.RecordMatches(ctx, w.batch)
		return w.recorded, w.err
	}
}

// written takes a committed batch out of the backlog (matches finished while it was
// written were appended behind it) and counts it. Loop-confined, or run's once the loop
// has stopped.
func (a *app) written(w *dbWrite) {
	a.backlog = append(a.backlog[:0], a.backlog[w.n:]...)
	a.recorded.Add(int64(w.recorded))
}

// settleWrite is called by run once the loop has stopped: a batch the drain's deadline cut
// short may still be in the pool (its context is cancelled, so it ends soon). It waits for
// it and, if it committed after all, takes it out of the backlog, so that what is left
// there is exactly what was not written.
func (a *app) settleWrite() {
	w := a.writing
	if w == nil {
		return
	}
	<-w.done
	a.writing = nil
	if w.err == nil {
		a.written(w)
	}
}

// maxDBBatches is how many batches GET /rooms lists: enough for a minute of batches.
const maxDBBatches = 256

// dbBatch is one batch the writer handed to the offload pool, as GET /rooms lists it.
type dbBatch struct {
	At      int64   `json:"at_unix_ms"` // when the batch was handed to the pool
	Ms      float64 `json:"ms"`         // until the write returned: the pool's queue plus the transaction
	Matches int     `json:"matches"`
	Failed  bool    `json:"failed,omitempty"`
}

// noteBatch records a batch's latency. Loop-confined (the writer's tick).
func (a *app) noteBatch(began time.Time, matches int, err error) {
	if len(a.dbBatches) == maxDBBatches {
		a.dbBatches = append(a.dbBatches[:0], a.dbBatches[1:]...)
	}
	a.dbBatches = append(a.dbBatches, dbBatch{At: began.UnixMilli(), Ms: float64(time.Since(began).Microseconds()) / 1e3,
		Matches: matches, Failed: err != nil})
}

// addrKey is the ticket limiter's first key: the client's IP address (the port left out).
// Behind a reverse proxy every client has the proxy's address; taking the client's from
// X-Forwarded-For safely needs a list of trusted proxies, which the server does not have
// yet, so the flagship must face its clients directly (or give its proxy the limit).
func addrKey(c *loop.Ctx) string {
	switch ra := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		return ra.IP.String()
	case nil:
		return ""
	default:
		host, _, err := net.SplitHostPort(ra.String())
		if err != nil {
			return ra.String()
		}
		return host
	}
}

// sweepPlayers is an Every task: it deletes the profiles of players who never finished a
// match and were created more than PlayerTTL ago (offloaded), sparing those with a ticket,
// a seat or a result still to write. A flood of made-up ids leaves no rows for long.
func (a *app) sweepPlayers(t *loop.Task) {
	if a.srv.Draining().Done() {
		return
	}
	var keep []game.PlayerID
	for id := range a.claiming {
		keep = append(keep, id)
	}
	keep = append(keep, a.mm.QueuedPlayers()...)
	for _, ar := range a.arenas {
		if !ar.ended {
			for id := range ar.seats {
				keep = append(keep, id)
			}
		}
	}
	for _, f := range a.backlog {
		for _, p := range f.Result.Players {
			keep = append(keep, p.ID)
		}
	}
	cutoff := time.Now().Add(-a.opts.PlayerTTL)
	n, err := offload.Do(t, func(ctx context.Context) (int, error) { return a.st.ForgetUnplayed(ctx, cutoff, keep) })
	if err != nil {
		a.log.Warn("gameserver: forgetting unplayed players failed", "err", err)
	} else if n > 0 {
		a.log.Debug("gameserver: forgot unplayed players", "players", n)
	}
}

// validPlayer checks ?player and ?name: ids are 1-32 letters, digits, '-' or '_' (the
// "bot-" prefix is the server's); names at most 24 bytes of UTF-8 (default: the id).
func validPlayer(c *loop.Ctx) (game.PlayerID, string, bool) {
	id, name := c.Query("player"), strings.TrimSpace(c.Query("name"))
	ok := len(id) >= 1 && len(id) <= 32 && !strings.HasPrefix(id, "bot-")
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			ok = false
		}
	}
	if !ok {
		c.String(400, "400 Bad Request: ?player must be 1-32 letters, digits, '-' or '_' (not starting with bot-)\n")
		return "", "", false
	}
	if name == "" {
		name = id
	}
	if len(name) > 24 {
		name = strings.ToValidUTF8(name[:24], "") // a rune cut in two goes
	}
	return game.PlayerID(id), name, true
}
