// Package promexport exports a baton server's figures to Prometheus: a
// prometheus.Collector that reads the server's snapshots (stats.Take, package loop/stats) at scrape time,
// so it costs the loop nothing per request, only one copy of its figures per scrape.
//
// It is a module of its own (promexport/go.mod) so that programs importing baton do not get
// client_golang in their module graph unless they import this package.
//
// Metrics follow the client_golang conventions: names start with baton_, durations are in
// seconds, counters end in _total, no percentiles are precomputed (histograms aggregate
// across routes and instances, percentiles cannot), and nothing reports a maximum since
// start. Per route (the label route is the pattern, e.g. "GET /users/{id}", never a raw
// path, so cardinality is bounded by the routes a program registers): requests by status
// code class (label code), requests in flight and four histograms (latency, time on the
// loop, queue delay, time parked); a WebSocket route has a session-length histogram
// instead. The admin routes (AdminRoute: stats pages, health probes, /metrics) are left
// out unless IncludeAdminRoutes is given. Then the loop (utilisation, busy time, lag,
// slices, ready queue, tasks, stalls), admission (slots, queue, 429s, panics, accepts),
// drain and readiness, the offload pool per lane and its gates, rooms (counters that
// survive the rooms that end), WebSockets per route, a room directory node's handoffs
// (baton_cluster_*: counters and the freeze-to-first-tick gap); baton_build_info and
// baton_start_time_seconds. Registry adds the Go runtime's and the process's collectors.
// docs/observability.md lists every metric and which question it answers, and
// promexport/deploy holds a Grafana dashboard and Prometheus alert rules built on them.
//
// Histograms are baton's HDR histograms read as cumulative buckets at
// accounting.BucketBounds (1 us to 10 s), with exact counts and sums.
package promexport

import (
	"bytes"
	"context"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/health"
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/loop/ws"
	"github.com/batonrt/baton/offload"
)

// DefaultTimeout bounds how long a scrape waits for the loop's snapshot: a loop that does
// not answer within it is stalled, and the scrape reports the error rather than hang.
const DefaultTimeout = 5 * time.Second

// Collector is a prometheus.Collector of one baton server's figures. Create it with
// NewCollector and register it (prometheus.MustRegister or a Registry of your own), once:
// it keeps the room counters across scrapes. Safe for concurrent use; Collect must not be
// called on the server's loop goroutine (it waits for the loop).
type Collector struct {
	srv     *loop.Server
	timeout time.Duration
	opts    options

	rooms roomCounters // the rooms' counters, kept across scrapes (rooms.go)

	startOnce sync.Once
	start     float64 // Unix time the server started, from the first snapshot
}

// An Option changes what NewCollector exports or what Registry registers.
type Option func(*options)

type options struct {
	adminRoutes bool              // IncludeAdminRoutes
	skip        func(string) bool // SkipRoutes
	noRuntime   bool              // WithoutRuntimeCollectors
	health      *health.Checker   // WithHealth
}

// IncludeAdminRoutes keeps the per-route series of the admin routes (AdminRoute), which
// are left out by default: they are a dozen routes (the stats pages, the dashboard and its
// event stream, health probes, /metrics) of about a hundred series each, and their traffic
// is the operators' own. Any goroutine.
func IncludeAdminRoutes() Option { return func(o *options) { o.adminRoutes = true } }

// SkipRoutes leaves out the per-route series of every route for which skip returns true,
// besides the admin routes: routes of your own that Prometheus need not see, such as
// probes mounted at other paths. skip gets the route as the route label shows it ("GET
// /status") and is called at each scrape, on the scraping goroutine. Any goroutine.
func SkipRoutes(skip func(route string) bool) Option {
	return func(o *options) { o.skip = skip }
}

// WithoutRuntimeCollectors leaves the Go runtime's and the process's collectors (go_*,
// process_*) out of Registry, for a program that registers them itself. NewCollector
// ignores it. Any goroutine.
func WithoutRuntimeCollectors() Option { return func(o *options) { o.noRuntime = true } }

// WithHealth makes baton_ready follow the application's own health checks (the limits it
// gave health.New) instead of a checker with the default limits. Any goroutine.
func WithHealth(h *health.Checker) Option { return func(o *options) { o.health = h } }

