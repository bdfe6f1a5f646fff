// Package harness runs baton-bench's scenarios: it starts every target server in a child
// process (pinned with taskset when asked), drives it with package loadgen over loopback,
// samples the server's CPU and memory from /proc, and writes tables, JSON results,
// HdrHistogram percentile files and latency plots.
package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonrt/baton/bench/loadgen"
	"github.com/batonrt/baton/bench/servers"
)

// Options configure Run.
type Options struct {
	// Scenarios is "all" or a comma-separated list of scenario names.
	Scenarios string
	// Targets are the servers to measure (see ParseTargets).
	Targets []Target
	// Params shape the scenarios' load.
	Params Params
	// Out is the directory results are written to (created if missing).
	Out string
	// CPUServer and CPUClient are taskset CPU lists ("0", "1-3") for the server processes
	// and for this process; empty: no pinning.
	CPUServer, CPUClient string
	// Shards is baton's Config.Shards for the built-in baton targets (0 or 1: one loop).
	// With more, only the scenarios in servers.ShardedRoutes may run.
	Shards int
	// Plots turns the PNG latency plots on.
	Plots bool
	// Stdout receives the tables and the summary; Log the progress lines. nil: discarded.
	Stdout, Log io.Writer
}

// Target is a server to measure: a built-in one ("baton", "nethttp") started by the harness,
// or an external one at a loopback URL, optionally started by a command.
type Target struct {
	Name    string
	Builtin bool
	Host    string   // external: "host:port"
	Prefix  string   // external: path prefix of the routes
	Command string   // external: command that starts it (run with sh -c "exec ..."), or ""
	proc    *Process // a scenario's own program (Scenario.Process)
}

// ParseTargets parses a -targets value: a comma-separated list of "baton", "nethttp",
// "baton-noacct", "URL" or "name=URL" (loopback http URLs of external servers); cmds are "name=command"
// entries (from -cmd) giving the command that starts an external target.
func ParseTargets(spec string, cmds []string) ([]Target, error) {
	byName := map[string]string{}
	for _, c := range cmds {
		name, command, ok := strings.Cut(c, "=")
		if !ok || name == "" || command == "" {
			return nil, fmt.Errorf("-cmd %q: want name=command", c)
		}
		byName[name] = command
	}
	var out []Target
	seen := map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var t Target
		switch item {
		case servers.Baton, servers.NetHTTP, servers.BatonNoAccounting, servers.Floor:
			t = Target{Name: item, Builtin: true}
		default:
			name, raw, named := strings.Cut(item, "=")
			if !named {
				raw = item
			}
			u, err := url.Parse(raw)
			if err != nil || u.Scheme != "http" || u.Host == "" || u.Port() == "" {
				return nil, fmt.Errorf("target %q: want baton, nethttp, or [name=]http://127.0.0.1:PORT[/prefix]", item)
			}
			if !named {
				name = u.Host
			}
			t = Target{Name: name, Host: u.Host, Prefix: strings.TrimSuffix(u.Path, "/"), Command: byName[name]}
			delete(byName, name)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("target %q given twice", t.Name)
		}
		seen[t.Name] = true
		out = append(out, t)
	}
	for name := range byName {
		return nil, fmt.Errorf("-cmd %q: no external target of that name in -targets", name)
	}
	if len(out) == 0 {
		return nil, errors.New("no targets")
	}
	return out, nil
}

// runner carries one Run's state.
type runner struct {
	opts    Options
	res     *Results
	taskset string
	stdout  io.Writer
	log     io.Writer
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.log, format+"\n", args...)
}

func (r *runner) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.res.Warnings = append(r.res.Warnings, msg)
	fmt.Fprintln(r.log, "WARNING:", msg)
}

