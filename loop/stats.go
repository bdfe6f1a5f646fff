package loop

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/internal/recorder"
	"github.com/batonrt/baton/internal/render"
	"github.com/batonrt/baton/internal/scheduler"
)

// finishedRingSize is how many recently finished tasks the tasks endpoint keeps: enough to
// find a short request that was slow a moment ago, small enough to render at once.
const finishedRingSize = 256

// maxStackTasks bounds how many live tasks get a stack with ?stacks=1 (the slowest first):
// each stack is a few KiB of text.
const maxStackTasks = 100

// acct holds the server's accounting recorders. Loop-confined except current and watchdog,
// which are safe for concurrent use.
type acct struct {
	on         bool
	routes     *recorder.Routes
	loop       *recorder.Loop
	ring       *recorder.Ring
	current    recorder.Current
	watchdog   *recorder.Watchdog
	cpuClock   bool // read the thread CPU clock per slice
	thread     recorder.LoopThread
	stallAt    time.Duration // slices this long are reported to the watchdog (max when off)
	bgKey      string
	nextSample int64 // when the next ordinary request is sampled into the ring (loop clock)
	// pubGoid and pubKey are what current holds, so that a slice of the same goroutine
	// and route publishes nothing.
	pubGoid uint64
	pubKey  *string
}

// publishTask completes the stall detector's slot at the start of a task (called first
// thing inside it): OnCoroutine publishes only when the goroutine changes, so a new
// coroutine's id (unknown at its slice start) and the route of a task on a pooled
// coroutine that served another route are published here. (The slot holds goroutine 0
// exactly when OnCoroutine last saw a new coroutine.)
func (s *Server) publishTask(t *scheduler.Task, key *string) {
	if a := &s.acct; a.on && (key != a.pubKey || a.pubGoid == 0) {
		s.publishSlot(t, key)
	}
}

// publishSlot puts t's goroutine and route key into the stall detector's slot unless
// they are there already: with pooled coroutines that is the usual case, and it costs two
// comparisons.
func (s *Server) publishSlot(t *scheduler.Task, key *string) {
	a := &s.acct
	if goid := t.Goroutine(); goid != a.pubGoid || key != a.pubKey {
		a.current.Set(t.ID(), goid, key)
		a.pubGoid, a.pubKey = goid, key
	}
}

func (s *Server) initAccounting() {
	a := &s.acct
	a.on = !s.cfg.NoAccounting
	a.bgKey = "background"
	a.stallAt = math.MaxInt64
	if !a.on {
		return
	}
	cfg := recorder.Config{Epoch: s.epoch, SlowSlice: scheduler.DefaultSlowSlice}
	a.routes = recorder.NewRoutes(cfg)
	a.loop = recorder.NewLoop(cfg, time.Now())
	a.ring = recorder.NewRing(finishedRingSize)
	a.cpuClock = s.cfg.CPUClock && s.cfg.LockOSThread && recorder.ThreadCPUSupported
}

// schedHooks returns the scheduler hooks that feed accounting: the end of every slice
// (a request's last one records it), goroutine changes (the stall slot) and batches of
// slice figures (the loop lag and slice lengths).
func (s *Server) schedHooks() scheduler.Hooks {
	if s.cfg.NoAccounting {
		return scheduler.Hooks{}
	}
	h := scheduler.Hooks{OnCoroutine: s.onCoroutine, OnStop: s.onSliceStop, OnSlices: s.onSlices}
	if s.cfg.CPUClock && s.cfg.LockOSThread && recorder.ThreadCPUSupported {
		h.OnRun, h.OnStop = s.onSliceStart, s.onSliceStopCPU
	}
	return h
}

// onSlices hands the scheduler's batch of slice figures to the loop recorder.
func (s *Server) onSlices(waits []int64, st scheduler.SliceTotals) {
	s.acct.loop.Slices(waits, accounting.SliceStats(st))
}

// cpuTask returns the loop Task of a scheduler task (a request's or a background task's),
// or nil.
func cpuTask(t *scheduler.Task) *Task {
	switch a := t.Arg().(type) {
	case *Ctx:
		if a.conn != nil {
			return &a.Task
		}
	case *Task:
		return a
	}
	return nil
}

// onSliceStart starts a slice's CPU clock reading (installed only with Config.CPUClock).
func (s *Server) onSliceStart(t *scheduler.Task) {
	if lt := cpuTask(t); lt != nil {
		lt.cpuStart = recorder.ThreadCPU()
	}
}