// AdminRoute reports whether route (method and pattern, as the route label shows it) is
// one of the routes left out by default: a path under /debug/ (the stats pages and the
// dashboard that stats.Mount mounts at its usual prefix /debug/baton, and
// net/http/pprof's), the health probes /healthz, /readyz and /livez, and /metrics. The
// loop does not tell which routes were registered Exempt, so the paths decide; mount
// admin routes elsewhere and add them with SkipRoutes. Any goroutine.
func AdminRoute(route string) bool {
	path := route
	if i := strings.IndexByte(path, ' '); i >= 0 { // the method
		path = path[i+1:]
	}
	if i := strings.IndexByte(path, '/'); i > 0 { // a host pattern
		path = path[i:]
	}
	switch path {
	case "/healthz", "/readyz", "/livez", "/metrics", "/debug":
		return true
	}
	return strings.HasPrefix(path, "/debug/")
}

// NewCollector returns a collector of srv's figures; each Collect takes one snapshot of
// every section (loop, routes, offload, admission, rooms, WebSockets, cluster; not the
// tasks, whose count grows with the connections) with DefaultTimeout. Any goroutine.
func NewCollector(srv *loop.Server, opts ...Option) *Collector {
	c := &Collector{srv: srv, timeout: DefaultTimeout}
	for _, o := range opts {
		o(&c.opts)
	}
	if c.opts.health == nil {
		c.opts.health, _ = health.New(srv, health.Config{}) // the zero Config is valid
	}
	return c
}

// keep reports whether route gets per-route series.
func (c *Collector) keep(route string) bool {
	if !c.opts.adminRoutes && AdminRoute(route) {
		return false
	}
	return c.opts.skip == nil || !c.opts.skip(route)
}

// scrapeViews are the sections a scrape reads.
const scrapeViews = stats.ViewLoop | stats.ViewRoutes | stats.ViewOffload | stats.ViewAdmission | stats.ViewSections

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("baton_"+name, help, labels, nil)
}

