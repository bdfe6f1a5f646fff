// Package promexport exports a baton server's figures to Prometheus: a
// prometheus.Collector that reads the server's snapshots (Server.Snapshot) at scrape time,
// so it costs the loop nothing per request, only one copy of its figures per scrape.
//
// It is a module of its own (promexport/go.mod) so that programs importing baton do not get
// client_golang in their module graph unless they import this package.
//
// Metrics (all names start with baton_, durations are in seconds, counters end in _total):
// per route (the label route is the pattern, e.g. "GET /users/{id}", never a raw path, so
// cardinality is bounded by the routes a program registers) request counts by status
// class, requests in flight and four histograms (latency, time on the loop, queue delay,
// time parked); the loop's utilisation, busy time, lag histogram, slices, ready queue,
// tasks and stalls; admission (slots, queue, 429s, panics, accepts); the offload pool per
// lane (tokens, in use, queue, timeouts, wait and run histograms) and its gates.
// docs/observability.md lists every metric and which question it answers.
//
// Histograms are baton's HDR histograms read as cumulative buckets at
// accounting.BucketBounds (1 us to 10 s), with exact counts and sums: they aggregate across
// routes and instances, which percentiles cannot.
package promexport

import (
	"bytes"
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// DefaultTimeout bounds how long a scrape waits for the loop's snapshot: a loop that does
// not answer within it is stalled, and the scrape reports the error rather than hang.
const DefaultTimeout = 5 * time.Second

// Collector is a prometheus.Collector of one baton server's figures. Create it with
// NewCollector and register it (prometheus.MustRegister or a Registry of your own). Safe
// for concurrent use; Collect must not be called on the server's loop goroutine (it waits
// for the loop).
type Collector struct {
	srv     *loop.Server
	timeout time.Duration
}

// NewCollector returns a collector of srv's figures; each Collect takes one snapshot of
// every section (loop, routes, offload, admission; not the tasks, whose count grows with
// the connections) with DefaultTimeout. Any goroutine.
func NewCollector(srv *loop.Server) *Collector {
	return &Collector{srv: srv, timeout: DefaultTimeout}
}

// scrapeViews are the sections a scrape reads.
const scrapeViews = loop.ViewLoop | loop.ViewRoutes | loop.ViewOffload | loop.ViewAdmission | loop.ViewRooms | loop.ViewWebSockets

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("baton_"+name, help, labels, nil)
}

