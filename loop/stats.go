package loop

import (
	"math"
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

// The values of accounting.TaskSample's Kind and State the loop sets itself; the others
// (ready, running, parked, done for a task of the scheduler) are the scheduler's State
// names, which TestNameTablesAgree holds to the same words.
const (
	kindRequest    = "request"
	kindBackground = "background"
	sampleRunning  = "running" // a multi-thread handler: its own goroutine
	sampleQueued   = "queued"  // a request in an admission queue: no task yet
	sampleDone     = "done"    // finished (the ring of recently finished tasks)
)

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
			dst.State = sampleRunning
		}
	default:
		dst.State = sampleQueued
	}
	dst.ID = c.Task.idOrZero()
	dst.Kind = kindRequest
	dst.Route = c.pattern
	if dst.State != sampleDone { // finished tasks keep no method or path (the route has them):
		dst.Method = c.Method() // the path would cost an allocation per request
		dst.Path = string(c.req.Path)
	}
	fillFigures(dst, &st)
	dst.QueueDelay, dst.FirstRunDelay = st.QueueDelay+c.queueWait, st.FirstRunDelay+c.queueWait
	dst.Parked.Queue += c.queueWait
	s.fillCPU(dst, &c.Task)
	dst.Age = time.Duration(now - c.arrivedAt)
	if !s.cfg.MultiThread || dst.State == sampleDone {
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
		ID: t.ID(), Kind: kindBackground, Route: t.Label(), State: t.State().String(),
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

// reasonName maps a scheduler park reason to its accounting name (the two lists are in
// the same order).
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
		onLoop, queue, parked = goTotals(c)
	}
	latency := time.Duration(now - c.arrivedAt)
	c.route.acct.FinishValues(now, c.status, latency, onLoop, queue+c.queueWait, parked+c.queueWait)
	s.acct.loop.TaskFinished()
	sample := latency >= finishedRingSlow || c.status >= 500
	if !sample && now >= s.acct.nextSample {
		sample, s.acct.nextSample = true, now+int64(finishedRingEvery)
	}
	if sample {
		s.sampleDone(c, now)
	}
}

// sampleDone records finished request c in the ring of finished tasks. Out of line: it
// runs for slow and failed requests and a few per second, and its code stays off the
// request path's instruction-cache lines (docs/bench.md, "The split of loop").
//
//go:noinline
func (s *Server) sampleDone(c *Ctx, now int64) {
	smp := s.acct.ring.Slot()
	smp.State = sampleDone
	s.sample(c, smp, now)
	s.acct.ring.Commit()
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

// admissionSnapshot returns the "admission" section's figures. Loop-confined.
func (s *Server) admissionSnapshot() accounting.AdmissionStats {
	st := s.adm.stats()
	st.InFlight, st.Parsed, st.PanicsTotal, st.Accept = s.inflight, s.parsed, s.panics, s.acceptStats()
	return st
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

// goTotals is recordFinish's reading of a multi-thread handler's figures. Out of line, as
// sampleDone.
//
//go:noinline
func goTotals(c *Ctx) (onLoop, queue, parked time.Duration) {
	st := c.Task.g.stats(&c.Task)
	return st.OnLoop, st.QueueDelay, st.ParkedTotal()
}