// The metrics. Labels: route (method and pattern), code (status code class), window
// (utilisation window), lane (offload lane), gate (gate name), kind (accept failure),
// direction (WebSocket traffic), version and goversion (build info).
var (
	dBuildInfo = desc("build_info", "1, labelled with baton's module version and the Go version the program was built with.", "version", "goversion")
	dStartTime = desc("start_time_seconds", "Unix time the server's loop started, in seconds.")
	dDraining  = desc("draining", "1 once Shutdown has begun (the server drains: no new work, in-flight work finishes), else 0.")
	dReady     = desc("ready", "1 while /readyz would answer 200 (serving, not draining, under its lag, utilisation and offload-queue limits), else 0.")

	dRequests = desc("http_requests_total", "Requests finished, by route pattern and status code class (1xx_3xx, 4xx, 5xx).", "route", "code")
	dInFlight = desc("http_requests_in_flight", "Requests of the route started and not finished (WebSocket routes: see baton_websocket_connections).", "route")
	dLatency  = desc("http_request_duration_seconds", "Request latency, from accept to the end of the response.", "route")
	dOnLoop   = desc("http_request_on_loop_seconds", "Time each request held the event loop.", "route")
	dQueue    = desc("http_request_queue_delay_seconds", "Time each request was ready but waited for the loop (admission queue included).", "route")
	dParked   = desc("http_request_parked_seconds", "Time each request was parked: sleeps, offloaded work, waits, write backpressure, admission queue.", "route")

	dBusy        = desc("loop_busy_seconds_total", "Time the loop spent running tasks and callbacks; rate() of it is the utilisation.")
	dUtil        = desc("loop_utilisation_ratio", "Busy time over the last complete seconds of the window, 0 to 1.", "window")
	dLag         = desc("loop_lag_seconds", "Time a task waited ready before each slice it ran (ready to running).")
	dSlices      = desc("loop_slices_total", "Task slices run on the loop.")
	dSliceSecs   = desc("loop_slice_seconds_total", "Total length of the slices.")
	dSlowSlices  = desc("loop_slow_slices_total", "Slices longer than the slow-slice threshold (50 us by default).")
	dSlowSecs    = desc("loop_slow_slice_seconds_total", "Total length of the slow slices.")
	dReadyDepth  = desc("loop_ready_depth", "Ready-queue depth at the last sample.")
	dTasksStart  = desc("loop_tasks_started_total", "Tasks spawned on the loop.")
	dTasksDone   = desc("loop_tasks_completed_total", "Tasks finished.")
	dTasksLive   = desc("loop_tasks_live", "Tasks started and not finished.")
	dStalls      = desc("loop_stalls_total", "Slices that held the loop past the stall threshold.")
	dStallNow    = desc("loop_stall_in_progress", "1 while a stall is in progress.")
	dStallSecs   = desc("loop_stall_seconds", "Length of the stalls.")
	dAdmLimit    = desc("admission_limit", "Handler slots (Config.RequestConcurrency; 0: no limit).")
	dAdmActive   = desc("admission_active", "Admitted requests holding a slot.")
	dAdmQueued   = desc("admission_queued", "Requests waiting for a slot.")
	dAdmQLimit   = desc("admission_queue_limit", "Longest admission queue (Config.MaxQueueLength).")
	dAdmAdmitted = desc("admission_admitted_total", "Requests admitted.")
	dAdmQueuedT  = desc("admission_queued_total", "Requests that had to queue for a slot.")
	dAdmRefused  = desc("admission_refused_total", "Requests refused with 429 Too Many Requests.")
	dParsed      = desc("http_requests_parsed_total", "Requests parsed and dispatched, admin routes included.")
	dPanics      = desc("panics_total", "Handler and background task panics.")
	dAccepted    = desc("accept_connections_total", "Connections accepted and handed to the loop.")
	dAcceptErrs  = desc("accept_errors_total", "Accepts that failed: resource (no descriptors or kernel memory), other, register (the engine refused the connection).", "kind")
	dShed        = desc("accept_shed_total", "Connections accepted and closed at once because descriptors ran out.")

	dOffTokens    = desc("offload_tokens", "Tokens (concurrent offloaded functions) of the lane.", "lane")
	dOffInUse     = desc("offload_tokens_in_use", "Tokens held by running functions.", "lane")
	dOffQueue     = desc("offload_queue", "Calls waiting for a token (capped calls included).", "lane")
	dOffCapped    = desc("offload_capped", "Calls waiting because their route holds its share of the lane.", "lane")
	dOffStarted   = desc("offload_started_total", "Functions started.", "lane")
	dOffCompleted = desc("offload_completed_total", "Functions that returned or panicked.", "lane")
	dOffRejected  = desc("offload_rejected_total", "Calls refused because the queue was full.", "lane")
	dOffCancelled = desc("offload_cancelled_total", "Callers that left while queued or running.", "lane")
	dOffTimeouts  = desc("offload_timeouts_total", "Calls whose timeout passed.", "lane")
	dOffPanics    = desc("offload_panics_total", "Offloaded functions that panicked.", "lane")
	dOffWait      = desc("offload_wait_seconds", "Time from a call to its function's start.", "lane")
	dOffRun       = desc("offload_run_seconds", "Time offloaded functions ran.", "lane")
	dOffWorkers   = desc("offload_workers", "Live worker goroutines.")
	dOffIdle      = desc("offload_workers_idle", "Idle worker goroutines.")

	dGateSize     = desc("gate_size", "Places of the gate.", "gate")
	dGateInUse    = desc("gate_in_use", "Places taken.", "gate")
	dGateWaiting  = desc("gate_waiting", "Callers queued for a place.", "gate")
	dGateEntered  = desc("gate_entered_total", "Places taken since start.", "gate")
	dGateRejected = desc("gate_rejected_total", "Calls refused: gate full (TryEnter) or queue full (Enter).", "gate")
	dGateWait     = desc("gate_wait_seconds", "Time Enter waited for a place.", "gate")

	// Rooms come and go (a match is a room), so they get no label of their own; the busiest
	// rooms are named on /debug/baton/rooms. The gauges describe the rooms in the server's
	// table at the scrape; the counters are kept by the collector so that they survive the
	// rooms that end (rooms.go).
	dRooms        = desc("rooms", "Rooms in the server's table: running, draining, and stopped within the last minute.")
	dRoomMembers  = desc("rooms_members", "Member tasks of the rooms in the table.")
	dRoomShare    = desc("rooms_loop_share_ratio", "Share of the loop's time spent on rooms (ticks and members) over the window, 0 to 1.", "window")
	dRoomQueued   = desc("rooms_inputs_queued", "Inputs waiting in the rooms' queues for their next tick.")
	dRoomTicks    = desc("rooms_ticks_total", "Room ticks run.")
	dRoomOverruns = desc("rooms_tick_overruns_total", "Room ticks whose time on the loop was over the room's budget.")
	dRoomSkipped  = desc("rooms_ticks_skipped_total", "Tick deadlines passed and never run (the rooms' late policy).")
	dRoomTickSecs = desc("rooms_tick_seconds_total", "Time on the loop of the room ticks, in total; over rooms_ticks_total, the mean tick.")
	dRoomLateSecs = desc("rooms_tick_lateness_seconds_total", "Lateness of the room ticks (deadline to start), in total; over rooms_ticks_total, the mean lateness.")
	dRoomInputs   = desc("rooms_inputs_total", "Inputs queued for rooms.")
	dRoomDropped  = desc("rooms_inputs_dropped_total", "Inputs dropped or refused because a room's queue was full.")

	dWSOpen      = desc("websocket_connections", "WebSocket connections open.", "route")
	dWSSession   = desc("websocket_session_seconds", "Length of the ended WebSocket sessions (their requests, from accept to the handler's return); buckets from 10 ms to 10 s.", "route")
	dWSUpgrades  = desc("websocket_upgrades_total", "Upgrades accepted.", "route")
	dWSMessages  = desc("websocket_messages_total", "Messages received (in) and sent (out).", "route", "direction")
	dWSBytes     = desc("websocket_payload_bytes_total", "Payload bytes received (in) and sent (out).", "route", "direction")
	dWSQueued    = desc("websocket_queued_bytes", "Output queued and not yet taken by the kernel.", "route")
	dWSSlow      = desc("websocket_slow_consumer_closes_total", "Connections closed for not reading.", "route")
	dWSPingTO    = desc("websocket_ping_timeouts_total", "Connections dropped for not answering a ping.", "route")
	dWSPeerClose = desc("websocket_peer_closes_total", "Close handshakes the client began.", "route")
	dWSProtoErrs = desc("websocket_protocol_errors_total", "Connections closed for a protocol violation (1002, 1007, 1009).")

	allDescs = []*prometheus.Desc{
		dBuildInfo, dStartTime, dDraining, dReady,
		dRequests, dInFlight, dLatency, dOnLoop, dQueue, dParked,
		dBusy, dUtil, dLag, dSlices, dSliceSecs, dSlowSlices, dSlowSecs, dReadyDepth,
		dTasksStart, dTasksDone, dTasksLive, dStalls, dStallNow, dStallSecs,
		dAdmLimit, dAdmActive, dAdmQueued, dAdmQLimit, dAdmAdmitted, dAdmQueuedT, dAdmRefused,
		dParsed, dPanics, dAccepted, dAcceptErrs, dShed,
		dOffTokens, dOffInUse, dOffQueue, dOffCapped, dOffStarted, dOffCompleted, dOffRejected,
		dOffCancelled, dOffTimeouts, dOffPanics, dOffWait, dOffRun, dOffWorkers, dOffIdle,
		dGateSize, dGateInUse, dGateWaiting, dGateEntered, dGateRejected, dGateWait,
		dRooms, dRoomMembers, dRoomShare, dRoomQueued, dRoomTicks, dRoomOverruns, dRoomSkipped,
		dRoomTickSecs, dRoomLateSecs, dRoomInputs, dRoomDropped,
		dWSOpen, dWSSession, dWSUpgrades, dWSMessages, dWSBytes, dWSQueued, dWSSlow, dWSPingTO, dWSPeerClose, dWSProtoErrs,
	}
)

