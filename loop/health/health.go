// Package health answers /healthz and /readyz from a baton server's own view of its loops:
// whether each loop turns (or which task holds it), and whether the server should get
// traffic (lag, utilisation, the offload queue, the drain).
//
// It reads loop.Loop.Vitals, which never waits for the loop, so an off-loop Handler (on an
// admin listener or the Kubernetes probe port) answers while a task holds the loop, naming
// it. Mount serves the same checks on the server's own port, on the loop. docs/health.md
// gives each default with its reason.
package health

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// Defaults of Config. Each is used where its field is zero; a negative field turns its
// check off.
const (
	// DefaultStallAfter: /healthz fails while one task (or callback) has held the loop for
	// a second. By then every client of the process has waited a second, far past any
	// game's budget; shorter holds are latency problems the stall detector already logs
	// (loop.Config.StallThreshold, 100 ms), not a reason for an orchestrator to restart the
	// process. A liveness probe sees only a hold in progress, so a longer threshold would
	// miss most of them.
	DefaultStallAfter = time.Second

	// DefaultMaxLoopLag: /readyz fails while the loop runs due work (timers, ticks, reads)
	// more than 100 ms late: every request then waits at least that long, the interactive
	// budget is gone, and more traffic only deepens the backlog. It matches the stall
	// threshold: a loop that late is stalling.
	DefaultMaxLoopLag = 100 * time.Millisecond

	// DefaultMaxUtilisation: /readyz fails while the loop was busy 95% of the last ten
	// seconds (accounting.Vitals.UtilisationWindow). Queueing delay grows without bound as utilisation
	// nears 1, so a loop at 95% has no headroom for a burst.
	DefaultMaxUtilisation = 0.95
)

// DefaultMaxOffloadQueue returns the default Config.MaxOffloadQueue for an offload
// configuration: half of one lane's queue bound (offload.Config.MaxWaiting), so that
// readiness fails, and traffic moves elsewhere, while the pool can still queue what it was
// sent instead of refusing it with offload.ErrQueueFull. Any goroutine.
func DefaultMaxOffloadQueue(oc offload.Config) int {
	w := oc.MaxWaiting
	if w == 0 {
		w = offload.DefaultMaxWaiting
	}
	return max(w/2, 1)
}

// Config sets the limits of /healthz and /readyz. Zero fields take the defaults named; a
// negative field turns its check off.
type Config struct {
	// StallAfter: /healthz answers 503 while one task has held the loop this long, naming
	// it (or while the loop has not turned for this long, when no task is running).
	// Default DefaultStallAfter; at least a millisecond.
	StallAfter time.Duration

	// MaxLoopLag: /readyz answers 503 while a loop's lag (accounting.Vitals.Lag) is above it.
	// Default DefaultMaxLoopLag.
	MaxLoopLag time.Duration

	// MaxUtilisation: /readyz answers 503 while a loop's utilisation over the last ten
	// complete seconds is above it (needs accounting). Between 0 and 1; default
	// DefaultMaxUtilisation.
	MaxUtilisation float64

	// MaxOffloadQueue: /readyz answers 503 while more offloaded calls than this wait for a
	// token (offload.Pool.Queued). Default DefaultMaxOffloadQueue of the server's
	// loop.Config.Offload.
	MaxOffloadQueue int
}

// Validate reports the first invalid field, naming it and its value. Any goroutine.
func (c Config) Validate() error {
	switch {
	case c.StallAfter > 0 && c.StallAfter < time.Millisecond:
		return fmt.Errorf("health: Config.StallAfter (%v) must be at least 1ms (0: default %v; negative: off)", c.StallAfter, DefaultStallAfter)
	case math.IsNaN(c.MaxUtilisation) || c.MaxUtilisation > 1:
		return fmt.Errorf("health: Config.MaxUtilisation (%v) must be at most 1 (0: default %v; negative: off)", c.MaxUtilisation, DefaultMaxUtilisation)
	}
	return nil
}

// withDefaults fills the zero fields.
func (c Config) withDefaults(oc offload.Config) Config {
	if c.StallAfter == 0 {
		c.StallAfter = DefaultStallAfter
	}
	if c.MaxLoopLag == 0 {
		c.MaxLoopLag = DefaultMaxLoopLag
	}
	if c.MaxUtilisation == 0 {
		c.MaxUtilisation = DefaultMaxUtilisation
	}
	if c.MaxOffloadQueue == 0 {
		c.MaxOffloadQueue = DefaultMaxOffloadQueue(oc)
	}
	return c
}

// Checker evaluates the checks of one server. It holds no state of its own beyond its
// configuration: every answer is computed from the loops' vitals. Safe for concurrent use.
type Checker struct {
	srv *loop.Server
	cfg Config // with defaults; immutable
}

// New returns a Checker for srv with cfg's limits (zero fields take the defaults). It
// returns cfg.Validate's error. Any goroutine.
func New(srv *loop.Server, cfg Config) (*Checker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Checker{srv: srv, cfg: cfg.withDefaults(srv.Config().Offload)}, nil
}