// onCoroutine publishes the goroutine and route of a slice that starts on another
// goroutine than the slice before, for the stall detector.
func (s *Server) onCoroutine(t *scheduler.Task) {
	key := &s.acct.bgKey
	switch a := t.Arg().(type) {
	case *Ctx:
		if a.route != nil {
			key = &a.route.pattern
		}
	case *Task:
		key = &a.name
	}
	s.publishSlot(t, key) // a new coroutine's id is 0 until publishTask, inside it
}

func (s *Server) onSliceStop(t *scheduler.Task, _ scheduler.State, _ scheduler.Reason) {
	// Small enough to inline into the hook's method-value wrapper. A request task's arg is
	// never a nil *Ctx.
	if c, ok := t.Arg().(*Ctx); ok && c.finished {
		s.requestFinished(t, c)
	}
	if _, run := t.LastSlice(); run >= s.acct.stallAt {
		s.acct.watchdog.SliceEnded(t.ID(), run) // a stall's true length
	}
}

// onSliceStopCPU is onSliceStop with Config.CPUClock: it adds the slice's CPU time first.
func (s *Server) onSliceStopCPU(t *scheduler.Task, st scheduler.State, r scheduler.Reason) {
	if lt := cpuTask(t); lt != nil {
		lt.cpu += recorder.ThreadCPU() - lt.cpuStart
	}
	s.onSliceStop(t, st, r)
}

// requestFinished runs at the end of a request's last slice: the request's figures are
// final, and the slice's end is its end. It records the request and frees its Ctx.
func (s *Server) requestFinished(t *scheduler.Task, c *Ctx) {
	s.recordFinish(c, t.SliceEnd())
	if s.cfg.OnRequestDone != nil {
		s.requestDone(c, t.SliceEnd())
	}
	s.releaseCtx(c)
}

// sample fills a TaskSample for request c. Call it from c's task, or on the loop for a
// parked or queued request.
func (s *Server) sample(c *Ctx, dst *accounting.TaskSample, now int64) {
	var st scheduler.Stats
	switch {
	case c.Task.t != nil:
		st = c.Task.t.StatsAt(now) // the server's clock and the scheduler's share an epoch
		dst.Goroutine = c.Task.t.Goroutine()
		if dst.State == "" {
			dst.State = c.Task.t.State().String()
			if c.Task.t.State() == scheduler.Parked {
				dst.ParkReason = reasonName(c.Task.t.Reason())
			}
		}
	case c.Task.g != nil:
		st = c.Task.g.stats(&c.Task)
		if dst.State == "" {
			dst.State = accounting.StateRunning
		}
	default:
		dst.State = accounting.StateQueued
	}
	dst.ID = c.Task.idOrZero()
	dst.Kind = accounting.KindRequest
	dst.Route = c.pattern
	if dst.State != accounting.StateDone { // finished tasks keep no method or path (the route has them):
		dst.Method = c.Method() // the path would cost an allocation per request
		dst.Path = string(c.req.Path)
	}
	fillFigures(dst, &st)
	dst.QueueDelay, dst.FirstRunDelay = st.QueueDelay+c.queueWait, st.FirstRunDelay+c.queueWait
	dst.Parked.Queue += c.queueWait
	s.fillCPU(dst, &c.Task)
	dst.Age = time.Duration(now - c.arrivedAt)
	if !s.cfg.MultiThread || dst.State == accounting.StateDone {
		// A multi-thread handler writes its status on its own goroutine: read it only
		// once the request finished (its end was posted to the loop).
		dst.Status = c.status
	}
}

// sampleBackground fills a TaskSample for a background task (or a scheduler task of no
// Task). Loop-confined.
func (s *Server) sampleBackground(t *scheduler.Task, dst *accounting.TaskSample, now int64) {
	st := t.StatsAt(now)
	*dst = accounting.TaskSample{
		ID: t.ID(), Kind: accounting.KindBackground, Route: t.Label(), State: t.State().String(),
		Goroutine: t.Goroutine(), Age: time.Duration(now - int64(st.Spawned.Sub(s.epoch))),
	}
	fillFigures(dst, &st)
	if t.State() == scheduler.Parked {
		dst.ParkReason = reasonName(t.Reason())
	}
	if bt, ok := t.Arg().(*Task); ok {
		s.fillCPU(dst, bt)
	}
}