// sessionBounds are the buckets of baton_websocket_session_seconds: the bounds of
// accounting.BucketBounds from 10 ms up (a session shorter than that is an upgrade that
// failed), so a WebSocket route costs 13 series of histogram, not 100.
var sessionBounds = func() (ks []int) {
	for k, b := range accounting.BucketBounds {
		if b >= 10*time.Millisecond {
			ks = append(ks, k)
		}
	}
	return ks
}()

// buildVersion is baton's module version as the program's build info records it:
// "(devel)" for a checkout used through a replace directive or a go.work, "" when the
// program has no build info.
var buildVersion = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	const path = "github.com/batonrt/baton"
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	for _, m := range bi.Deps {
		if m.Path != path {
			continue
		}
		if m.Replace != nil {
			if m.Replace.Version != "" {
				return m.Replace.Version
			}
			return "(devel)"
		}
		return m.Version
	}
	return "(devel)" // baton's own tests and a go.work build
})

// Describe sends the descriptors of every metric the collector makes. Any goroutine.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
	for _, d := range clusterDescs {
		ch <- d
	}
}

// Collect takes one snapshot of the server and sends its metrics. When the snapshot fails
// (the server stopped, or its loop did not answer within the timeout) it sends one invalid
// metric carrying the error, so the scrape reports it. Any goroutine but the server's
// loop.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	snap, err := stats.Take(ctx, c.srv, scrapeViews)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(dStartTime, err)
		return
	}
	gauge(ch, dBuildInfo, 1, buildVersion(), runtime.Version())
	if snap.Loop.Uptime > 0 {
		c.startOnce.Do(func() {
			c.start = float64(snap.Taken.Add(-snap.Loop.Uptime).UnixMilli()) / 1e3
		})
		gauge(ch, dStartTime, c.start)
	}
	gauge(ch, dDraining, bool01(c.srv.Draining().Done()))
	gauge(ch, dReady, bool01(c.opts.health.Readyz().Status == "ready"))

	wss := websocketsOf(&snap)
	upgraded := make(map[string]bool, len(wss.Routes))
	for _, r := range wss.Routes {
		upgraded[r.Route] = true
	}
	c.collectRoutes(ch, snap.Routes, upgraded)
	collectLoop(ch, &snap.Loop)
	collectAdmission(ch, &snap.Admission)
	collectOffload(ch, &snap.Offload)
	c.collectRooms(ch, snap.Taken, roomsOf(&snap))
	c.collectWebSockets(ch, &wss)
	collectHandoffs(ch, &snap)
}

