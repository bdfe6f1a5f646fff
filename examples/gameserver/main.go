// Command gameserver is baton's flagship example: a small real-time game backend on one
// loop. Players queue through matchmaking tickets, play 20 Hz arenas over WebSocket (or
// an HTTP long-poll), and their results land in a SQLite leaderboard written through the
// offload pool. In-process bots fill the rooms so the page is alive at once.
//
//	make run     # from the repository root; then open http://127.0.0.1:8080/ to play and
//	             # http://127.0.0.1:8081/debug/baton/ for the live dashboard
//	curl -X POST '127.0.0.1:8080/tickets?player=ann'   # 201: the ticket's id and secret, ann's key
//	curl '127.0.0.1:8080/tickets/ID?wait=10'           # long-poll for the assignment
//	curl '127.0.0.1:8080/leaderboard?bots=1'
//	curl '127.0.0.1:8081/debug/baton/tasks?format=text'   # admin address: stats, health
//	curl 127.0.0.1:8081/metrics                           # Prometheus metrics
//	curl '127.0.0.1:8081/debug/baton/rooms?format=text'   # every arena's tick figures
//
// Demo switches: -heavy-room makes one bot arena burn 30 ms per tick (the rooms page
// names it); -block-loop blocks the loop for 1.2 s every 10 s (the stall log and /healthz name the
// task). It reads the BATON_* environment (see loop.FromEnv); -db or GAMESERVER_DB
// picks the database file (default <-data>/gameserver.db).
//
// Routes on the main address: GET / (the browser client), POST /tickets, GET and DELETE
// /tickets/{id}, GET /ws, GET /rooms, GET /rooms/{id}/state, POST /rooms/{id}/input,
// GET /leaderboard, GET /players/{id}, /healthz, /readyz. README.md says who may do what
// (ticket secrets, player keys) and what bounds the load. On the admin address only (a
// loopback address by default): the live dashboard at /debug/baton/, the stats pages under
// it (goroutine stacks with ?stacks=1, which the public port must not show), /healthz,
// /readyz and /metrics; with -admin "" they are off.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonrt/baton/directory"
	etcd "github.com/batonrt/baton/directory/etcd"
	"github.com/batonrt/baton/examples/gameserver/store"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/promexport"
)

// drainTimeout bounds a graceful shutdown: matches end, the writer writes, then stop.
const drainTimeout = 10 * time.Second