// The metrics. Labels: route (method and pattern), class (status class), window
// (utilisation window), lane (offload lane), gate (gate name), kind (accept failure).
var (
	dRequests = desc("http_requests_total", "Requests finished, by route pattern and status class (1xx_3xx, 4xx, 5xx).", "route", "class")
	dInFlight = desc("http_requests_in_flight", "Requests of the route started and not finished.", "route")
	dLatency  = desc("http_request_duration_seconds", "Request latency, from accept to the end of the response.", "route")
	dOnLoop   = desc("http_request_on_loop_seconds", "Time each request held the event loop.", "route")
	dQueue    = desc("http_request_queue_delay_seconds", "Time each request was ready but waited for the loop (admission queue included).", "route")
	dParked   = desc("http_request_parked_seconds", "Time each request was parked: sleeps, offloaded work, waits, write backpressure, admission queue.", "route")

	dUptime     = desc("loop_uptime_seconds", "Time since the loop started.")
	dBusy       = desc("loop_busy_seconds_total", "Time the loop spent running tasks and callbacks; rate() of it is the utilisation.")
	dUtil       = desc("loop_utilisation_ratio", "Busy time over the last complete seconds of the window, 0 to 1.", "window")
	dLag        = desc("loop_lag_seconds", "Time a task waited ready before each slice it ran (ready to running).")
	dSlices     = desc("loop_slices_total", "Task slices run on the loop.")
	dSliceSecs  = desc("loop_slice_seconds_total", "Total length of the slices.")
	dSlowSlices = desc("loop_slow_slices_total", "Slices longer than the slow-slice threshold (50 us by default).")
	dSliceMax   = desc("loop_slice_max_seconds", "The longest slice since start.")
	dReady      = desc("loop_ready_depth", "Ready-queue depth at the last sample.")
	dReadyMax   = desc("loop_ready_depth_max", "Largest sampled ready-queue depth.")
	dTasksStart = desc("loop_tasks_started_total", "Tasks spawned on the loop.")
	dTasksDone  = desc("loop_tasks_completed_total", "Tasks finished.")
	dTasksLive  = desc("loop_tasks_live", "Tasks started and not finished.")
	dStalls     = desc("loop_stalls_total", "Slices that held the loop past the stall threshold.")
	dStallNow   = desc("loop_stall_in_progress", "1 while a stall is in progress.")
	dStallSecs  = desc("loop_stall_seconds", "Length of the stalls.")

	dAdmLimit      = desc("admission_limit", "Handler slots (Config.RequestConcurrency; 0: no limit).")
	dAdmActive     = desc("admission_active", "Admitted requests holding a slot.")
	dAdmQueued     = desc("admission_queued", "Requests waiting for a slot.")
	dAdmQueueLimit = desc("admission_queue_limit", "Longest admission queue (Config.MaxQueueLength).")
	dAdmAdmitted   = desc("admission_admitted_total", "Requests admitted.")
	dAdmQueuedTot  = desc("admission_queued_total", "Requests that had to queue for a slot.")
	dAdmRefused    = desc("admission_refused_total", "Requests refused with 429 Too Many Requests.")
	dInFlightAll   = desc("http_in_flight", "Handlers running or parked, exempt routes included.")
	dParsed        = desc("http_requests_parsed_total", "Requests parsed and dispatched.")
	dPanics        = desc("panics_total", "Handler and background task panics.")
	dAccepted      = desc("accept_connections_total", "Connections accepted and handed to the loop.")
	dAcceptErrs    = desc("accept_errors_total", "Accepts that failed: resource (no descriptors or kernel memory), other, register (the engine refused the connection).", "kind")
	dShed          = desc("accept_shed_total", "Connections accepted and closed at once because descriptors ran out.")

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

	// Rooms come and go (a match is a room), so they get no label of their own: the gauges
	// describe the rooms alive at the scrape, and the busiest rooms are named on
	// /debug/baton/rooms. Their per-room counters restart with each room, so summing them
	// would not give a counter.
	dRooms         = desc("rooms", "Rooms alive (running or draining).")
	dRoomMembers   = desc("rooms_members", "Member tasks of the rooms alive.")
	dRoomShare     = desc("rooms_loop_share_ratio", "Share of the loop's time spent on rooms (ticks and members) over the window, 0 to 1.", "window")
	dRoomQueued    = desc("rooms_inputs_queued", "Inputs waiting in the rooms' queues.")
	dRoomOverruns  = desc("rooms_overruns", "Ticks over budget, summed over the rooms alive.")
	dRoomDropped   = desc("rooms_inputs_dropped", "Inputs dropped or refused on a full queue, summed over the rooms alive.")
	dRoomLateWorst = desc("rooms_tick_lateness_p99_max_seconds", "The largest p99 tick lateness among the busiest rooms.")
	dRoomTickWorst = desc("rooms_tick_duration_p99_max_seconds", "The largest p99 tick duration (on the loop) among the busiest rooms.")

	dWSOpen      = desc("websocket_connections", "WebSocket connections open.", "route")
	dWSUpgrades  = desc("websocket_upgrades_total", "Upgrades accepted.", "route")
	dWSMessages  = desc("websocket_messages_total", "Messages received (in) and sent (out).", "route", "direction")
	dWSBytes     = desc("websocket_payload_bytes_total", "Payload bytes received (in) and sent (out).", "route", "direction")
	dWSQueued    = desc("websocket_queued_bytes", "Output queued and not yet taken by the kernel.", "route")
	dWSSlow      = desc("websocket_slow_consumer_closes_total", "Connections closed for not reading.", "route")
	dWSPingTO    = desc("websocket_ping_timeouts_total", "Connections dropped for not answering a ping.", "route")
	dWSPeerClose = desc("websocket_peer_closes_total", "Close handshakes the client began.", "route")
	dWSProtoErrs = desc("websocket_protocol_errors_total", "Connections closed for a protocol violation (1002, 1007, 1009).")

	allDescs = []*prometheus.Desc{
		dRooms, dRoomMembers, dRoomShare, dRoomQueued, dRoomOverruns, dRoomDropped, dRoomLateWorst, dRoomTickWorst,
		dWSOpen, dWSUpgrades, dWSMessages, dWSBytes, dWSQueued, dWSSlow, dWSPingTO, dWSPeerClose, dWSProtoErrs,
		dRequests, dInFlight, dLatency, dOnLoop, dQueue, dParked,
		dUptime, dBusy, dUtil, dLag, dSlices, dSliceSecs, dSlowSlices, dSliceMax, dReady, dReadyMax,
		dTasksStart, dTasksDone, dTasksLive, dStalls, dStallNow, dStallSecs,
		dAdmLimit, dAdmActive, dAdmQueued, dAdmQueueLimit, dAdmAdmitted, dAdmQueuedTot, dAdmRefused,
		dInFlightAll, dParsed, dPanics, dAccepted, dAcceptErrs, dShed,
		dOffTokens, dOffInUse, dOffQueue, dOffCapped, dOffStarted, dOffCompleted, dOffRejected,
		dOffCancelled, dOffTimeouts, dOffPanics, dOffWait, dOffRun, dOffWorkers, dOffIdle,
		dGateSize, dGateInUse, dGateWaiting, dGateEntered, dGateRejected, dGateWait,
	}
)