// websocketsOf returns the WebSocket figures of snap: loop/ws's stats section, or none when
// no connection was upgraded yet.
func websocketsOf(snap *stats.Snapshot) ws.Stats {
	st, _ := snap.Sections[ws.Section.Name].(ws.Stats)
	return st
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *Collector) collectRooms(ch chan<- prometheus.Metric, taken time.Time, rs *accounting.RoomsSnapshot) {
	var members, queued int
	var share [len(accounting.UtilisationWindows)]float64
	add := func(r *accounting.RoomSnapshot) {
		members += r.Members
		queued += r.Queued
		for k := range share {
			share[k] += r.Share[k]
		}
	}
	for i := range rs.Rooms {
		add(&rs.Rooms[i])
	}
	if rs.Other != nil {
		add(rs.Other)
	}
	gauge(ch, dRooms, float64(rs.Total))
	gauge(ch, dRoomMembers, float64(members))
	gauge(ch, dRoomQueued, float64(queued))
	for k, w := range accounting.UtilisationWindows {
		gauge(ch, dRoomShare, share[k], strconv.Itoa(int(w/time.Second))+"s")
	}
	f := c.rooms.update(taken, rs)
	counter(ch, dRoomTicks, float64(f[figTicks]))
	counter(ch, dRoomOverruns, float64(f[figOverruns]))
	counter(ch, dRoomSkipped, float64(f[figSkipped]))
	counter(ch, dRoomTickSecs, time.Duration(f[figTickNanos]).Seconds())
	counter(ch, dRoomLateSecs, time.Duration(f[figLateNanos]).Seconds())
	counter(ch, dRoomInputs, float64(f[figInputs]))
	counter(ch, dRoomDropped, float64(f[figDropped]))
}