// fillFigures copies the scheduler's figures into a sample.
func fillFigures(dst *accounting.TaskSample, st *scheduler.Stats) {
	dst.Rounds, dst.OnLoop, dst.MaxSlice = st.Rounds, st.OnLoop, st.MaxSlice
	dst.SlowSlices, dst.SlowTime = st.SlowSlices, st.SlowTime
	dst.QueueDelay, dst.FirstRunDelay = st.QueueDelay, st.FirstRunDelay
	p := &st.Parked
	dst.Parked = accounting.ParkedByReason{
		Other: p[scheduler.ReasonOther], Sleep: p[scheduler.ReasonSleep], Wait: p[scheduler.ReasonWait],
		Offload: p[scheduler.ReasonOffload], Write: p[scheduler.ReasonWrite], Queue: p[scheduler.ReasonQueue],
	}
}

// fillCPU adds a task's CPU time, the running slice's included, when it is measured.
func (s *Server) fillCPU(dst *accounting.TaskSample, t *Task) {
	dst.CPU, dst.CPUMeasured = t.cpu, s.acct.cpuClock
	if s.acct.cpuClock && t.t != nil && s.sched.Current() == t.t {
		dst.CPU += recorder.ThreadCPU() - t.cpuStart // the slice running now
	}
}

// reasonName names a scheduler park reason as TaskSample.ParkReason does: the scheduler's
// names are accounting's (the loop's names test binds them).
func reasonName(r scheduler.Reason) string { return r.String() }

// finishedRingSlow is the latency from which a finished request always goes into the
// finished-task ring: most requests here take microseconds, so a millisecond or more is
// what someone looking at the ring wants to find after the fact.
const finishedRingSlow = time.Millisecond

// finishedRingEvery samples the ordinary requests into the ring as well, at most one per
// this interval, so the ring also shows what normal looks like: 256 entries then hold at
// least the last 2.5 s of them. Filling a sample is costly next to a request (mostly cache
// misses; figures in docs/accounting.md): sampling one request per interval, rather than
// one in N, costs nothing that grows with the load.
const finishedRingEvery = 10 * time.Millisecond

// recordFinish feeds a request that finished at now into its route's histograms and, when
// it was slow, failed or is sampled, into the finished-task ring. In single-thread mode it
// runs in the OnStop hook of the request's last slice, where the task's figures are final
// and now is the slice's end. Loop-confined.
func (s *Server) recordFinish(c *Ctx, now int64) {
	if !s.acct.on || c.route == nil {
		return
	}
	var onLoop, queue, parked time.Duration
	if t := c.Task.t; t != nil {
		onLoop, queue, parked = t.Totals()
	} else if c.Task.g != nil {
		st := c.Task.g.stats(&c.Task)
		onLoop, queue, parked = st.OnLoop, st.QueueDelay, st.ParkedTotal()
	}
	latency := time.Duration(now - c.arrivedAt)
	c.route.acct.FinishValues(now, c.status, latency, onLoop, queue+c.queueWait, parked+c.queueWait)
	s.acct.loop.TaskFinished()
	sample := latency >= finishedRingSlow || c.status >= 500
	if !sample && now >= s.acct.nextSample {
		sample, s.acct.nextSample = true, now+int64(finishedRingEvery)
	}
	if sample {
		smp := s.acct.ring.Slot()
		smp.State = accounting.StateDone
		s.sample(c, smp, now)
		s.acct.ring.Commit()
	}
}

// appendServerTiming adds the Server-Timing header for c's figures so far.
func (c *Ctx) appendServerTiming() {
	var smp accounting.TaskSample
	c.srv.sample(c, &smp, c.srv.nanotimeAny())
	start := len(c.hdrArena)
	c.hdrArena = append(c.hdrArena, "Server-Timing"...)
	mid := len(c.hdrArena)
	c.hdrArena = render.AppendServerTiming(c.hdrArena, &smp)
	c.hdrs = append(c.hdrs, httpcodec.Header{Name: c.hdrArena[start:mid:mid], Value: c.hdrArena[mid:len(c.hdrArena):len(c.hdrArena)]})
}

