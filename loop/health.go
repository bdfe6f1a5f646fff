package loop

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/internal/scheduler"
	"github.com/batonrt/baton/offload"
)

// Defaults of HealthConfig. Each is used where its field is zero; a negative field turns
// its check off.
const (
	// DefaultHealthStallAfter: /healthz fails while one task (or callback) has held the
	// loop for a second. By then every client of the process has waited a second, far past
	// any game's budget; shorter holds are latency problems the stall detector already
	// logs (Config.StallThreshold, 100 ms), not a reason for an orchestrator to restart
	// the process. A liveness probe sees only a hold in progress, so a longer threshold
	// would miss most of them.
	DefaultHealthStallAfter = time.Second

	// DefaultHealthMaxLoopLag: /readyz fails while the loop runs due work (timers, ticks,
	// reads) more than 100 ms late: every request then waits at least that long, the
	// interactive budget is gone, and more traffic only deepens the backlog. It matches
	// the stall threshold: a loop that late is stalling.
	DefaultHealthMaxLoopLag = 100 * time.Millisecond

	// DefaultHealthMaxUtilisation: /readyz fails while the loop was busy 95% of the last
	// ten seconds. Queueing delay grows without bound as utilisation nears 1, so a loop at
	// 95% has no headroom for a burst; ten seconds keeps one busy second (a burst, a
	// collection) from flapping readiness.
	DefaultHealthMaxUtilisation = 0.95
)

// DefaultHealthMaxOffloadQueue returns the default HealthConfig.MaxOffloadQueue for an
// offload configuration: half of one lane's queue bound (offload.Config.MaxWaiting), so
// that readiness fails, and traffic moves elsewhere, while the pool can still queue what
// it was sent instead of refusing it with ErrQueueFull. Any goroutine.
func DefaultHealthMaxOffloadQueue(oc offload.Config) int {
	w := oc.MaxWaiting
	if w == 0 {
		w = offload.DefaultMaxWaiting
	}
	return max(w/2, 1)
}

// healthUtilWindow is the utilisation window /readyz compares with MaxUtilisation.
const healthUtilWindow = 10 * time.Second

// healthSampleEvery is how often the loop samples its own lag for the health checks: a
// timer due every 100 ms and how late it runs. Ten timer callbacks a second cost the loop
// microseconds; a hog of a few tens of milliseconds is caught within a second.
const healthSampleEvery = 100 * time.Millisecond

// HealthConfig configures /healthz and /readyz (Server.HealthHandler, Server.HandleHealth).
// Zero fields take the defaults named; a negative field turns its check off.
type HealthConfig struct {
	// StallAfter: /healthz answers 503 while one task has held the loop this long, naming
	// it (or while the loop has not turned for this long, when no task is running).
	// Default DefaultHealthStallAfter; at least a millisecond.
	StallAfter time.Duration

	// MaxLoopLag: /readyz answers 503 while the loop's lag (how late a timer due on the
	// loop ran, the largest over the last one to two seconds, or how overdue the next one
	// is now) is above it. Default DefaultHealthMaxLoopLag.
	MaxLoopLag time.Duration

	// MaxUtilisation: /readyz answers 503 while the loop's utilisation over the last ten
	// complete seconds is above it (needs accounting). Between 0 and 1; default
	// DefaultHealthMaxUtilisation.
	MaxUtilisation float64

	// MaxOffloadQueue: /readyz answers 503 while more offloaded calls than this wait for a
	// token (offload.Pool.Queued). Default DefaultHealthMaxOffloadQueue(Config.Offload).
	MaxOffloadQueue int
}

// Validate reports the first invalid field, naming it. Any goroutine.
func (c HealthConfig) Validate() error {
	switch {
	case c.StallAfter > 0 && c.StallAfter < time.Millisecond:
		return fmt.Errorf("loop: Config.Health.StallAfter (%v) must be at least 1ms (0: default %v; negative: off)", c.StallAfter, DefaultHealthStallAfter)
	case math.IsNaN(c.MaxUtilisation) || c.MaxUtilisation > 1:
		return fmt.Errorf("loop: Config.Health.MaxUtilisation (%v) must be at most 1 (0: default %v; negative: off)", c.MaxUtilisation, DefaultHealthMaxUtilisation)
	}
	return nil
}

func (c HealthConfig) withDefaults(oc offload.Config) HealthConfig {
	if c.StallAfter == 0 {
		c.StallAfter = DefaultHealthStallAfter
	}
	if c.MaxLoopLag == 0 {
		c.MaxLoopLag = DefaultHealthMaxLoopLag
	}
	if c.MaxUtilisation == 0 {
		c.MaxUtilisation = DefaultHealthMaxUtilisation
	}
	if c.MaxOffloadQueue == 0 {
		c.MaxOffloadQueue = DefaultHealthMaxOffloadQueue(oc)
	}
	return c
}