func (c *Collector) collectWebSockets(ch chan<- prometheus.Metric, st *ws.Stats) {
	counter(ch, dWSProtoErrs, float64(st.ProtocolErrors))
	for i := range st.Routes {
		r := &st.Routes[i]
		if !c.keep(r.Route) {
			continue
		}
		gauge(ch, dWSOpen, float64(r.Open), r.Route)
		counter(ch, dWSUpgrades, float64(r.Upgrades), r.Route)
		counter(ch, dWSMessages, float64(r.MessagesIn), r.Route, "in")
		counter(ch, dWSMessages, float64(r.MessagesOut), r.Route, "out")
		counter(ch, dWSBytes, float64(r.BytesIn), r.Route, "in")
		counter(ch, dWSBytes, float64(r.BytesOut), r.Route, "out")
		gauge(ch, dWSQueued, float64(r.QueuedBytes), r.Route)
		counter(ch, dWSSlow, float64(r.SlowConsumerCloses), r.Route)
		counter(ch, dWSPingTO, float64(r.PingTimeouts), r.Route)
		counter(ch, dWSPeerClose, float64(r.PeerCloses), r.Route)
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// histogram sends s as a Prometheus histogram: its cumulative buckets at
// accounting.BucketBounds, its exact count and sum in seconds.
func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, s accounting.Summary, labels ...string) {
	buckets := make(map[float64]uint64, accounting.NumBuckets)
	for k, b := range accounting.BucketBounds {
		buckets[b.Seconds()] = s.Buckets[k]
	}
	ch <- prometheus.MustNewConstHistogram(d, s.Count, s.Sum.Seconds(), buckets, labels...)
}

// sessionHistogram sends s as a histogram with the buckets of sessionBounds only.
func sessionHistogram(ch chan<- prometheus.Metric, d *prometheus.Desc, s accounting.Summary, labels ...string) {
	buckets := make(map[float64]uint64, len(sessionBounds))
	for _, k := range sessionBounds {
		buckets[accounting.BucketBounds[k].Seconds()] = s.Buckets[k]
	}
	ch <- prometheus.MustNewConstHistogram(d, s.Count, s.Sum.Seconds(), buckets, labels...)
}

// collectRoutes sends the per-route series of the routes kept; a WebSocket route (one
// that upgraded at least once: ws) gets its session-length histogram and no request
// histograms, whose "latency" would be the sessions' length.
func (c *Collector) collectRoutes(ch chan<- prometheus.Metric, rs []accounting.RouteSnapshot, ws map[string]bool) {
	for i := range rs {
		r := &rs[i]
		if !c.keep(r.Route) {
			continue
		}
		counter(ch, dRequests, float64(r.Count-r.Errors-r.ClientErrors), r.Route, "1xx_3xx")
		counter(ch, dRequests, float64(r.ClientErrors), r.Route, "4xx")
		counter(ch, dRequests, float64(r.Errors), r.Route, "5xx")
		if ws[r.Route] {
			sessionHistogram(ch, dWSSession, r.Latency.Cumulative, r.Route)
			continue
		}
		gauge(ch, dInFlight, float64(r.InFlight), r.Route)
		histogram(ch, dLatency, r.Latency.Cumulative, r.Route)
		histogram(ch, dOnLoop, r.OnLoop.Cumulative, r.Route)
		histogram(ch, dQueue, r.QueueDelay.Cumulative, r.Route)
		histogram(ch, dParked, r.Parked.Cumulative, r.Route)
	}
}

func collectLoop(ch chan<- prometheus.Metric, l *accounting.LoopSnapshot) {
	if l.Uptime == 0 {
		return // accounting is off
	}
	counter(ch, dBusy, l.BusyTotal.Seconds())
	for _, w := range l.Utilisation {
		gauge(ch, dUtil, w.Utilisation(), strconv.Itoa(int(w.Length/time.Second))+"s")
	}
	histogram(ch, dLag, l.Lag)
	counter(ch, dSlices, float64(l.Slices.Count))
	counter(ch, dSliceSecs, l.Slices.Total.Seconds())
	counter(ch, dSlowSlices, float64(l.Slices.Slow))
	counter(ch, dSlowSecs, l.Slices.SlowTotal.Seconds())
	gauge(ch, dReadyDepth, float64(l.ReadyDepth))
	counter(ch, dTasksStart, float64(l.TasksStarted))
	counter(ch, dTasksDone, float64(l.TasksDone))
	gauge(ch, dTasksLive, float64(l.LiveTasks()))
	if st := l.Stalls; st != nil {
		counter(ch, dStalls, float64(st.Count))
		gauge(ch, dStallNow, bool01(st.InProgress))
		histogram(ch, dStallSecs, st.Durations)
	}
}

func collectAdmission(ch chan<- prometheus.Metric, a *accounting.AdmissionStats) {
	gauge(ch, dAdmLimit, float64(a.Limit))
	gauge(ch, dAdmActive, float64(a.Active))
	gauge(ch, dAdmQueued, float64(a.Queued))
	gauge(ch, dAdmQLimit, float64(a.QueueLimit))
	counter(ch, dAdmAdmitted, float64(a.AdmittedTotal))
	counter(ch, dAdmQueuedT, float64(a.QueuedTotal))
	counter(ch, dAdmRefused, float64(a.RefusedTotal))
	counter(ch, dParsed, float64(a.Parsed))
	counter(ch, dPanics, float64(a.PanicsTotal))
	counter(ch, dAccepted, float64(a.Accept.Accepted))
	counter(ch, dAcceptErrs, float64(a.Accept.ResourceErrors), "resource")
	counter(ch, dAcceptErrs, float64(a.Accept.OtherErrors), "other")
	counter(ch, dAcceptErrs, float64(a.Accept.RegisterErrored), "register")
	counter(ch, dShed, float64(a.Accept.Shed))
}
func collectOffload(ch chan<- prometheus.Metric, o *offload.Report) {
	p := &o.Pool
	gauge(ch, dOffWorkers, float64(p.Workers))
	gauge(ch, dOffIdle, float64(p.IdleWorkers))
	for i := range p.Lanes {
		l := &p.Lanes[i]
		lane := l.Lane
		gauge(ch, dOffTokens, float64(l.Tokens), lane)
		gauge(ch, dOffInUse, float64(l.InUse), lane)
		gauge(ch, dOffQueue, float64(l.Waiting), lane)
		gauge(ch, dOffCapped, float64(l.Capped), lane)
		counter(ch, dOffStarted, float64(l.Started), lane)
		counter(ch, dOffCompleted, float64(l.Completed), lane)
		counter(ch, dOffRejected, float64(l.Rejected), lane)
		counter(ch, dOffCancelled, float64(l.Cancelled), lane)
		counter(ch, dOffTimeouts, float64(l.TimedOut), lane)
		counter(ch, dOffPanics, float64(l.Panicked), lane)
		histogram(ch, dOffWait, l.Wait, lane)
		histogram(ch, dOffRun, l.Run, lane)
	}
	for i := range o.Gates {
		g := &o.Gates[i]
		gauge(ch, dGateSize, float64(g.Size), g.Name)
		gauge(ch, dGateInUse, float64(g.InUse), g.Name)
		gauge(ch, dGateWaiting, float64(g.Waiting), g.Name)
		counter(ch, dGateEntered, float64(g.Entered), g.Name)
		counter(ch, dGateRejected, float64(g.Rejected+g.QueueFull), g.Name)
		histogram(ch, dGateWait, g.Wait, g.Name)
	}
}

// Registry returns a new registry holding a collector of srv (NewCollector with opts) and,
// unless WithoutRuntimeCollectors is given, the Go runtime's collector (go_goroutines,
// go_memstats_*, go_gc_duration_seconds, ...) and the process's (process_open_fds,
// process_resident_memory_bytes, process_cpu_seconds_total, ...). Make it once and serve
// it at every scrape: the collector keeps the room counters between scrapes. Any
// goroutine.
func Registry(srv *loop.Server, opts ...Option) *prometheus.Registry {
	c := NewCollector(srv, opts...)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if !c.opts.noRuntime {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return reg
}

// Handler returns a baton handler serving g's metrics in the text exposition format, to
// mount on the server itself, e.g.
//
//	srv.Handle("GET /metrics", promexport.Handler(promexport.Registry(srv)), loop.Exempt())
//
// The gathering (which waits for the loop's snapshot) and the encoding run in the offload
// pool while the handler parks, so the loop only copies its figures. On an admin address,
// serve promhttp.HandlerFor(g, promhttp.HandlerOpts{}) from a net/http server instead.
// The handler runs on the loop like any other.
func Handler(g prometheus.Gatherer) func(*loop.Ctx) {
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	return func(c *loop.Ctx) {
		out, err := offload.Do(c, func(context.Context) ([]byte, error) {
			mfs, err := g.Gather()
			var buf bytes.Buffer
			enc := expfmt.NewEncoder(&buf, format)
			for _, mf := range mfs {
				if eerr := enc.Encode(mf); eerr != nil && err == nil {
					err = eerr
				}
			}
			return buf.Bytes(), err
		})
		if err != nil { // as promhttp's default (HTTPErrorOnError): a partial scrape is an error
			c.String(500, "500 Internal Server Error: "+err.Error()+"\n")
			return
		}
		c.Bytes(200, string(format), out)
	}
}
