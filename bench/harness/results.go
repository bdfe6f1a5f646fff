package harness

import (
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/batonrt/baton/bench/loadgen"
)

// Schema identifies the layout of results.json; it changes when a field changes meaning or
// disappears (new fields may be added without a change).
const Schema = "baton-bench/v1"

// Results is the content of results.json. Durations are in seconds, latencies in
// microseconds, memory in bytes, unless a field name says otherwise.
type Results struct {
	Schema    string            `json:"schema"`    // Schema
	Started   time.Time         `json:"started"`   // UTC
	Finished  time.Time         `json:"finished"`  // UTC; zero if the run was interrupted
	Host      HostInfo          `json:"host"`      // the machine
	Options   OptionsRecord     `json:"options"`   // what was asked
	Scenarios []*ScenarioResult `json:"scenarios"` // in the order run
	Summary   []SummaryItem     `json:"summary"`   // headline ratios
	Warnings  []string          `json:"warnings"`  // things that make figures doubtful
}

// HostInfo describes the machine and the Go toolchain of the run.
type HostInfo struct {
	Hostname   string    `json:"hostname"`
	CPUs       int       `json:"cpus"`                // runtime.NumCPU
	CPUModel   string    `json:"cpu_model,omitempty"` // from /proc/cpuinfo
	GoVersion  string    `json:"go_version"`
	Kernel     string    `json:"kernel,omitempty"` // kernel release
	LoadAvg    []float64 `json:"load_avg"`         // 1, 5 and 15 minute load averages at the start
	FileLimit  uint64    `json:"file_limit"`
	TasksetBin string    `json:"taskset,omitempty"` // path of taskset, if found
}

// OptionsRecord records the options the run used.
type OptionsRecord struct {
	Scenarios   []string `json:"scenarios"`       // names, in order
	Targets     []string `json:"targets"`         // names, in order
	Quick       bool     `json:"quick"`           // the short suite
	DurationS   float64  `json:"duration_s"`      // 0: each scenario's default
	WarmupS     float64  `json:"warmup_s"`        // negative: each scenario's default
	Conns       []int    `json:"conns,omitempty"` // plaintext's connection counts, if given
	Rate        float64  `json:"rate,omitempty"`  // -rate, if given
	Pipeline    int      `json:"pipeline"`
	IdleConns   int      `json:"idle_conns"`
	BurstConns  int      `json:"burst_conns,omitempty"` // 0: the scenario's default
	CPUServer   string   `json:"cpu_server,omitempty"`  // taskset CPU list of the servers
	CPUClient   string   `json:"cpu_client,omitempty"`  // taskset CPU list of the load generator
	Out         string   `json:"out"`                   // output directory
	PinnedApart bool     `json:"pinned_apart"`          // server and client were pinned to CPU sets
	Shards      int      `json:"shards"`                // baton's Config.Shards (built-in baton targets)
}

// ScenarioResult is one scenario: its phases, or why it was skipped.
type ScenarioResult struct {
	Name    string         `json:"name"`
	Summary string         `json:"summary"`           // Scenario.Summary
	Skipped string         `json:"skipped,omitempty"` // reason, when it did not run
	Phases  []*PhaseResult `json:"phases"`
	// AccountingCost is the interleaved accounting-cost measurement (Scenario.AccountingCost
	// with both baton and baton-noacct as targets), or nil.
	AccountingCost *AccountingCost `json:"accounting_cost,omitempty"`
}

// PhaseResult is one load shape of a scenario, run against every target in turn.
type PhaseResult struct {
	Name        string       `json:"name"`
	Description string       `json:"description"`
	WarmupS     float64      `json:"warmup_s"`
	DurationS   float64      `json:"duration_s"` // the measurement window
	Runs        []*RunResult `json:"runs"`       // one per target, in -targets order
}