// Describe sends the descriptors of every metric the collector makes. Any goroutine.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
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
	snap, err := c.srv.Snapshot(ctx, scrapeViews)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(dUptime, err)
		return
	}
	collectRoutes(ch, snap.Routes)
	collectLoop(ch, &snap.Loop)
	collectAdmission(ch, &snap.Admission)
	collectOffload(ch, &snap.Offload)
	collectRooms(ch, &snap.Rooms)
	collectWebSockets(ch, &snap.WebSockets)
}

func collectRooms(ch chan<- prometheus.Metric, rs *accounting.RoomsSnapshot) {
	var members, queued int
	var overruns, dropped uint64
	var share [len(accounting.UtilisationWindows)]float64
	var lateWorst, tickWorst time.Duration
	add := func(r *accounting.RoomSnapshot) {
		members += r.Members
		queued += r.Queued
		overruns += r.Overruns
		dropped += r.Dropped + r.Refused
		for k := range share {
			share[k] += r.Share[k]
		}
	}
	for i := range rs.Rooms {
		r := &rs.Rooms[i]
		add(r)
		lateWorst = max(lateWorst, r.TickLateness.P99)
		tickWorst = max(tickWorst, r.TickDuration.P99)
	}
	if rs.Other != nil {
		add(rs.Other)
	}
	gauge(ch, dRooms, float64(rs.Total))
	gauge(ch, dRoomMembers, float64(members))
	gauge(ch, dRoomQueued, float64(queued))
	gauge(ch, dRoomOverruns, float64(overruns))
	gauge(ch, dRoomDropped, float64(dropped))
	for k, w := range accounting.UtilisationWindows {
		gauge(ch, dRoomShare, share[k], strconv.Itoa(int(w/time.Second))+"s")
	}
	gauge(ch, dRoomLateWorst, lateWorst.Seconds())
	gauge(ch, dRoomTickWorst, tickWorst.Seconds())
}