// healthState is what the loop publishes for the health checks, read by any goroutine
// without the loop, plus the sampler's loop-owned state.
type healthState struct {
	cfg HealthConfig // immutable after New

	due  atomic.Int64  // loop clock when the next sample is due; 0 before the first
	lag  atomic.Int64  // largest sample lateness over the current and the previous second, ns
	util atomic.Uint64 // math.Float64bits of the utilisation over healthUtilWindow; NaN when unmeasured

	// Loop-owned.
	timer    *scheduler.Timer
	fn       func()
	dueAt    int64
	winStart int64 // the current lag second's start
	curMax   int64
	prevMax  int64
}

// initHealth sets the checks' configuration. Called by New.
func (s *Server) initHealth() {
	h := &s.health
	h.cfg = s.cfg.Health.withDefaults(s.cfg.Offload)
	h.util.Store(math.Float64bits(math.NaN()))
	h.fn = s.healthSample
}

// startHealth starts the loop's lag sampler. Loop-confined (called once the loop runs).
func (s *Server) startHealth() {
	h := &s.health
	now := s.nanotime()
	h.winStart = now
	h.dueAt = now + int64(healthSampleEvery)
	h.due.Store(h.dueAt)
	h.timer = s.sched.AfterFunc(healthSampleEvery, h.fn)
}

// healthSample runs on the loop every healthSampleEvery: it records how late it ran and
// the loop's utilisation, and publishes both. Loop-confined.
func (s *Server) healthSample() {
	h := &s.health
	now := s.nanotime()
	late := max(now-h.dueAt, 0)
	if now-h.winStart >= int64(time.Second) {
		h.prevMax, h.curMax, h.winStart = h.curMax, 0, now
	}
	h.curMax = max(h.curMax, late)
	h.lag.Store(max(h.curMax, h.prevMax))
	if s.acct.on {
		w := s.acct.loop.Window(s.timeAt(now), healthUtilWindow)
		u := math.NaN()
		if w.Elapsed > 0 {
			u = w.Utilisation()
		}
		h.util.Store(math.Float64bits(u))
	}
	if s.life.load() < stateStopping {
		h.dueAt = now + int64(healthSampleEvery)
		h.due.Store(h.dueAt)
		h.timer.Reset(healthSampleEvery)
	}
}