// Config returns the limits in force, defaults applied. Any goroutine.
func (h *Checker) Config() Config { return h.cfg }

// Report is the body of /healthz.
type Report struct {
	// Status is "ok" (200), "stalled" (503: a task or callback holds the loop),
	// "starting" (503: the loop does not run yet) or "stopped" (503).
	Status string `json:"status"`
	// Task names what holds the loop when Status is "stalled": the route of a request
	// ("GET /x"), the name of a background task ("room:arena-7" for a room's tick), or ""
	// when no task runs (a posted function or callback) or accounting is off.
	Task string `json:"task,omitempty"`
	// Room is the room's name when Task is a room's tick ("room:<name>").
	Room string `json:"room,omitempty"`
	// TaskID is the scheduler's id of the task, 0 when none.
	TaskID uint64 `json:"task_id,omitempty"`
	// HeldForMs is how long the loop has been held so far, in milliseconds: by this task's
	// slice, or by it and what ran before it without the loop turning.
	HeldForMs float64 `json:"held_for_ms,omitempty"`
	// StalledShards lists the loops whose loop is held (loop.Config.Shards > 1); Task,
	// Room, TaskID and HeldForMs are then the first one's.
	StalledShards []int `json:"stalled_shards,omitempty"`
	// Shards is each loop's report, in index order (loop.Config.Shards > 1 only).
	Shards []Report `json:"shards,omitempty"`
}

