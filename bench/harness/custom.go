package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/batonrt/baton/bench/loadgen"
)

// Custom phases: load that is not HTTP request/response (a room simulation, WebSocket push)
// is driven by the scenario's own code through Phase.Custom instead of package loadgen.
// The harness still starts and pins the server, samples its CPU and memory at the edges of
// the measurement window (which the driver marks with Env.MeasureStart and
// Env.MeasureEnd), measures the client's own CPU over that window, and reports the groups
// the driver returns like loadgen's, in the same tables, JSON, .hgrm files and plots.

// Env is what a Custom phase's driver gets: the server, the phase's timings, and the calls
// that mark its measurement window.
type Env struct {
	// Target is the target's name (servers.Baton, servers.NetHTTP, ...): drivers that read
	// target-specific figures (baton's /debug/baton pages) look at it.
	Target string
	// Host is the server's "host:port"; Prefix the path prefix of its routes ("" for the
	// built-in targets).
	Host, Prefix string
	// Warmup, Duration and Drain are the phase's warm-up, measurement window and how long
	// the driver may wait for the window's last events after it.
	Warmup, Duration, Drain time.Duration

	// serverCPUs is the servers' taskset CPU list ("" when not pinned) and taskset the
	// taskset binary ("" when missing): drivers that calibrate work run it there.
	serverCPUs, taskset string

	mu             sync.Mutex
	onStart        func()
	onEnd          func()
	start, end     time.Time
	cpu0, cpu1     time.Duration
	started, ended bool
}

// Base returns "http://" + Host + Prefix, the URL the routes are under. Any goroutine.
func (e *Env) Base() string { return "http://" + e.Host + e.Prefix }

// MeasureStart marks the start of the measurement window: the harness samples the
// server's CPU time and memory and the client's CPU time. Call it once, before
// MeasureEnd, from any goroutine (it may be loadgen.Config.OnMeasureStart).
func (e *Env) MeasureStart() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return
	}
	e.started = true
	e.cpu0 = loadgen.ProcessCPU()
	e.start = time.Now()
	if e.onStart != nil {
		e.onStart()
	}
}

// MeasureEnd marks the end of the measurement window (see MeasureStart). Calls before
// MeasureStart or after the first are ignored. Any goroutine.
func (e *Env) MeasureEnd() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started || e.ended {
		return
	}
	e.ended = true
	e.end = time.Now()
	e.cpu1 = loadgen.ProcessCPU()
	if e.onEnd != nil {
		e.onEnd()
	}
}

// window returns the marked window, or an error if the driver did not mark it.
func (e *Env) window() (start, end time.Time, cpu time.Duration, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started || !e.ended {
		return time.Time{}, time.Time{}, 0, errors.New("the custom driver did not mark its measurement window (Env.MeasureStart, Env.MeasureEnd)")
	}
	return e.start, e.end, e.cpu1 - e.cpu0, nil
}

// Figures is what a Custom phase's driver measured.
type Figures struct {
	// Groups are the rows of the table, in order: request groups measured with loadgen and
	// groups the driver filled itself (Latency in microseconds, made with
	// loadgen.NewHistogram; Requests = events in the window, e.g. ticks or messages
	// delivered; Errors by kind). A zero Duration is set to the window.
	Groups []*loadgen.GroupResult
	// Modes gives, by group name, the mode shown for groups not driven by loadgen (e.g.
	// "tick", "push"); other groups show their loadgen mode.
	Modes map[string]string
	// Work and Unit, when Work is positive, make the server's CPU be reported per unit of
	// work (ServerStats.CPUUsPerUnit), e.g. per "tick" or per delivered "msg", besides per
	// event of all groups.
	Work uint64
	Unit string
	// WorkF, when positive, is Work as a real number and is used instead of it (e.g.
	// player-seconds over a window that is not a whole number of seconds).
	WorkF float64
	// Extra holds scenario-specific figures for RunResult.Extra.
	Extra map[string]any
}

// runCustom runs a Custom phase's driver and turns its figures into a loadgen.Result for
// the rest of runOne.
func runCustom(ctx context.Context, ph Phase, env *Env) (*loadgen.Result, *Figures, error) {
	fig, err := ph.Custom(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	if fig == nil {
		return nil, nil, errors.New("the custom driver returned no figures")
	}
	start, end, cpu, err := env.window()
	if err != nil {
		return nil, nil, err
	}
	res := &loadgen.Result{Start: start, End: end, ClientCPU: cpu, ClientCPUs: loadgen.UsableCPUs()}
	for i, g := range fig.Groups {
		if g == nil {
			return nil, nil, fmt.Errorf("the custom driver returned a nil group %d", i)
		}
		if g.Duration <= 0 {
			g.Duration = end.Sub(start)
		}
		for _, h := range []**hdrhistogram.Histogram{&g.Latency, &g.Connect, &g.Slop} {
			if *h == nil {
				*h = loadgen.NewHistogram()
			}
		}
		if g.Errors == nil {
			g.Errors = map[string]uint64{}
		}
		if g.Status == nil {
			g.Status = map[int]uint64{}
		}
		res.Groups = append(res.Groups, g)
	}
	return res, fig, nil
}

// work returns the unit count CPU is divided by (WorkF, else Work), 0 for none. f may be
// nil.
func (f *Figures) work() float64 {
	switch {
	case f == nil:
		return 0
	case f.WorkF > 0:
		return f.WorkF
	}
	return float64(f.Work)
}

// mode returns the mode the driver gave group name, or "". f may be nil.
func (f *Figures) mode(name string) string {
	if f == nil {
		return ""
	}
	return f.Modes[name]
}