func collectWebSockets(ch chan<- prometheus.Metric, ws *loop.WebSocketsSnapshot) {
	counter(ch, dWSProtoErrs, float64(ws.ProtocolErrors))
	for i := range ws.Routes {
		r := &ws.Routes[i]
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

func collectRoutes(ch chan<- prometheus.Metric, rs []accounting.RouteSnapshot) {
	for i := range rs {
		r := &rs[i]
		counter(ch, dRequests, float64(r.Count-r.Errors-r.ClientErrors), r.Route, "1xx_3xx")
		counter(ch, dRequests, float64(r.ClientErrors), r.Route, "4xx")
		counter(ch, dRequests, float64(r.Errors), r.Route, "5xx")
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
	gauge(ch, dUptime, l.Uptime.Seconds())
	counter(ch, dBusy, l.BusyTotal.Seconds())
	for _, w := range l.Utilisation {
		gauge(ch, dUtil, w.Utilisation(), strconv.Itoa(int(w.Length/time.Second))+"s")
	}
	histogram(ch, dLag, l.Lag)
	counter(ch, dSlices, float64(l.Slices.Count))
	counter(ch, dSliceSecs, l.Slices.Total.Seconds())
	counter(ch, dSlowSlices, float64(l.Slices.Slow))
	gauge(ch, dSliceMax, l.Slices.Max.Seconds())
	gauge(ch, dReady, float64(l.ReadyDepth))
	gauge(ch, dReadyMax, float64(l.ReadyDepthMax))
	counter(ch, dTasksStart, float64(l.TasksStarted))
	counter(ch, dTasksDone, float64(l.TasksDone))
	gauge(ch, dTasksLive, float64(l.LiveTasks()))
	if st := l.Stalls; st != nil {
		counter(ch, dStalls, float64(st.Count))
		inProgress := 0.0
		if st.InProgress {
			inProgress = 1
		}
		gauge(ch, dStallNow, inProgress)
		histogram(ch, dStallSecs, st.Durations)
	}
}

func collectAdmission(ch chan<- prometheus.Metric, a *loop.AdmissionSnapshot) {
	gauge(ch, dAdmLimit, float64(a.Limit))
	gauge(ch, dAdmActive, float64(a.Active))
	gauge(ch, dAdmQueued, float64(a.Queued))
	gauge(ch, dAdmQueueLimit, float64(a.QueueLimit))
	counter(ch, dAdmAdmitted, float64(a.AdmittedTotal))
	counter(ch, dAdmQueuedTot, float64(a.QueuedTotal))
	counter(ch, dAdmRefused, float64(a.RefusedTotal))
	gauge(ch, dInFlightAll, float64(a.InFlight))
	counter(ch, dParsed, float64(a.Parsed))
	counter(ch, dPanics, float64(a.PanicsTotal))
	counter(ch, dAccepted, float64(a.Accept.Accepted))
	counter(ch, dAcceptErrs, float64(a.Accept.ResourceErrors), "resource")
	counter(ch, dAcceptErrs, float64(a.Accept.OtherErrors), "other")
	counter(ch, dAcceptErrs, float64(a.Accept.RegisterErrored), "register")
	counter(ch, dShed, float64(a.Accept.Shed))
}

func collectOffload(ch chan<- prometheus.Metric, o *loop.OffloadSnapshot) {
	p := &o.Pool
	gauge(ch, dOffWorkers, float64(p.Workers))
	gauge(ch, dOffIdle, float64(p.IdleWorkers))
	for i := range p.Lanes {
		l, lane := &p.Lanes[i], offload.Lane(i).String()
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

// Registry returns a new registry holding a collector of srv, for a /metrics endpoint of
// baton figures only (add the Go runtime's collectors to it if wanted). Any goroutine.
func Registry(srv *loop.Server) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(srv))
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
