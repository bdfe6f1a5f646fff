package accounting

// The server's own figures that package loop hands out as plain data: the admission
// section of the stats registry, the acceptor's counts, the record of a finished request
// (loop.Config.OnRequestDone) and a loop's vitals (loop.Loop.Vitals).

import (
	"net"
	"time"
)

// AcceptStats count what the acceptor met; the admission stats page shows them
// (AdmissionStats.Accept). Plain data.
type AcceptStats struct {
	Accepted        uint64 `json:"accepted_total"`        // connections accepted and handed to the loop
	ResourceErrors  uint64 `json:"resource_errors_total"` // accepts that failed for lack of descriptors or kernel memory
	Shed            uint64 `json:"shed_total"`            // connections accepted and closed at once because descriptors ran out
	OtherErrors     uint64 `json:"other_errors_total"`    // accepts that failed for another reason
	RegisterErrored uint64 `json:"register_errors_total"` // accepted connections gnet refused at once (engine stopping)
}

// AdmissionStats are the figures of the "admission" stats section (package loop/stats
// shows them): admission control's and the server-wide counts beside them. Counters are
// totals since start. Plain data.
type AdmissionStats struct {
	Limit              int         `json:"limit"`       // loop.Config.RequestConcurrency; 0: no limit
	QueueLimit         int         `json:"queue_limit"` // loop.Config.MaxQueueLength
	Active             int         `json:"active"`      // admitted requests holding a slot now
	Queued             int         `json:"queued"`      // requests waiting for a slot now
	AdmittedTotal      uint64      `json:"admitted_total"`
	QueuedTotal        uint64      `json:"queued_total"`  // of those admitted or waiting, how many had to queue
	RefusedTotal       uint64      `json:"refused_total"` // answered 429
	MeanServiceSeconds float64     `json:"mean_service_seconds"`
	RetryAfterSeconds  int         `json:"retry_after_seconds"` // what a refusal would advise now
	InFlight           int         `json:"in_flight"`           // handlers running or parked, exempt routes included
	Parsed             uint64      `json:"parsed_total"`        // requests parsed and dispatched
	PanicsTotal        uint64      `json:"panics_total"`        // handler and background task panics
	Accept             AcceptStats `json:"accept"`              // connections accepted, shed when descriptors ran out
}

// RequestRecord is what loop.Config.OnRequestDone receives when a request finishes: one line of
// an access log (package loop/accesslog writes them). It is filled on the loop and valid only during the call (the server
// reuses it, and Path views the request's buffer): copy the record, and the path with
// strings.Clone, to keep them.
type RequestRecord struct {
	Time    time.Time     // the request's arrival (a bound from the loop turn that read it: docs/health.md), its start
	Method  string        // "GET", ...
	Route   string        // the matched route pattern, "" when none matched (404, 405, 503 while draining)
	Path    string        // the path as sent, without the query; valid only during the call
	Status  int           // the response status (503 when the handler deadline answered for it)
	Bytes   int64         // response bytes written to the connection, head included
	Latency time.Duration // from Time to the response complete
	OnLoop  time.Duration // time the handler ran (on the loop, or its goroutine's stretches in multi-thread mode)
	Queue   time.Duration // time waiting to run: admission queue and ready queue
	Parked  time.Duration // time parked (sleeping, waiting, offloaded, backpressure, admission queue)
	Rounds  uint64        // times the handler was scheduled
	Remote  net.Addr      // the client's address
	TaskID  uint64        // the handler's task id, 0 when no handler ran
}

// Vitals is what a loop publishes about itself for other goroutines, read without waiting
// for the loop (atomics and the scheduler's published slot), so it answers while a task
// holds the loop and can name that task. Package loop/health turns it into /healthz and
// /readyz. Plain data.
type Vitals struct {
	// Phase is the server's lifecycle phase: "starting" (the loop does not run yet),
	// "serving", "draining" (Shutdown began) or "stopped" (the loop is unwinding or gone).
	Phase string
	// Lag is how late the loop runs due work: the largest lateness of its lag sample (a
	// timer due every LagSampleEvery) over the current and the previous second, or how
	// overdue the next sample is now (Overdue), whichever is larger.
	Lag time.Duration
	// LagHeld is the lateness the loop's lag samples reached in the previous second and
	// again in this one (in its first three samples, the previous second's): how late
	// the loop has run for a while, which one late sample (a collection, a moment
	// without a CPU) does not raise. loop/ws refuses upgrades on it.
	LagHeld time.Duration
	// Overdue is how late the next lag sample is now: the time the loop has not turned
	// for, past LagSampleEvery. 0 while it is not due or before the loop runs.
	Overdue time.Duration
	// LagSampleEvery is how often the loop samples its own lag: 100 ms. Ten timer
	// callbacks a second cost the loop microseconds; a hog of a few tens of milliseconds
	// is caught within a second.
	LagSampleEvery time.Duration
	// Utilisation is the loop's busy share over the last UtilisationWindow, in [0, 1]; -1
	// when unmeasured (accounting off, or not yet one window).
	Utilisation float64
	// UtilisationWindow is the window of Utilisation: ten complete seconds, so that one
	// busy second (a burst, a collection) does not swing it.
	UtilisationWindow time.Duration
	// Running reports whether a task's slice runs on the loop now; Task, TaskID and
	// SliceFor then name it: its route ("GET /x") or background task name ("room:arena-7"
	// for a room's tick; "" when accounting is off), its id, and how long this slice has
	// run.
	Running  bool
	Task     string
	TaskID   uint64
	SliceFor time.Duration
	// OffloadQueued is how many offloaded calls wait for a token in the process's shared
	// offload pool (offload.Pool.Queued).
	OffloadQueued int
}
