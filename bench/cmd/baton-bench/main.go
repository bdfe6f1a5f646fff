// Command baton-bench measures baton against a net/http baseline (and any external server)
// under named load scenarios, over loopback, and writes tables, JSON results, HdrHistogram
// percentile files and latency plots. See docs/bench.md. bench is a module of its own
// (bench/go.mod), so run it from bench/:
//
//	cd bench && go run ./cmd/baton-bench -quick -cpu-server 0 -cpu-client 1
//	cd bench && go run ./cmd/baton-bench -scenario plaintext -conns 64 -duration 10s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonrt/baton/bench/harness"
)

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// optDuration is a duration flag that may be left unset.
type optDuration struct {
	d   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("negative duration %s", v)
	}
	o.d, o.set = d, true
	return nil
}

// get returns the duration, or -1 when unset (each scenario's default).
func (o *optDuration) get() time.Duration {
	if !o.set {
		return -1
	}
	return o.d
}

func main() {
	harness.MaybeServeChild() // the harness re-executes this binary to run each server

	fs := flag.NewFlagSet("baton-bench", flag.ExitOnError)
	var (
		scenario     = fs.String("scenario", "all", "scenarios to run: all, or a comma-separated list of names (see the list below)")
		targets      = fs.String("targets", defaultTargets(), "servers to measure, comma-separated: baton, nethttp, floor (Linux: the least a server can do,\nraw system calls on one thread; rooms, ws-broadcast and arena only), baton-noacct, and external\nservers as [name=]http://127.0.0.1:PORT[/prefix] (loopback only; they must serve the scenario's\nroutes; external targets take part in plaintext only)")
		duration     = fs.Duration("duration", 0, "measurement window of every phase (0: each scenario's default: 3s with -quick\n(cpu-hog 5s), 30s otherwise)")
		out          = fs.String("out", "", "output directory (default results/<timestamp> under the working directory: bench/results/\nwhen run from bench/ as make bench does)")
		conns        = fs.String("conns", "", "connection counts for plaintext, comma-separated (default 64,256,1024)")
		rate         = fs.Float64("rate", 0, "open-loop rate in requests/s of each scenario's main load: plaintext becomes open loop at\nthis rate, json's open phase and cpu-hog's neighbours use it (0: scenario defaults)")
		pipeline     = fs.Int("pipeline", 1, "requests in flight per connection for plaintext and json (closed loop: written in\nbatches of this many)")
		idleConns    = fs.Int("idle-conns", harness.DefaultIdleConns, "idle keep-alive connections of the idle-conns scenario")
		drain        = fs.Duration("drain", 2*time.Second, "how long responses to a window's requests are waited for after it; later ones count as\ntimeouts")
		burst        = fs.Int("burst-conns", 0, "workers of the reconnect-burst scenario (0: 2000 with -quick, 5000 otherwise)")
		rooms        = fs.Int("rooms", 0, "rooms of the rooms scenario (0: 250 with -quick, 1000 otherwise)")
		wsConns      = fs.Int("ws-conns", 0, "WebSocket connections of the ws-broadcast scenario, 100 per room (0: 1000 with -quick,\n5000 otherwise)")
		arenaPlayers = fs.String("arena-players", "", "player counts of the arena scenario's phases, comma-separated, in rooms of 4 (default\n400 with -quick, 500,1000,2000 otherwise)")
		gamePlayers  = fs.Int("game-players", 0, "players of the game scenario, in matches of 4 (0: 200 with -quick, 2000 otherwise)")
		gameMatch    = fs.Duration("game-match", 0, "match length of the game scenario (0: 4s with -quick, 15s otherwise)")
		gameServer   = fs.String("gameserver", "", "path of a built examples/gameserver binary for the game scenario (empty: built with\nthe go toolchain from examples/gameserver above the working directory)")
		acctRounds   = fs.Int("acct-rounds", 0, "rounds of the interleaved accounting-cost measurement (plaintext with -targets\nbaton,baton-noacct; 0: 10 with -quick, 30 otherwise)")
		acctBurst    = fs.Duration("acct-burst", 0, "measured length of each accounting-cost burst (0: 500ms with -quick, 1s otherwise)")
		shards       = fs.Int("shards", 1, "baton's Config.Shards for the built-in baton targets: event loops in the server process\n(more than 1: scenarios plaintext and rooms only)")
		cpuServer    = fs.String("cpu-server", "", "CPU list to pin server processes to with taskset, e.g. 0 (empty: not pinned)")
		cpuClient    = fs.String("cpu-client", "", "CPU list to pin the load generator to with taskset, e.g. 1 (empty: not pinned)")
		quick        = fs.Bool("quick", false, "the short suite: short windows and warm-ups (what make bench runs)")
		plots        = fs.Bool("plots", true, "write latency-by-percentile PNG plots")
		list         = fs.Bool("list", false, "list the scenarios and exit")
		cmds         multiFlag
		warmup       optDuration
	)
	fs.Var(&warmup, "warmup", "warm-up before each window, not recorded (default: each scenario's: 1s with -quick, 5s\notherwise)")
	fs.Var(&cmds, "cmd", "name=command: command starting the external target name (run with sh -c \"exec command\",\npinned like the built-in servers, stopped with SIGTERM); repeatable")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage (in bench/): go run ./cmd/baton-bench [flags]\n\n")
		fmt.Fprintf(w, "Runs load scenarios against baton and a net/http baseline on loopback and writes a table per\n")
		fmt.Fprintf(w, "scenario, results.json, .hgrm percentile files and PNG plots under -out. See docs/bench.md.\n\n")
		fmt.Fprintf(w, "Flags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(w, "\nScenarios:\n")
		for _, s := range harness.Scenarios() {
			fmt.Fprintf(w, "  %-16s %s", s.Name, s.Summary)
			if s.Needs != "" {
				fmt.Fprintf(w, " [skipped: %s]", s.Needs)
			}
			fmt.Fprintln(w)
		}
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if *list {
		for _, s := range harness.Scenarios() {
			fmt.Printf("%-16s %s\n", s.Name, s.Summary)
			if s.Needs != "" {
				fmt.Printf("%-16s skipped: %s\n", "", s.Needs)
			}
		}
		return
	}
	tg, err := harness.ParseTargets(*targets, cmds)
	if err != nil {
		fail(err)
	}
	cs := positives("-conns", *conns)
	aps := positives("-arena-players", *arenaPlayers)
	if *out == "" {
		*out = filepath.Join("results", time.Now().Format("20060102-150405"))
	}
	// make bench runs in bench/: an absolute path in the report says where that is.
	if abs, err := filepath.Abs(*out); err == nil {
		*out = abs
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = harness.Run(ctx, harness.Options{
		Scenarios: *scenario,
		Targets:   tg,
		Params: harness.Params{
			Quick: *quick, Duration: *duration, Warmup: warmup.get(), Conns: cs, Rate: *rate,
			Pipeline: *pipeline, IdleConns: *idleConns, BurstConns: *burst, Drain: *drain,
			Rooms: *rooms, WSConns: *wsConns, ArenaPlayers: aps, GamePlayers: *gamePlayers, GameServer: *gameServer, GameMatch: *gameMatch,
			AccountingRounds: *acctRounds, AccountingBurst: *acctBurst,
		},
		Out:       *out,
		CPUServer: *cpuServer,
		CPUClient: *cpuClient,
		Shards:    *shards,
		Plots:     *plots,
		Stdout:    os.Stdout,
		Log:       os.Stderr,
	})
	if err != nil {
		fail(err)
	}
}

// defaultTargets is -targets' default: baton, the net/http baseline, and the floor
// where it runs.
func defaultTargets() string {
	if runtime.GOOS == "linux" {
		return "baton,nethttp,floor"
	}
	return "baton,nethttp"
}

// positives parses a comma-separated list of positive numbers (flag name for errors).
func positives(name, list string) []int {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			fail(fmt.Errorf("%s: %q is not a positive number", name, f))
		}
		out = append(out, n)
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "baton-bench:", err)
	os.Exit(2)
}