// snapshotTasks collects live and recently finished tasks. Loop only.
func (s *Server) snapshotTasks() accounting.TasksSnapshot {
	now := s.nanotime()
	var snap accounting.TasksSnapshot
	for t := range s.sched.Tasks() {
		var smp accounting.TaskSample
		if c, ok := t.Arg().(*Ctx); ok {
			s.sample(c, &smp, now)
		} else {
			s.sampleBackground(t, &smp, now)
		}
		snap.Live = append(snap.Live, smp)
	}
	for _, c := range s.adm.queue {
		var smp accounting.TaskSample
		s.sample(c, &smp, now)
		snap.Live = append(snap.Live, smp)
	}
	for _, cs := range s.conns.all { // multi-thread handlers are not scheduler tasks
		if c := cs.ctx; c != nil && c.Task.g != nil {
			var smp accounting.TaskSample
			s.sample(c, &smp, now)
			snap.Live = append(snap.Live, smp)
		}
	}
	render.SortTasks(snap.Live)
	if s.acct.ring != nil {
		snap.Finished = s.acct.ring.Snapshot()
		snap.FinishedTotal = s.acct.ring.Total()
	}
	return snap
}

// snapshotLoop returns the loop's health figures. Loop only.
func (s *Server) snapshotLoop() accounting.LoopSnapshot {
	s.sched.FlushSlices()
	s.acct.loop.Switched(s.sched.Switches())
	ls := s.acct.loop.Snapshot(time.Now())
	ls.ArrivalClock, ls.ArrivalBounded, ls.ArrivalHidden = arrivalClockLoopTurn, s.arr.bounded, time.Duration(s.arr.hidden)
	return ls
}

// statsKinds are the stats pages under the mount prefix.
var statsKinds = []string{"tasks", "routes", "loop", "offload", "admission"}

// HandleStats mounts the stats endpoints on this server under prefix (e.g. "/debug/baton"):
// GET prefix/tasks (live tasks, slowest first, and recently finished ones that were slow,
// failed or sampled; ?stacks=1 adds each live task's goroutine stack), prefix/routes and
// prefix/loop, as JSON, or as a plain-text top-style view with ?format=text;
// prefix/offload (the offload pool's lanes, predictor and the gates made with NewGate) and
// prefix/admission (handler slots, queue, requests refused with 429, panics), JSON only;
// prefix/ (the live dashboard, one HTML page) and prefix/events (its Server-Sent Events
// stream, one JSON frame per DashboardInterval). The routes are Exempt from admission
// control. Figures are snapshotted on the loop and rendered off it. Call it before
// ListenAndServe. It panics if accounting is off (Config.NoAccounting).
func (s *Server) HandleStats(prefix string) {
	if s.cfg.NoAccounting {
		panic("loop: HandleStats with Config.NoAccounting")
	}
	if s.shards != nil { // every page shows the totals and each shard (shard_stats.go)
		s.shards.handleStats(prefix)
		return
	}
	for _, kind := range statsKinds {
		kind := kind
		s.Handle("GET "+prefix+"/"+kind, func(c *Ctx) { s.serveStats(c, kind) }, Exempt())
	}
	s.handleSections(prefix) // AddStats's pages (statsections.go)

	s.handleDashboard(prefix) // prefix/ and prefix/events: the live dashboard
}

// serveStats snapshots on the loop, renders off it and answers.
func (s *Server) serveStats(c *Ctx, kind string) {
	text := c.Query("format") == "text"
	stacks := c.Query("stacks") == "1"
	var snap any
	s.mode.onLoop(c, func() { snap = s.takeSnapshot(kind) })
	var out []byte
	var err error
	s.mode.offLoop(c, func() { out, err = s.renderStats(kind, snap, text, stacks) })
	switch {
	case err != nil:
		c.String(500, "500 Internal Server Error: "+err.Error()+"\n")
	case text && !jsonOnly(kind):
		c.Bytes(200, "text/plain; charset=utf-8", out)
	default:
		c.Bytes(200, "application/json", out)
	}
}

func (s *Server) takeSnapshot(kind string) any {
	switch kind {
	case "tasks":
		return s.snapshotTasks()
	case "routes":
		return s.takeRoutes(time.Now()) // read by renderStats, off the loop
	case "offload":
		return nil // read off the loop: the pool is safe for concurrent use
	case "admission":
		return s.admissionSnapshot()
	default:
		return s.snapshotLoop()
	}
}