// Run runs the selected scenarios against every target and writes the results under
// opts.Out. It returns the results even when some runs failed (see RunResult.Error).
func Run(ctx context.Context, opts Options) (*Results, error) {
	scenarios, err := SelectScenarios(opts.Scenarios)
	if err != nil {
		return nil, err
	}
	if len(opts.Targets) == 0 {
		return nil, errors.New("no targets")
	}
	if opts.Shards > 1 {
		for _, sc := range scenarios {
			if !slices.Contains(servers.ShardedRoutes, sc.Name) {
				return nil, fmt.Errorf("-shards %d: scenario %s is not served by baton with shards (only %s)", opts.Shards, sc.Name, strings.Join(servers.ShardedRoutes, ", "))
			}
		}
	}
	for _, t := range opts.Targets {
		if !t.Builtin {
			if err := loopbackOnly(ctx, t.Host); err != nil {
				return nil, fmt.Errorf("target %s: %w", t.Name, err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.Out, "logs"), 0o755); err != nil {
		return nil, err
	}
	r := &runner{opts: opts, stdout: opts.Stdout, log: opts.Log}
	if r.stdout == nil {
		r.stdout = io.Discard
	}
	if r.log == nil {
		r.log = io.Discard
	}
	r.taskset, _ = exec.LookPath("taskset")
	if err := servers.RaiseFileLimit(); err != nil {
		r.warn("%v", err)
	}
	r.res = &Results{Schema: Schema, Started: time.Now().UTC(), Host: hostInfo(r.taskset), Warnings: []string{}}
	r.res.Options = OptionsRecord{
		Scenarios: names(scenarios), Quick: opts.Params.Quick, DurationS: opts.Params.Duration.Seconds(),
		WarmupS: opts.Params.Warmup.Seconds(), Conns: opts.Params.Conns, Rate: opts.Params.Rate,
		Pipeline: max(opts.Params.Pipeline, 1), IdleConns: opts.Params.IdleConns, BurstConns: opts.Params.BurstConns,
		CPUServer: opts.CPUServer, CPUClient: opts.CPUClient, Out: opts.Out, Shards: max(opts.Shards, 1),
	}
	for _, t := range opts.Targets {
		r.res.Options.Targets = append(r.res.Options.Targets, t.Name)
	}
	r.pin()
	params := r.checkParams(opts.Params, scenarios)

	summaryFile, err := os.Create(filepath.Join(opts.Out, "summary.txt"))
	if err != nil {
		return nil, err
	}
	defer summaryFile.Close()
	tables := io.MultiWriter(r.stdout, summaryFile)

	for _, sc := range scenarios {
		if err := ctx.Err(); err != nil {
			_ = r.writeJSON()
			return r.res, err
		}
		sr := &ScenarioResult{Name: sc.Name, Summary: sc.Summary, Phases: []*PhaseResult{}}
		r.res.Scenarios = append(r.res.Scenarios, sr)
		if sc.Needs != "" {
			sr.Skipped = sc.Needs
			r.logf("%s: skipped: %s", sc.Name, sc.Needs)
			writeTable(tables, sr)
			continue
		}
		targets, release, err := r.scenarioTargets(ctx, sc, params)
		if err != nil {
			sr.Skipped = err.Error()
			r.warn("%s: skipped: %v", sc.Name, err)
			writeTable(tables, sr)
			continue
		}
		for _, ph := range sc.Phases(params) {
			pr := &PhaseResult{Name: ph.Name, Description: ph.Description, WarmupS: ph.Warmup.Seconds(), DurationS: ph.Duration.Seconds()}
			sr.Phases = append(sr.Phases, pr)
			for _, t := range targets {
				if !t.Builtin && !sc.External && t.proc == nil {
					continue
				}
				if t.Builtin && !servers.Serves(t.Name, sc.Name) {
					continue // the floor serves only the scenarios it is the floor of
				}
				if err := ctx.Err(); err != nil {
					release()
					_ = r.writeJSON() // keep what was measured
					return r.res, err
				}
				pr.Runs = append(pr.Runs, r.runOne(ctx, sc, ph, t))
			}
		}
		release()
		if sc.AccountingCost && r.hasTarget(servers.Baton) && r.hasTarget(servers.BatonNoAccounting) {
			ac, err := r.measureAccountingCost(ctx, params)
			if err != nil {
				r.warn("%s: accounting cost: %v", sc.Name, err)
			}
			sr.AccountingCost = ac
		}
		if sc.Summarize != nil {
			r.res.Summary = append(r.res.Summary, sc.Summarize(sr)...)
		}
		writeTable(tables, sr)
		if opts.Plots {
			if err := plotScenario(opts.Out, sr); err != nil {
				r.warn("plots of %s: %v", sc.Name, err)
			}
		}
		if err := r.writeJSON(); err != nil {
			return r.res, err
		}
	}
	r.res.Finished = time.Now().UTC()
	writeSummary(tables, r.res)
	return r.res, r.writeJSON()
}

// hasTarget reports whether the built-in target name is measured.
func (r *runner) hasTarget(name string) bool {
	for _, t := range r.opts.Targets {
		if t.Builtin && t.Name == name {
			return true
		}
	}
	return false
}

func names(ss []*Scenario) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// pin pins this process to CPUClient and checks the pinning makes sense.
func (r *runner) pin() {
	o := r.opts
	if (o.CPUServer != "" || o.CPUClient != "") && r.taskset == "" {
		r.warn("taskset not found: server and client are not pinned to CPUs")
		return
	}
	if o.CPUClient != "" {
		if err := pinSelf(o.CPUClient, r.taskset); err != nil {
			r.warn("pinning the load generator to CPUs %s: %v", o.CPUClient, err)
			return
		}
	}
	if o.CPUServer == "" || o.CPUClient == "" {
		r.warn("server and client are not pinned to separate CPUs (-cpu-server, -cpu-client): they compete for the same cores")
		return
	}
	if o.CPUServer == o.CPUClient {
		r.warn("server and client are pinned to the same CPUs (%s)", o.CPUServer)
		return
	}
	r.res.Options.PinnedApart = true
}

// checkParams adjusts the parameters to the machine (open file limit).
func (r *runner) checkParams(p Params, scenarios []*Scenario) Params {
	if p.IdleConns <= 0 {
		p.IdleConns = DefaultIdleConns
	}
	limit := servers.FileLimit()
	for _, s := range scenarios {
		switch s.Name {
		case "idle-conns":
			if limit > 0 && uint64(p.IdleConns)+256 > limit {
				n := int(limit) - 256
				r.warn("open file limit %d is too low for %d idle connections: using %d", limit, p.IdleConns, n)
				p.IdleConns = n
			}
		case "rooms":
			if n := roomsCount(p) * servers.PlayersPerRoom; limit > 0 && uint64(n)+256 > limit {
				p.Rooms = (int(limit) - 256) / servers.PlayersPerRoom
				r.warn("open file limit %d is too low for %d player connections: using %d rooms", limit, n, p.Rooms)
			}
		case "ws-broadcast":
			if n := wsConns(p); limit > 0 && uint64(n)+256 > limit {
				p.WSConns = int(limit) - 256
				r.warn("open file limit %d is too low for %d WebSocket connections: using %d", limit, n, p.WSConns)
			}
		case "arena":
			ns := arenaPlayers(p)
			if n := ns[len(ns)-1]; limit > 0 && uint64(n)+256 > limit {
				r.warn("open file limit %d is too low for %d arena players: the largest phases will fail to join them all", limit, n)
			}
		case "game":
			if n := gamePlayers(p); limit > 0 && uint64(n)+256 > limit {
				p.GamePlayers = int(limit) - 256
				r.warn("open file limit %d is too low for %d players: using %d", limit, n, p.GamePlayers)
			}
		case "reconnect-burst":
			n := p.BurstConns
			if n <= 0 {
				n = 5000
				if p.Quick {
					n = 2000
				}
			}
			if limit > 0 && uint64(n)+256 > limit {
				p.BurstConns = int(limit) - 256
				r.warn("open file limit %d is too low for %d reconnecting workers: using %d", limit, n, p.BurstConns)
			}
		}
	}
	return p
}

// runOne runs phase ph of sc against t in a fresh server process.
func (r *runner) runOne(ctx context.Context, sc *Scenario, ph Phase, t Target) *RunResult {
	began := time.Now()
	rr := &RunResult{Target: t.Name, Groups: []*GroupStats{}}
	label := sc.Name + "/" + ph.Name + " " + t.Name
	r.logf("%s: %s", label, ph.Description)
	fail := func(err error) *RunResult {
		rr.Error = err.Error()
		rr.Elapsed = time.Since(began).Seconds()
		r.warn("%s: %v", label, err)
		return rr
	}
	logPath := filepath.Join(r.opts.Out, "logs", fileName(sc.Name, ph.Name, t.Name)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fail(err)
	}
	defer logFile.Close()

	var srv *server
	host := t.Host
	switch {
	case t.Builtin:
		srv, err = startChild(t.Name, r.opts.CPUServer, r.taskset, r.opts.Shards, logFile)
	case t.proc != nil:
		srv, err = startProcess(t.proc, r.opts.CPUServer, r.taskset, logFile)
	case t.Command != "":
		srv, err = startExternal(t.Command, t.Host, r.opts.CPUServer, r.taskset, logFile)
	}
	if err != nil {
		return fail(fmt.Errorf("starting the server: %w", err))
	}
	if srv != nil {
		defer srv.stop()
		host = srv.addr
	}
	var (
		st                  *ServerStats
		user0, user1        time.Duration
		sys0, sys1          time.Duration
		busy0, busy1        time.Duration
		busyOK              bool
		load1               float64
		rssStart, rssEnd    int64
		threads, rssConnsOf int
	)
	if srv != nil {
		st = &ServerStats{PID: srv.pid, CPUs: r.opts.CPUServer}
		st.RSSBefore, _, _, _ = procMem(srv.pid)
	}
	onStart := func() {
		if srv != nil {
			user0, sys0, _ = procTimes(srv.pid)
			busy0, busyOK = cpusBusy(r.opts.CPUServer)
			load1 = loadAvg1()
			rssStart, _, _, _ = procMem(srv.pid)
		}
	}
	onEnd := func() {
		if srv != nil {
			user1, sys1, _ = procTimes(srv.pid)
			var ok bool
			busy1, ok = cpusBusy(r.opts.CPUServer)
			busyOK = busyOK && ok
			rssEnd, _, threads, _ = procMem(srv.pid)
		}
	}
	var (
		res *loadgen.Result
		fig *Figures
	)
	if ph.Custom != nil {
		env := &Env{Target: t.Name, Host: host, Prefix: t.Prefix, Warmup: ph.Warmup, Duration: ph.Duration,
			Drain: r.opts.Params.Drain, onStart: onStart, onEnd: onEnd, serverCPUs: r.opts.CPUServer, taskset: r.taskset}
		if env.Drain <= 0 {
			env.Drain = 2 * time.Second
		}
		res, fig, err = runCustom(ctx, ph, env)
	} else {
		groups := ph.Groups(host, t.Prefix)
		for i := range groups {
			groups[i].Addr = host
		}
		res, err = loadgen.Run(ctx, loadgen.Config{
			Groups: groups, Warmup: ph.Warmup, Duration: ph.Duration, Drain: r.opts.Params.Drain,
			OnMeasureStart: onStart, OnMeasureEnd: onEnd,
		})
	}
	if err != nil {
		return fail(err)
	}
	if fig != nil && len(fig.Extra) > 0 {
		rr.Extra = map[string]any{}
		for k, v := range fig.Extra {
			rr.Extra[k] = v
		}
	}
	if ph.After != nil {
		base := "http://" + host + t.Prefix
		if err := ph.After(ctx, base, rr); err != nil {
			r.warn("%s: collecting figures: %v", label, err)
		}
	}
	for _, g := range res.Groups {
		gs := groupStats(g)
		if m := fig.mode(g.Name); m != "" {
			gs.Mode = m
		}
		if g.Latency.TotalCount() > 0 {
			gs.HGRM = filepath.Join(sc.Name, fileName(ph.Name, t.Name, g.Name)+".hgrm")
			if err := writeHGRM(filepath.Join(r.opts.Out, gs.HGRM), g); err != nil {
				r.warn("%s: %v", label, err)
				gs.HGRM = ""
			}
		}
		rr.Groups = append(rr.Groups, gs)
		if g.Name == ph.RSSPerConnGroup {
			rssConnsOf = g.Conns
		}
	}
	window := res.End.Sub(res.Start)
	rr.Client = ClientStats{
		CPUSeconds: res.ClientCPU.Seconds(), CPUs: res.ClientCPUs, Util: res.ClientUtilization(),
		Saturated: res.Saturated(), SetupS: res.SetupTime.Seconds(),
	}
	if rr.Client.Saturated {
		r.warn("%s: the load generator used %.0f%% of its %d CPU(s): it may be the bottleneck, compare CPU per request",
			label, 100*rr.Client.Util, rr.Client.CPUs)
	}
	if srv != nil {
		_, st.RSSPeak, _, _ = procMem(srv.pid)
		st.CPUUserS, st.CPUSysS = (user1 - user0).Seconds(), (sys1 - sys0).Seconds()
		st.CPUSeconds = st.CPUUserS + st.CPUSysS
		st.CPUUtil = st.CPUSeconds / window.Seconds()
		st.Load1, st.OthersOnCPUs = load1, -1
		if busyOK {
			st.OthersOnCPUs = max(0, ((busy1-busy0).Seconds()-st.CPUSeconds)/window.Seconds())
		}
		if n := rr.Requests(); n > 0 {
			st.CPUUsPerReq = st.CPUSeconds * 1e6 / float64(n)
		}
		if work := fig.work(); work > 0 {
			st.CPUUsPerUnit, st.Unit = st.CPUSeconds*1e6/work, fig.Unit
			st.CPUUserUsPerUnit, st.CPUSysUsPerUnit = st.CPUUserS*1e6/work, st.CPUSysS*1e6/work
		}
		st.RSSStart, st.RSSEnd, st.Threads = rssStart, rssEnd, threads
		rr.Server = st
		if rssConnsOf > 0 {
			if rr.Extra == nil {
				rr.Extra = map[string]any{}
			}
			rr.Extra["rss_per_conn"] = float64(rssStart-st.RSSBefore) / float64(rssConnsOf)
		}
	}
	rr.Elapsed = time.Since(began).Seconds()
	for _, g := range rr.Groups {
		r.logf("  %-10s %10.0f req/s  p50 %s  p99 %s  max %s  errors %d", g.Name, g.RPS,
			fmtUs(g.Latency.P50), fmtUs(g.Latency.P99), fmtUs(g.Latency.Max), sumErrors(g.Errors))
	}
	return rr
}

func (r *runner) writeJSON() error {
	b, err := json.MarshalIndent(r.res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.opts.Out, "results.json"), append(b, '\n'), 0o644)
}

// fileName joins parts into a file name safe on any file system.
func fileName(parts ...string) string {
	s := strings.Join(parts, "-")
	return strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
			return c
		}
		return '_'
	}, s)
}

func hostInfo(taskset string) HostInfo {
	h := HostInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), FileLimit: servers.FileLimit(), TasksetBin: taskset, LoadAvg: []float64{}}
	h.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
				h.CPUModel = strings.TrimSpace(val)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		for _, f := range strings.Fields(string(b))[:3] {
			v, _ := strconv.ParseFloat(f, 64)
			h.LoadAvg = append(h.LoadAvg, v)
		}
	}
	return h
}

func itoa(n int) string { return strconv.Itoa(n) }

func sumErrors(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}