// HealthReport is the body of /healthz.
type HealthReport struct {
	// Status is "ok" (200), "stalled" (503: a task or callback holds the loop),
	// "starting" (503: the loop does not run yet) or "stopped" (503).
	Status string `json:"status"`
	// Task names what holds the loop when Status is "stalled": the route of a request
	// ("GET /x"), the name of a background task ("room:arena-7" for a room's tick), or ""
	// when no task runs (a posted function or callback) or accounting is off.
	Task string `json:"task,omitempty"`
	// Room is the room's name when Task is a room's ("room:<name>").
	Room string `json:"room,omitempty"`
	// TaskID is the scheduler's id of the task, 0 when none.
	TaskID uint64 `json:"task_id,omitempty"`
	// HeldForMs is how long the loop has been held so far, in milliseconds: by this task's
	// slice, or by it and what ran before it without the loop turning.
	HeldForMs float64 `json:"held_for_ms,omitempty"`
	// StalledShards lists the shards whose loop is held (Config.Shards > 1); Task, Room,
	// TaskID and HeldForMs are then the first one's.
	StalledShards []int `json:"stalled_shards,omitempty"`
	// Shards is each shard's report, in shard order (Config.Shards > 1 only).
	Shards []HealthReport `json:"shards,omitempty"`
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
	// FailingShards lists the shards failing a check (Config.Shards > 1): Failing is the
	// union of their checks, the figures are the worst shard's.
	FailingShards []int `json:"failing_shards,omitempty"`
	// Shards is each shard's report, in shard order (Config.Shards > 1 only).
	Shards []ReadyReport `json:"shards,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// overdue is how late the loop's next lag sample is now (0 when it is not due yet or the
// sampler does not run). Any goroutine.
func (s *Server) overdue() time.Duration {
	due := s.health.due.Load()
	if due == 0 {
		return 0
	}
	return time.Duration(max(s.nanotimeAny()-due, 0))
}

// Healthz evaluates /healthz: whether the loop turns, or what holds it. It reads what the
// loop and the scheduler publish and never waits for the loop, so it answers while the
// loop is held. With Config.Shards > 1 it fails while any shard's loop is held, naming
// the shards. Any goroutine.
func (s *Server) Healthz() HealthReport {
	if s.shards != nil {
		return s.shards.healthz() // shard_stats.go
	}
	return s.healthzOne()
}

// healthzOne is Healthz for this shard alone.
func (s *Server) healthzOne() HealthReport {
	switch st := s.life.load(); {
	case st < stateServing:
		return HealthReport{Status: "starting"}
	case st >= stateStopping:
		return HealthReport{Status: "stopped"}
	}
	limit := s.health.cfg.StallAfter
	if limit < 0 {
		return HealthReport{Status: "ok"}
	}
	id, elapsed, running := s.sched.Running()
	over := s.overdue()
	if (!running || elapsed < limit) && over < limit {
		return HealthReport{Status: "ok"}
	}
	r := HealthReport{Status: "stalled", HeldForMs: ms(over)}
	if running {
		name, _ := s.acct.current.Describe(id)
		// The name is this task's only if its slice still runs after Describe: the loop
		// cannot publish another while stuck. The loop may have been held for longer than
		// this slice (the lag sampler is overdue): the task is then the one holding it now.
		id2, el2, ok2 := s.sched.Running()
		if !ok2 || id2 != id || el2 < elapsed {
			if over < limit {
				return HealthReport{Status: "ok"} // the slice ended meanwhile: the loop turns
			}
			return r
		}
		r.Task, r.TaskID, r.HeldForMs = name, id, ms(max(el2, over))
		if room, ok := strings.CutPrefix(name, "room:"); ok {
			r.Room = room
		}
	}
	return r
}

// Readyz evaluates /readyz: whether the server should be sent traffic. Like Healthz it
// never waits for the loop. With Config.Shards > 1 it fails while any shard fails a
// check. Any goroutine.
func (s *Server) Readyz() ReadyReport {
	if s.shards != nil {
		return s.shards.readyz() // shard_stats.go
	}
	return s.readyzOne()
}

// readyzOne is Readyz for this shard alone.
func (s *Server) readyzOne() ReadyReport {
	cfg := &s.health.cfg
	r := ReadyReport{Failing: []string{}, MaxLoopLagMs: -1, MaxUtilisation: -1, MaxOffloadQueue: -1, Utilisation: -1,
		UtilisationSecs: int(healthUtilWindow / time.Second), LagSampleEveryMs: ms(healthSampleEvery)}
	st := s.life.load()
	r.Draining = st >= stateDraining
	switch {
	case st < stateServing:
		r.Failing = append(r.Failing, "starting")
	case st >= stateStopping:
		r.Failing = append(r.Failing, "stopped")
	case st >= stateDraining:
		r.Failing = append(r.Failing, "draining")
	}
	lag := max(time.Duration(s.health.lag.Load()), s.overdue())
	r.LoopLagMs = ms(lag)
	if cfg.MaxLoopLag >= 0 {
		r.MaxLoopLagMs = ms(cfg.MaxLoopLag)
		if lag > cfg.MaxLoopLag {
			r.Failing = append(r.Failing, "loop_lag")
		}
	}
	if u := math.Float64frombits(s.health.util.Load()); !math.IsNaN(u) {
		r.Utilisation = u
	}
	if cfg.MaxUtilisation >= 0 {
		r.MaxUtilisation = cfg.MaxUtilisation
		if r.Utilisation > cfg.MaxUtilisation {
			r.Failing = append(r.Failing, "utilisation")
		}
	}
	r.OffloadQueue = s.pool.Queued()
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

// healthBody renders a check: its status code and JSON body.
func (s *Server) healthBody(ready bool) (int, []byte) {
	var v any
	code := http.StatusOK
	if ready {
		r := s.Readyz()
		if r.Status != "ready" {
			code = http.StatusServiceUnavailable
		}
		v = r
	} else {
		r := s.Healthz()
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

// HealthHandler returns a net/http handler serving /healthz and /readyz (any path ending
// in either) off the loop, for an admin listener or a Kubernetes probe port: it reads what
// the loop and the scheduler publish (atomics) and never posts to the loop, so it answers
// while a task holds the loop, naming it. 200 or 503, with a JSON body (HealthReport,
// ReadyReport). Safe for concurrent use.
func (s *Server) HealthHandler() http.Handler {
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
		code, body := s.healthBody(ready)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_, _ = w.Write(body)
	})
}

// HandleHealth mounts GET /healthz and GET /readyz on this server's own port, Exempt from
// admission control, answered on the loop with the same checks as HealthHandler. A route
// served on the loop cannot answer while a task holds the loop: its probe times out
// instead of reading 503, which a liveness probe treats alike, but only HealthHandler
// (on another listener) can name the task. Call it before ListenAndServe.
func (s *Server) HandleHealth() {
	for _, p := range []struct {
		path  string
		ready bool
	}{{"/healthz", false}, {"/readyz", true}} {
		ready := p.ready
		s.Handle("GET "+p.path, func(c *Ctx) {
			code, body := s.healthBody(ready)
			c.SetHeader("Cache-Control", "no-store")
			c.Bytes(code, "application/json", body)
		}, Exempt())
	}
}