// renderStats renders a snapshot. Any goroutine.
func (s *Server) renderStats(kind string, snap any, text, stacks bool) ([]byte, error) {
	switch kind {
	case "offload":
		return renderOffload(s.snapshotOffload())
	case "admission":
		return json.MarshalIndent(snap, "", "  ")
	}
	var buf bytes.Buffer
	var err error
	switch kind {
	case "tasks":
		ts := snap.(accounting.TasksSnapshot)
		if stacks {
			addStacks(ts.Live)
		}
		if text {
			err = render.WriteTasksText(&buf, ts)
		} else {
			err = render.WriteTasksJSON(&buf, ts)
		}
	case "routes":
		rc, _ := snap.(*recorder.RoutesCopy) // nil if the loop stopped before taking it
		rs := readRoutes(rc)
		if text {
			err = render.WriteRoutesText(&buf, rs)
		} else {
			err = render.WriteRoutesJSON(&buf, rs)
		}
	default:
		ls := snap.(accounting.LoopSnapshot)
		fillProcess(&ls) // off the loop (process.go)
		if text {
			err = render.WriteLoopText(&buf, ls)
		} else {
			err = render.WriteLoopJSON(&buf, ls)
		}
	}
	return buf.Bytes(), err
}

// addStacks fills the goroutine stacks of the first maxStackTasks tasks from one dump of
// all goroutines.
func addStacks(ts []accounting.TaskSample) {
	ts = ts[:min(len(ts), maxStackTasks)]
	goids := make([]uint64, len(ts))
	for i := range ts {
		goids[i] = ts[i].Goroutine
	}
	stacks := recorder.StacksOf(goids)
	for i := range ts {
		ts[i].Stack = stacks[ts[i].Goroutine]
	}
}

// jsonOnly reports the stats pages that have no text view.
func jsonOnly(kind string) bool { return kind == "offload" || kind == "admission" }

func (s *Server) admissionSnapshot() AdmissionSnapshot {
	return AdmissionSnapshot{AdmissionStats: s.adm.stats(), InFlight: s.inflight, Parsed: s.parsed, PanicsTotal: s.panics,
		Accept: s.acceptStats()}
}

// StatsHandler returns a net/http handler serving the same stats pages, for mounting on a
// separate admin address (for example an http.Server on 127.0.0.1:6060), so monitoring
// does not share the main port. Paths end in /tasks, /routes, /loop, /offload or
// /admission. Snapshots are taken on the loop through Post; rendering happens on the
// net/http goroutine. A path ending in / serves the live dashboard and one ending in
// /events its event stream (mount the handler on a prefix such as "/debug/baton/").
// With Config.Shards > 1 every page shows the totals and each shard's figures.
// Safe for concurrent use.
func (s *Server) StatsHandler() http.Handler {
	if s.shards != nil {
		return s.shards.statsHandler() // shard_stats.go
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.serveSectionHTTP(w, r) { // AddStats's pages (statsections.go)
			return
		}
		kind := ""
		for _, k := range statsKinds {
			if len(r.URL.Path) >= len(k) && r.URL.Path[len(r.URL.Path)-len(k):] == k {
				kind = k
			}
		}
		if s.cfg.NoAccounting {
			http.NotFound(w, r)
			return
		}
		if kind == "" {
			if !s.serveDashboardHTTP(w, r) { // a path ending in / or /events
				http.NotFound(w, r)
			}
			return
		}
		snap, ok := askLoopHTTP(w, r, s, func() any { return s.takeSnapshot(kind) })
		if !ok {
			return
		}
		text := r.URL.Query().Get("format") == "text"
		out, err := s.renderStats(kind, snap, text, r.URL.Query().Get("stacks") == "1")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if text && !jsonOnly(kind) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		_, _ = w.Write(out)
	})
}

// startWatchdog starts the stall detector if enabled. It stops when ListenAndServe returns.
func (s *Server) startWatchdog() {
	if s.cfg.NoAccounting || s.cfg.StallThreshold < 0 {
		return
	}
	wc := recorder.WatchdogConfig{
		Threshold: s.cfg.StallThreshold,
		Logger:    s.log,
		Probe:     s.sched.Running,
		Describe:  s.acct.current.Describe,
		// onSliceStop reports every slice at least the threshold long.
		ReportsEnds: true,
	}
	if s.cfg.LockOSThread {
		// Runs on the loop goroutine, locked to its thread: the watchdog can then tell a
		// task holding the loop from a thread the machine does not run.
		s.acct.thread.Publish()
		wc.ThreadCPU, wc.ThreadState = s.acct.thread.CPU, s.acct.thread.State
	}
	s.acct.watchdog = recorder.StartWatchdog(wc)
	s.acct.loop.AttachWatchdog(s.acct.watchdog)
	s.acct.stallAt = s.acct.watchdog.Threshold()
}