// RunResult is one phase against one target.
type RunResult struct {
	Target  string         `json:"target"`           // target name
	Error   string         `json:"error,omitempty"`  // the run failed; figures may be missing
	Server  *ServerStats   `json:"server,omitempty"` // the server process
	Client  ClientStats    `json:"client"`           // the load generator
	Groups  []*GroupStats  `json:"groups"`           // one per load group
	Extra   map[string]any `json:"extra,omitempty"`  // scenario-specific figures
	Elapsed float64        `json:"elapsed_s"`        // wall time of the whole run, set-up included
}

// ServerStats are the server process's figures over the measurement window, from
// /proc/<pid>/stat and /proc/<pid>/status. Absent for external targets without a command.
type ServerStats struct {
	PID         int     `json:"pid"`
	CPUSeconds  float64 `json:"cpu_s"`          // user + system CPU in the window
	CPUUserS    float64 `json:"cpu_user_s"`     // of which user time (utime)
	CPUSysS     float64 `json:"cpu_sys_s"`      // of which kernel time (stime): system calls, and on loopback the softirq work charged to the sender
	CPUUsPerReq float64 `json:"cpu_us_per_req"` // CPU µs per response of the window
	CPUUtil     float64 `json:"cpu_util"`       // CPU seconds per wall second (1 = one core busy)
	RSSBefore   int64   `json:"rss_before"`     // resident memory before the load connected
	RSSStart    int64   `json:"rss_start"`      // at the start of the window
	RSSEnd      int64   `json:"rss_end"`        // at the end of the window
	RSSPeak     int64   `json:"rss_peak"`       // VmHWM at the end of the run
	Threads     int     `json:"threads"`        // at the end of the window
	CPUs        string  `json:"cpus,omitempty"` // CPU list it was pinned to
	// CPUUsPerUnit is the CPU µs per unit of work of a custom phase (Figures.Work), e.g.
	// per tick or per delivered message; Unit names the unit.
	CPUUsPerUnit float64 `json:"cpu_us_per_unit,omitempty"`
	Unit         string  `json:"unit,omitempty"`
	// CPUUserUsPerUnit and CPUSysUsPerUnit split CPUUsPerUnit into user and kernel time.
	CPUUserUsPerUnit float64 `json:"cpu_user_us_per_unit,omitempty"`
	CPUSysUsPerUnit  float64 `json:"cpu_sys_us_per_unit,omitempty"`
	// Load1 is the 1-minute load average at the window's start; OthersOnCPUs the CPU
	// (in cores) that other processes used on the server's CPUs during the window, when
	// it is pinned (-1: unknown). On a shared machine they say how far to trust a figure.
	Load1        float64 `json:"load1"`
	OthersOnCPUs float64 `json:"others_on_cpus"`
}

// ClientStats are the load generator's own figures over the window.
type ClientStats struct {
	CPUSeconds float64 `json:"cpu_s"`
	CPUs       int     `json:"cpus"` // CPUs it could use
	Util       float64 `json:"util"` // fraction of those CPUs busy
	Saturated  bool    `json:"saturated"`
	SetupS     float64 `json:"setup_s"` // time to dial connections before the warm-up
}

// GroupStats is one load group's figures over the window.
type GroupStats struct {
	Name      string             `json:"name"`
	Mode      string             `json:"mode"`                // closed, open or idle
	Conns     int                `json:"conns"`               // connections
	Pipeline  int                `json:"pipeline"`            // requests in flight per connection
	Rate      float64            `json:"rate,omitempty"`      // open: target requests/s
	ConnectS  float64            `json:"connect_s,omitempty"` // connect spread
	Sent      uint64             `json:"sent"`                // requests of the window written
	Requests  uint64             `json:"requests"`            // responses received
	RPS       float64            `json:"rps"`                 // responses per second
	Errors    map[string]uint64  `json:"errors"`              // by kind, non-2xx as "status NNN"
	Status    map[string]uint64  `json:"status"`              // responses by status code
	Latency   Latency            `json:"latency"`
	ByRequest map[string]Latency `json:"by_request,omitempty"` // per request name when the mix has several
	Connect   *Latency           `json:"connect,omitempty"`    // connect times, when connecting in the window
	Slop      *Latency           `json:"slop,omitempty"`       // open: client timer lateness (excluded from latency)
	Alive     uint64             `json:"alive,omitempty"`      // idle: connections still answering at the end
	HGRM      string             `json:"hgrm,omitempty"`       // percentile distribution file, relative to the out dir

	hist *hdrhistogram.Histogram
}

