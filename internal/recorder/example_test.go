package recorder_test

import (
	"log/slog"
	"os"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/recorder"
	"github.com/batonrt/baton/internal/render"
)

// Example shows how a loop wires the recorders: a hook at every slice, another at every
// request end, busy intervals around each callback, and snapshots rendered off the loop.
func Example() {
	epoch := time.Now() // the scheduler's Epoch
	cfg := recorder.Config{Epoch: epoch}
	routes := recorder.NewRoutes(cfg)
	loop := recorder.NewLoop(cfg, epoch)
	finished := recorder.NewRing(0)
	var current recorder.Current
	wd := recorder.StartWatchdog(recorder.WatchdogConfig{
		Probe:    func() (uint64, time.Duration, bool) { return 0, 0, false }, // scheduler.Running
		Describe: current.Describe,
		Logger:   slog.Default(),
	})
	defer wd.Stop()
	loop.AttachWatchdog(wd)

	// On the loop: a gnet callback runs from t0 to t1 and runs one request's task.
	t0 := int64(time.Since(epoch))
	key := "GET /users/{id}" // stays valid and unchanged: Current keeps a pointer to it
	rt := routes.Route(key)
	rt.Start()
	loop.TaskStarted()
	current.Set(1, 0, &key) // at slice start (OnRun hook)
	// At slice ends the scheduler gathers the slices' waits and lengths, and the loop
	// records them in batches (OnSlices hook).
	loop.Slices([]int64{int64(2 * time.Microsecond)}, accounting.SliceStats{Total: 5 * time.Microsecond, Max: 5 * time.Microsecond})
	loop.Switched(1)
	s := accounting.TaskSample{ID: 1, Kind: "request", Route: key,
		State: "done", Rounds: 1, OnLoop: 5 * time.Microsecond, Status: 200, Age: 40 * time.Microsecond}
	rt.FinishValues(int64(time.Since(epoch)), s.Status, s.Age, s.OnLoop, s.QueueDelay, s.ParkedTotal())
	*finished.Slot() = s // or fill the slot in place
	finished.Commit()
	loop.TaskFinished()
	loop.Busy(t0, int64(time.Since(epoch)))

	// Stats endpoint: snapshot on the loop, render off it.
	now := time.Now()
	rs, ls := routes.Snapshot(now), loop.Snapshot(now)
	ts := accounting.TasksSnapshot{Finished: finished.Snapshot(), FinishedTotal: finished.Total()}
	_ = render.WriteRoutesJSON(os.Stdout, rs)
	_ = render.WriteLoopText(os.Stdout, ls)
	_ = render.WriteTasksText(os.Stdout, ts)
}
