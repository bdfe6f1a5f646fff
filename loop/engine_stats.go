package loop

import (
	"io"
	"net/url"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/recorder"
	"github.com/batonrt/baton/internal/render"
	"github.com/batonrt/baton/offload"
)

// The engine's own figures as stats sections (seam 4, statsections.go): what only the
// engine can know, taken on each loop, read off it and summed over the loops here;
// package loop/stats renders them as it renders a feature's section. The values:
//
//	"loop"      accounting.LoopSnapshot     the loop's health (not with Config.NoAccounting)
//	"routes"    []accounting.RouteSnapshot  per-route figures, sorted by key (idem)
//	"tasks"     accounting.TasksSnapshot    live and recently finished tasks (idem); ?stacks=1
//	                                        adds the live tasks' goroutine stacks
//	"offload"   offload.Report              the shared offload pool and this loop's gates
//	"admission" AdmissionStats              slots, queue, 429s, in flight, accepts

// engineSectionNames are the engine's sections' names, which AddStats refuses.
var engineSectionNames = []string{"loop", "routes", "tasks", "offload", "admission"}

// engineSections returns the engine's sections for this server's configuration.
func (s *Server) engineSections() []StatsSection {
	secs := make([]StatsSection, 0, 8)
	if !s.cfg.NoAccounting {
		secs = append(secs,
			StatsSection{Name: "loop", Take: takeLoop, Read: readLoop, Sum: sumOf(sumLoops),
				JSON: writer(render.WriteLoopJSON), Text: writer(render.WriteLoopText)},
			StatsSection{Name: "routes", Take: takeRoutesSection, Read: readRoutesSection, Sum: sumOf(sumRoutes),
				JSON: writer(render.WriteRoutesJSON), Text: writer(render.WriteRoutesText)},
			StatsSection{Name: "tasks", Take: takeTasks, Read: readTasks, Sum: sumOf(sumTasks),
				JSON: writer(render.WriteTasksJSON), Text: writer(render.WriteTasksText)},
		)
	}
	secs = append(secs,
		StatsSection{Name: "offload", Take: takeOffload, Read: readOffload, Sum: sumOf(sumOffload)},
		StatsSection{Name: "admission", Take: takeAdmission, Sum: sumOf(sumAdmission)},
	)
	return secs
}

// sumOf adapts a typed summing function to StatsSection.Sum.
func sumOf[T any](sum func([]T) T) func([]any) any {
	return func(per []any) any {
		ts := make([]T, len(per))
		for i, v := range per {
			ts[i], _ = v.(T)
		}
		return sum(ts)
	}
}

// writer adapts a typed renderer to StatsSection.JSON and Text.
func writer[T any](write func(io.Writer, T) error) func(io.Writer, any) error {
	return func(w io.Writer, v any) error {
		t, _ := v.(T)
		return write(w, t)
	}
}

func takeLoop(l *Loop, _ url.Values) (any, error) { return l.srv.snapshotLoop(), nil }

// readLoop adds the process's figures, read off the loop (process.go).
func readLoop(v any) any {
	ls, _ := v.(accounting.LoopSnapshot)
	fillProcess(&ls)
	return ls
}

// takeRoutesSection copies the routes' counters on the loop (scrape.go); readRoutesSection
// computes their percentiles and buckets off it.
func takeRoutesSection(l *Loop, _ url.Values) (any, error) {
	return l.srv.takeRoutes(time.Now()), nil
}

func readRoutesSection(v any) any {
	c, _ := v.(*recorder.RoutesCopy)
	rs := readRoutes(c)
	if rs == nil {
		rs = []accounting.RouteSnapshot{}
	}
	return rs
}

// tasksTaken is the tasks section as taken on the loop, before the stacks are added.
type tasksTaken struct {
	snap   accounting.TasksSnapshot
	stacks bool
}

func takeTasks(l *Loop, q url.Values) (any, error) {
	return tasksTaken{snap: l.srv.snapshotTasks(), stacks: q.Get("stacks") == "1"}, nil
}

// readTasks adds the goroutine stacks when the page asked for them (?stacks=1).
func readTasks(v any) any {
	t, _ := v.(tasksTaken)
	if t.stacks {
		addStacks(t.snap.Live)
	}
	return t.snap
}

// offloadTaken defers the offload section to its reader: the pool and the gates are safe
// for concurrent use, so they are read off the loop.
type offloadTaken struct{ s *Server }

func takeOffload(l *Loop, _ url.Values) (any, error) { return offloadTaken{l.srv}, nil }

func readOffload(v any) any {
	t, _ := v.(offloadTaken)
	if t.s == nil {
		return offload.Report{}
	}
	return t.s.snapshotOffload()
}

func takeAdmission(l *Loop, _ url.Values) (any, error) { return l.srv.admissionSnapshot(), nil }