func main() {
	opts, err := parseFlags(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gameserver:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "gameserver:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line and the environment (getenv).
func parseFlags(args []string, getenv func(string) string) (options, error) {
	fs := flag.NewFlagSet("gameserver", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address (host:port) of the game")
	admin := fs.String("admin", "127.0.0.1:8081", "admin address for stats, health and Prometheus metrics; empty: none")
	data := fs.String("data", envOr(getenv, "GAMESERVER_DATA", "data"), "data directory, created on first start (env GAMESERVER_DATA)")
	db := fs.String("db", getenv("GAMESERVER_DB"), "database file (env GAMESERVER_DB); default <data>/gameserver.db")
	bots := fs.Bool("bots", true, "fill short matches with bots and keep bot arenas running")
	botRooms := fs.Int("bot-rooms", 2, "arenas of bots only, restarted when they end (with -bots)")
	size := fs.Int("players", 4, "players per match")
	wait := fs.Duration("wait", 2*time.Second, "longest wait for a full match before bots fill it")
	match := fs.Duration("match", 60*time.Second, "match length")
	limit := fs.Int("score-limit", 25, "points that end a match (0: none)")
	heavy := fs.Bool("heavy-room", false, "demo: one bot arena burns 30 ms per tick")
	block := fs.Bool("block-loop", false, "demo: block the loop for 1.2 s every 10 s")
	maxQueued := fs.Int("max-queued", defaultMaxQueued, "tickets queued at most; past it new tickets get 503 with Retry-After")
	maxArenas := fs.Int("max-arenas", defaultMaxArenas, "matches from tickets running at most (bot arenas apart); the rest wait queued")
	addrRate := fs.Float64("addr-rate", defaultAddrRate, "new tickets a second per client address (429 with Retry-After past it)")
	addrBurst := fs.Int("addr-burst", defaultAddrBurst, "new tickets at once per client address")
	ticketAge := fs.Duration("ticket-age", maxTicketAge, "a queued ticket expires after this long")
	unplayed := fs.Duration("unplayed-ttl", defaultPlayerTTL, "a player who never finished a match is forgotten after this long")
	etcdEPs := fs.String("etcd", getenv("GAMESERVER_ETCD"), "cluster: etcd endpoints, comma-separated (env GAMESERVER_ETCD); empty: one process on the embedded directory. Needs GAMESERVER_SEAT_KEY")
	node := fs.String("node", getenv("GAMESERVER_NODE"), "cluster: this node's ID, unique in the cluster (env GAMESERVER_NODE; default: the -addr port)")
	public := fs.String("public", getenv("GAMESERVER_PUBLIC"), "cluster: the address players reach this node at (env GAMESERVER_PUBLIC; default: the listening address)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	cfg, err := loop.FromEnv(loop.Config{Addr: *addr, RequireSingleThread: true})
	if err != nil {
		return options{}, err
	}
	o := options{Loop: cfg, Admin: *admin, DB: *db, Bots: *bots, BotRooms: *botRooms, Size: *size,
		Wait: *wait, Match: *match, ScoreLimit: *limit, Heavy: *heavy, BlockLoop: *block,
		MaxQueued: *maxQueued, MaxArenas: *maxArenas, AddrRate: *addrRate, AddrBurst: *addrBurst,
		TicketAge: *ticketAge, PlayerTTL: *unplayed}
	if *etcdEPs != "" {
		key, err := seatKey(getenv)
		if err != nil {
			return options{}, err
		}
		o.Etcd, o.SeatKey, o.Node, o.Public = strings.Split(*etcdEPs, ","), key, *node, *public
		if o.Node == "" {
			_, port, _ := net.SplitHostPort(*addr)
			o.Node = "node-" + port
		}
		if err := directory.CheckNode(o.Node); err != nil {
			return options{}, fmt.Errorf("-node: %w", err)
		}
	}
	if o.DB == "" {
		o.DB = filepath.Join(*data, "gameserver.db")
	}
	switch {
	case o.Size < 1:
		return options{}, fmt.Errorf("-players (%d) must be at least 1", o.Size)
	case o.BotRooms < 0:
		return options{}, fmt.Errorf("-bot-rooms (%d) must not be negative", o.BotRooms)
	case o.Heavy && (!o.Bots || o.BotRooms == 0):
		return options{}, errors.New("-heavy-room needs -bots and -bot-rooms of at least 1")
	case o.MaxQueued < 1:
		return options{}, fmt.Errorf("-max-queued (%d) must be at least 1", o.MaxQueued)
	case o.MaxArenas < 1:
		return options{}, fmt.Errorf("-max-arenas (%d) must be at least 1", o.MaxArenas)
	case !(o.AddrRate > 0):
		return options{}, fmt.Errorf("-addr-rate (%v) must be positive", o.AddrRate)
	case o.AddrBurst < 1:
		return options{}, fmt.Errorf("-addr-burst (%d) must be at least 1", o.AddrBurst)
	case o.TicketAge <= 0:
		return options{}, fmt.Errorf("-ticket-age (%v) must be positive", o.TicketAge)
	case o.PlayerTTL < o.TicketAge:
		return options{}, fmt.Errorf("-unplayed-ttl (%v) must not be shorter than -ticket-age (%v)", o.PlayerTTL, o.TicketAge)
	}
	return o, nil
}

// listenError says which address (what: "game" or "admin") could not be served and, when
// it is taken, how to pick another: the flag, or make run's variable.
func listenError(what, addr, flagName, makeVar string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("the %s address %s is in use by another process: pick another with %s HOST:PORT (make run %s=HOST:PORT): %w",
			what, addr, flagName, makeVar, err)
	}
	return fmt.Errorf("the %s address %s: %w", what, addr, err)
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// running is what run reports once the server is up: tests read the addresses.
type running struct {
	app   *app
	addr  string // the game's address, host:port
	admin string // the admin address, or ""
}

// run serves until ctx ends, then drains: matches in play end and count, everything
// finished is written, then the database closes. ready, when not nil, is called once the
// server is up.
func run(ctx context.Context, opts options, out io.Writer, ready func(running)) error {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	st, err := store.OpenWith(opts.DB, store.Options{BusyTimeout: opts.DBBusy})
	if err != nil {
		return err
	}
	defer st.Close()
	if len(opts.Etcd) > 0 && opts.Cluster == nil {
		cli, err := etcd.Connect(opts.Etcd)
		if err != nil {
			return fmt.Errorf("-etcd %s: %w", strings.Join(opts.Etcd, ","), err)
		}
		defer cli.Close()
		seats, err := directory.NewSeatSigner(directory.SeatConfig{Key: opts.SeatKey})
		if err != nil {
			return err
		}
		opts.Cluster = &clusterConfig{Directory: etcd.New(cli, ""), Node: opts.Node, Public: opts.Public, Seats: seats,
			HandoffKey: opts.SeatKey} // one shared secret: seat, resume and handoff MACs are domain-separated
	}
	a, err := newApp(opts, st, log)
	if err != nil {
		return err
	}
	var adminLn net.Listener
	if opts.Admin != "" {
		if adminLn, err = net.Listen("tcp", opts.Admin); err != nil {
			return listenError("admin", opts.Admin, "-admin", "ADMIN_ADDR", err)
		}
		a.setAdmin(adminLn.Addr().String())
		mux := http.NewServeMux()
		mux.Handle("/debug/baton/", stats.Handler(a.srv))
		mux.Handle("/healthz", a.health.Handler())
		mux.Handle("/readyz", a.health.Handler())
		mux.Handle("/metrics", promhttp.HandlerFor(promexport.Registry(a.srv, promexport.WithHealth(a.health)), promhttp.HandlerOpts{}))
		adminSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = adminSrv.Serve(adminLn) }()
		defer adminSrv.Close()
	}
	served := make(chan error, 1)
	go func() { served <- a.srv.ListenAndServe() }()
	select {
	case <-a.srv.Ready():
	case err := <-served:
		return listenError("game", opts.Loop.Addr, "-addr", "ADDR", err)
	}
	if a.srv.Addr() == nil { // Ready was closed because the server stopped before serving
		return listenError("game", opts.Loop.Addr, "-addr", "ADDR", <-served)
	}
	r := running{app: a, addr: a.srv.Addr().String()}
	if adminLn != nil {
		r.admin = adminLn.Addr().String()
	}
	fmt.Fprintf(out, "gameserver: play at http://%s/\n", r.addr)
	if r.admin != "" {
		fmt.Fprintf(out, "gameserver: dashboard at http://%s/debug/baton/  (stats pages under it, health /healthz /readyz, /metrics)\n", r.admin)
		fmt.Fprintf(out, "gameserver: leaderboard http://%s/leaderboard  rooms http://%s/debug/baton/rooms?format=text\n", r.addr, r.admin)
	} else {
		fmt.Fprintf(out, "gameserver: no admin address (-admin \"\"): the dashboard, stats pages and metrics are off\n")
		fmt.Fprintf(out, "gameserver: leaderboard http://%s/leaderboard\n", r.addr)
	}
	fmt.Fprintf(out, "gameserver: database %s\n", st.Path())
	if cl := opts.Cluster; cl != nil {
		fmt.Fprintf(out, "gameserver: cluster node %s: join a room through any node at http://%s/?room=NAME\n", cl.Node, r.addr)
	}
	if ready != nil {
		ready(r)
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	drain := opts.Drain
	if drain <= 0 {
		drain = drainTimeout
	}
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err = a.srv.Shutdown(sctx)
	if serr := <-served; serr != nil && !errors.Is(serr, loop.ErrServerClosed) {
		return serr
	}
	// The loop has stopped: the app is this goroutine's now. A write the deadline cut short
	// is settled first, so that unwritten counts exactly the matches not in the file.
	a.settleWrite()
	ended, forced := room.Drained(a.srv)
	unwritten := len(a.backlog)
	log.Info("gameserver: stopped", "matches_recorded", a.recorded.Load(), "rooms_ended", ended,
		"rooms_forced", forced, "unwritten", unwritten)
	switch {
	case unwritten > 0 && err != nil:
		return fmt.Errorf("drain: %w: %d finished matches were not written", err, unwritten)
	case unwritten > 0:
		return fmt.Errorf("drain: %d finished matches were not written", unwritten)
	case err != nil:
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}