// ReadyReport is the body of /readyz.
type ReadyReport struct {
	// Status is "ready" (200) or "not_ready" (503).
	Status string `json:"status"`
	// Failing names each failing check: "starting", "draining", "stopped", "loop_lag",
	// "utilisation", "offload_queue".
	Failing []string `json:"failing"`
	// The figures compared and their limits (a limit of -1: the check is off).
	LoopLagMs        float64 `json:"loop_lag_ms"`
	MaxLoopLagMs     float64 `json:"max_loop_lag_ms"`
	Utilisation      float64 `json:"utilisation"` // -1 when unmeasured (accounting off, or just started)
	MaxUtilisation   float64 `json:"max_utilisation"`
	OffloadQueue     int     `json:"offload_queue"`
	MaxOffloadQueue  int     `json:"max_offload_queue"`
	Draining         bool    `json:"draining"`
	UtilisationSecs  int     `json:"utilisation_window_s"`
	LagSampleEveryMs float64 `json:"lag_sample_every_ms"`
	// FailingShards lists the loops failing a check (loop.Config.Shards > 1): Failing is
	// the union of their checks, the figures are the worst loop's.
	FailingShards []int `json:"failing_shards,omitempty"`
	// Shards is each loop's report, in index order (loop.Config.Shards > 1 only).
	Shards []ReadyReport `json:"shards,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Healthz evaluates /healthz: whether every loop turns, or what holds one. It never waits
// for a loop, so it answers while one is held. With several loops it fails while any is
// held, naming them. Any goroutine.
func (h *Checker) Healthz() Report {
	loops := h.srv.Loops()
	if len(loops) == 1 {
		return h.healthzOf(loops[0].Vitals())
	}
	r := Report{Status: "ok", Shards: make([]Report, len(loops))}
	for i, l := range loops {
		p := h.healthzOf(l.Vitals())
		r.Shards[i] = p
		switch {
		case p.Status == "stalled":
			if r.Status != "stalled" {
				r.Status, r.Task, r.Room, r.TaskID, r.HeldForMs = p.Status, p.Task, p.Room, p.TaskID, p.HeldForMs
			}
			r.StalledShards = append(r.StalledShards, i)
		case p.Status != "ok" && r.Status == "ok":
			r.Status = p.Status
		}
	}
	return r
}

// healthzOf is one loop's /healthz.
func (h *Checker) healthzOf(v accounting.Vitals) Report {
	switch v.Phase {
	case "starting":
		return Report{Status: "starting"}
	case "stopped":
		return Report{Status: "stopped"}
	}
	limit := h.cfg.StallAfter
	if limit < 0 || ((!v.Running || v.SliceFor < limit) && v.Overdue < limit) {
		return Report{Status: "ok"}
	}
	r := Report{Status: "stalled", HeldForMs: ms(v.Overdue)}
	if v.Running {
		r.Task, r.TaskID, r.HeldForMs = v.Task, v.TaskID, ms(max(v.SliceFor, v.Overdue))
		if room, ok := strings.CutPrefix(v.Task, "room:"); ok {
			r.Room = room
		}
	}
	return r
}

// Readyz evaluates /readyz: whether the server should be sent traffic. Like Healthz it
// never waits for a loop. With several loops it fails while any loop fails a check; the
// figures are the worst loop's and Failing the union of their failing checks. Any
// goroutine.
func (h *Checker) Readyz() ReadyReport {
	loops := h.srv.Loops()
	if len(loops) == 1 {
		return h.readyzOf(loops[0].Vitals())
	}
	var r ReadyReport
	shards := make([]ReadyReport, len(loops))
	for i, l := range loops {
		p := h.readyzOf(l.Vitals())
		shards[i] = p
		if i == 0 {
			r = ReadyReport{Failing: []string{}, MaxLoopLagMs: p.MaxLoopLagMs, MaxUtilisation: p.MaxUtilisation,
				MaxOffloadQueue: p.MaxOffloadQueue, Utilisation: p.Utilisation, OffloadQueue: p.OffloadQueue,
				UtilisationSecs: p.UtilisationSecs, LagSampleEveryMs: p.LagSampleEveryMs}
		}
		r.LoopLagMs = max(r.LoopLagMs, p.LoopLagMs)
		r.Utilisation = max(r.Utilisation, p.Utilisation)
		r.Draining = r.Draining || p.Draining
		for _, f := range p.Failing {
			if !slices.Contains(r.Failing, f) {
				r.Failing = append(r.Failing, f)
			}
		}
		if len(p.Failing) > 0 {
			r.FailingShards = append(r.FailingShards, i)
		}
	}
	r.Shards = shards
	r.Status = "ready"
	if len(r.Failing) > 0 {
		r.Status = "not_ready"
	}
	return r
}

// readyzOf is one loop's /readyz.
func (h *Checker) readyzOf(v accounting.Vitals) ReadyReport {
	cfg := &h.cfg
	r := ReadyReport{Failing: []string{}, MaxLoopLagMs: -1, MaxUtilisation: -1, MaxOffloadQueue: -1,
		Utilisation: v.Utilisation, OffloadQueue: v.OffloadQueued, LoopLagMs: ms(v.Lag),
		UtilisationSecs: int(v.UtilisationWindow / time.Second), LagSampleEveryMs: ms(v.LagSampleEvery)}
	switch v.Phase {
	case "starting":
		r.Failing = append(r.Failing, "starting")
	case "stopped":
		r.Draining = true
		r.Failing = append(r.Failing, "stopped")
	case "draining":
		r.Draining = true
		r.Failing = append(r.Failing, "draining")
	}
	if cfg.MaxLoopLag >= 0 {
		r.MaxLoopLagMs = ms(cfg.MaxLoopLag)
		if v.Lag > cfg.MaxLoopLag {
			r.Failing = append(r.Failing, "loop_lag")
		}
	}
	if cfg.MaxUtilisation >= 0 {
		r.MaxUtilisation = cfg.MaxUtilisation
		if r.Utilisation > cfg.MaxUtilisation {
			r.Failing = append(r.Failing, "utilisation")
		}
	}
	if cfg.MaxOffloadQueue >= 0 {
		r.MaxOffloadQueue = cfg.MaxOffloadQueue
		if r.OffloadQueue > cfg.MaxOffloadQueue {
			r.Failing = append(r.Failing, "offload_queue")
		}
	}
	r.Status = "ready"
	if len(r.Failing) > 0 {
		r.Status = "not_ready"
	}
	return r
}

// body renders a check: its status code and JSON body.
func (h *Checker) body(ready bool) (int, []byte) {
	var v any
	code := http.StatusOK
	if ready {
		r := h.Readyz()
		if r.Status != "ready" {
			code = http.StatusServiceUnavailable
		}
		v = r
	} else {
		r := h.Healthz()
		if r.Status != "ok" {
			code = http.StatusServiceUnavailable
		}
		v = r
	}
	b, err := json.Marshal(v)
	if err != nil { // plain data: cannot fail
		return http.StatusInternalServerError, []byte(`{"status":"error"}`)
	}
	return code, append(b, '\n')
}

// Handler returns a net/http handler serving /healthz and /readyz (any path ending in
// either) off the loop, for an admin listener or a Kubernetes probe port: it reads the
// loops' vitals and never posts to a loop, so it answers while a task holds the loop,
// naming it. 200 or 503, with a JSON body (Report, ReadyReport). Safe for concurrent use.
func (h *Checker) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ready bool
		switch {
		case strings.HasSuffix(r.URL.Path, "/readyz"):
			ready = true
		case strings.HasSuffix(r.URL.Path, "/healthz"):
		default:
			http.NotFound(w, r)
			return
		}
		code, body := h.body(ready)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_, _ = w.Write(body)
	})
}

// Mount adds GET /healthz and GET /readyz to the server's own port, Exempt from admission
// control, answered on the loop with the same checks as Handler. A route served on the
// loop cannot answer while a task holds the loop: its probe times out instead of reading
// 503, which a liveness probe treats alike, but only Handler (on another listener) can
// name the task. Call it before ListenAndServe, from the goroutine that adds routes.
func (h *Checker) Mount() {
	for _, p := range []struct {
		path  string
		ready bool
	}{{"/healthz", false}, {"/readyz", true}} {
		ready := p.ready
		h.srv.Handle("GET "+p.path, func(c *loop.Ctx) {
			code, body := h.body(ready)
			c.SetHeader("Cache-Control", "no-store")
			c.Bytes(code, "application/json", body)
		}, loop.Exempt())
	}
}
