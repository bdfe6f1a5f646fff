package accounting_test

import (
	"log/slog"
	"os"
	"time"

	"github.com/batonrt/baton/accounting"
)

// Example shows how a loop wires the recorders: a hook at every slice, another at every
// request end, busy intervals around each callback, and snapshots rendered off the loop.
func Example() {
	epoch := time.Now() // the scheduler's Epoch
	cfg := accounting.Config{Epoch: epoch}
	routes := accounting.NewRoutes(cfg)
	loop := accounting.NewLoop(cfg, epoch)
	finished := accounting.NewRing(0)
	var current accounting.Current
	wd := accounting.StartWatchdog(accounting.WatchdogConfig{
		Probe:    func() (uint64, time.Duration, bool) { return 0, 0, false }, // scheduler.Running
		Describe: current.Describe,
		Logger:   slog.Default(),
	})
	defer wd.Stop()
	loop.AttachWatchdog(wd)

	// On the loop: a gnet callback runs from t0 to t1 and runs one request's task.
	t0 := int64(time.Since(epoch))
	rt := routes.Route("GET /users/{id}")
	rt.Start()
	loop.TaskStarted()
	current.Set(1, 0, rt.KeyRef())                     // at slice start (OnRun hook)
	loop.Slice(2*time.Microsecond, 5*time.Microsecond) // at slice end (OnStop hook: LastSlice)
	s := accounting.TaskSample{ID: 1, Kind: accounting.KindRequest, Route: rt.Key(),
		State: "done", Rounds: 1, OnLoop: 5 * time.Microsecond, Status: 200, Age: 40 * time.Microsecond}
	rt.Finish(&s)
	finished.Add(&s)
	loop.TaskFinished()
	loop.Busy(t0, int64(time.Since(epoch)))

	// Stats endpoint: snapshot on the loop, render off it.
	now := time.Now()
	rs, ls := routes.Snapshot(now), loop.Snapshot(now)
	ts := accounting.TasksSnapshot{Finished: finished.Snapshot(), FinishedTotal: finished.Total()}
	_ = accounting.WriteRoutesJSON(os.Stdout, rs)
	_ = accounting.WriteLoopText(os.Stdout, ls)
	_ = accounting.WriteTasksText(os.Stdout, ts)
}