// Latency summarises a histogram, in microseconds.
type Latency struct {
	Count int64   `json:"count"`   // values recorded
	Mean  float64 `json:"mean_us"` // mean
	P50   int64   `json:"p50_us"`  // median
	P90   int64   `json:"p90_us"`
	P99   int64   `json:"p99_us"`
	P999  int64   `json:"p999_us"` // 99.9th percentile
	Max   int64   `json:"max_us"`
}

// SummaryItem is one headline figure, usually a ratio between targets in the same run.
type SummaryItem struct {
	Name  string  `json:"name"`           // what is measured
	Value float64 `json:"value"`          // the figure
	Unit  string  `json:"unit,omitempty"` // "x" for ratios
	Goal  string  `json:"goal,omitempty"` // e.g. ">= 2"
	Pass  *bool   `json:"pass,omitempty"` // whether Value meets Goal; absent with a Goal: undecided (the figure's uncertainty straddles it)
	Note  string  `json:"note,omitempty"` // the figures behind a ratio, caveats
}

// LatencyOf summarises h.
func LatencyOf(h *hdrhistogram.Histogram) Latency {
	if h == nil || h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count: h.TotalCount(), Mean: h.Mean(),
		P50: h.ValueAtQuantile(50), P90: h.ValueAtQuantile(90), P99: h.ValueAtQuantile(99),
		P999: h.ValueAtQuantile(99.9), Max: h.Max(),
	}
}

func groupStats(g *loadgen.GroupResult) *GroupStats {
	gs := &GroupStats{
		Name: g.Name, Mode: g.Mode.String(), Conns: g.Conns, Pipeline: g.Pipeline, Rate: g.Rate,
		ConnectS: g.ConnectSpread.Seconds(), Sent: g.Sent, Requests: g.Requests, RPS: g.RPS(),
		Errors: g.Errors, Status: map[string]uint64{}, Latency: LatencyOf(g.Latency),
		Alive: g.Alive, hist: g.Latency,
	}
	for code, n := range g.Status {
		gs.Status[itoa(code)] = n
	}
	if len(g.ByName) > 1 {
		gs.ByRequest = map[string]Latency{}
		for name, h := range g.ByName {
			gs.ByRequest[name] = LatencyOf(h)
		}
	}
	if g.Connect.TotalCount() > 0 {
		l := LatencyOf(g.Connect)
		gs.Connect = &l
	}
	if g.Slop.TotalCount() > 0 {
		l := LatencyOf(g.Slop)
		gs.Slop = &l
	}
	return gs
}

// Group returns the run's group named name, or nil.
func (r *RunResult) Group(name string) *GroupStats {
	if r == nil {
		return nil
	}
	for _, g := range r.Groups {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// Requests returns the responses of every group in the window.
func (r *RunResult) Requests() uint64 {
	var n uint64
	for _, g := range r.Groups {
		n += g.Requests
	}
	return n
}

// Run returns the phase's run against target, or nil.
func (p *PhaseResult) Run(target string) *RunResult {
	if p == nil {
		return nil
	}
	for _, r := range p.Runs {
		if r.Target == target {
			return r
		}
	}
	return nil
}

// runs returns the phase's runs; nil for a nil phase.
func (p *PhaseResult) runs() []*RunResult {
	if p == nil {
		return nil
	}
	return p.Runs
}

// Phase returns the scenario's phase named name, or nil.
func (s *ScenarioResult) Phase(name string) *PhaseResult {
	for _, p := range s.Phases {
		if p.Name == name {
			return p
		}
	}
	return nil
}
