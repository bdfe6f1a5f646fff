// Package stats serves a baton server's figures: the stats pages (prefix/loop, /routes,
// /tasks, /offload, /admission and one per feature section, as JSON or, where the section
// renders text, with ?format=text), the live dashboard (prefix/ and its event stream
// prefix/events) and Snapshot, the same figures as Go values for exporters.
//
// It is a client of package loop's stats registry (loop.Server.StatsSections): the
// engine's own sections and every feature's (package loop/room's "rooms", loop/sse's
// "sse", WebSocket's "websockets") are taken on every loop, read off the loop, summed
// over the loops by the section's own Sum, and rendered here; this package knows no
// feature. Mount serves the pages on the server itself; Handler serves them on another
// listener (an admin address, as docs/observability.md recommends).
//
// With several loops (loop.Config.Shards > 1) every page shows the totals, then each
// loop's figures: in JSON a "shards" array of objects with their "shard" index, in text
// one block per loop.
package stats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// View selects sections of a Snapshot; combine them with |.
type View uint32

// The sections of a Snapshot.
const (
	ViewLoop      View = 1 << iota // Snapshot.Loop: the loop's health (the loop page)
	ViewRoutes                     // Snapshot.Routes: per-route figures (the routes page)
	ViewTasks                      // Snapshot.Tasks: live and recently finished tasks (the tasks page)
	ViewOffload                    // Snapshot.Offload: the offload pool and gates (the offload page)
	ViewAdmission                  // Snapshot.Admission: slots, queue, refusals (the admission page)
	ViewSections                   // Snapshot.Sections: the features' sections (their pages)
)

// AllViews selects every section of a Snapshot.
const AllViews = ViewLoop | ViewRoutes | ViewTasks | ViewOffload | ViewAdmission | ViewSections

// Snapshot is a server's figures at one instant: the values the stats pages render as
// JSON, as Go values, for exporters and games that would otherwise parse JSON. Sections
// not asked for are zero; with loop.Config.NoAccounting, Loop, Routes and Tasks are always
// zero. Plain data: the caller owns it.
type Snapshot struct {
	Taken     time.Time                  // when the loop took it (the latest loop's, for totals)
	Loop      accounting.LoopSnapshot    // ViewLoop
	Routes    []accounting.RouteSnapshot // ViewRoutes, sorted by route key
	Tasks     accounting.TasksSnapshot   // ViewTasks
	Offload   offload.Report             // ViewOffload
	Admission accounting.AdmissionStats  // ViewAdmission
	// Sections holds, by name, the figures of each feature's section (added with
	// loop.Server.AddStats: package loop/room's "rooms", the WebSocket "websockets"), as
	// its Take and Read returned them, summed by its Sum with several loops.
	// ViewSections. A section whose Take failed is left out.
	Sections map[string]any
	// Shards holds each loop's own sections, in loop order, with several loops (nil
	// otherwise); the fields above are then the totals (docs/accounting.md, "Shards").
	Shards []Snapshot
}

// The engine's sections, by View.
var engineViews = []struct {
	name string
	view View
}{{"loop", ViewLoop}, {"routes", ViewRoutes}, {"tasks", ViewTasks}, {"offload", ViewOffload}, {"admission", ViewAdmission}}

// viewOf returns the View that selects the section named name: an engine section's own,
// ViewSections for a feature's.
func viewOf(name string) View {
	for _, e := range engineViews {
		if e.name == name {
			return e.view
		}
	}
	return ViewSections
}

// Take returns the sections v of srv's figures. Every loop's sections are copied on that
// loop at once, in one posted function per loop (a copy of plain data: the loop is held
// only for that), and read (percentiles computed, process figures added) on the caller's
// goroutine. It waits for the loops until ctx ends and returns ctx's error then, or
// loop.ErrServerClosed when a loop no longer runs posted functions; before the server is
// ready it waits until it is.
//
// Safe for concurrent use, but not on a loop goroutine of srv (a handler in single-thread
// mode, a function given to Post): it would wait for itself. A handler that wants the
// figures calls it from a goroutine of its own, or mounts the pages with Mount.
func Take(ctx context.Context, srv *loop.Server, v View) (Snapshot, error) {
	var secs []loop.StatsSection
	for _, sec := range srv.StatsSections() {
		if viewOf(sec.Name)&v != 0 {
			secs = append(secs, sec)
		}
	}
	g, err := gather(ctx, srv, secs, nil, 0)
	if err != nil {
		return Snapshot{}, err
	}
	per := make([]Snapshot, len(g.per))
	for i := range per {
		per[i] = build(secs, g.per[i], g.errs[i], g.taken[i])
	}
	if len(per) == 1 {
		return per[0], nil
	}
	total := Snapshot{Shards: per}
	for _, p := range per {
		if p.Taken.After(total.Taken) {
			total.Taken = p.Taken
		}
	}
	vals := make([]any, len(secs))
	ok := make([]error, len(secs))
	for k, sec := range secs {
		vals[k], ok[k] = g.total(k, sec)
	}
	t := build(secs, vals, ok, total.Taken)
	t.Shards = per
	return t, nil
}

// build fills a Snapshot from one set of section values (one loop's, or the totals).
func build(secs []loop.StatsSection, vals []any, errs []error, taken time.Time) Snapshot {
	s := Snapshot{Taken: taken}
	for k, sec := range secs {
		if errs[k] != nil {
			continue
		}
		v := vals[k]
		switch viewOf(sec.Name) {
		case ViewLoop:
			s.Loop, _ = v.(accounting.LoopSnapshot)
		case ViewRoutes:
			s.Routes, _ = v.([]accounting.RouteSnapshot)
		case ViewTasks:
			s.Tasks, _ = v.(accounting.TasksSnapshot)
		case ViewOffload:
			s.Offload, _ = v.(offload.Report)
		case ViewAdmission:
			s.Admission, _ = v.(accounting.AdmissionStats)
		default:
			if s.Sections == nil {
				s.Sections = map[string]any{}
			}
			s.Sections[sec.Name] = v
		}
	}
	return s
}

// gathered is what gather collected: for each loop, each section's figures (read) or the
// error its Take returned, and when the loop took them.
type gathered struct {
	per   [][]any
	errs  [][]error
	taken []time.Time
}

// total returns section k's totals over the loops (Sum, or the first loop's figures), or
// the first error of a loop.
func (g *gathered) total(k int, sec loop.StatsSection) (any, error) {
	vs := make([]any, len(g.per))
	for i := range g.per {
		if err := g.errs[i][k]; err != nil {
			return nil, err
		}
		vs[i] = g.per[i][k]
	}
	if len(vs) == 1 || sec.Sum == nil {
		return vs[0], nil
	}
	return sec.Sum(vs), nil
}

// errLoopSlow is gather's error when a loop did not run the posted function within its
// wait.
var errLoopSlow = errors.New("stats: the loop did not answer (stalled?)")

// gather takes secs on every loop of srv at once (one posted function per loop), then
// reads each value off the loop. A section's Take error is kept per section; an error of
// the loop (ctx, wait, the server closed) is returned. wait bounds the wait for each loop
// when positive. Not on a loop of srv.
func gather(ctx context.Context, srv *loop.Server, secs []loop.StatsSection, q url.Values, wait time.Duration) (*gathered, error) {
	loops := srv.Loops()
	g := &gathered{per: make([][]any, len(loops)), errs: make([][]error, len(loops)), taken: make([]time.Time, len(loops))}
	loopErrs := make([]error, len(loops))
	var wg sync.WaitGroup
	for i, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			type took struct {
				vals []any
				errs []error
				at   time.Time
			}
			r, err := ask(ctx, l, wait, func() took {
				t := took{vals: make([]any, len(secs)), errs: make([]error, len(secs)), at: time.Now()}
				for k, sec := range secs {
					t.vals[k], t.errs[k] = sec.Take(l, q)
				}
				return t
			})
			if err != nil {
				loopErrs[i] = err
				return
			}
			for k, sec := range secs {
				if r.errs[k] == nil && sec.Read != nil {
					r.vals[k] = sec.Read(r.vals[k])
				}
			}
			g.per[i], g.errs[i], g.taken[i] = r.vals, r.errs, r.at
		}()
	}
	wg.Wait()
	for i, err := range loopErrs {
		if err != nil {
			if len(loops) > 1 {
				return nil, fmt.Errorf("loop %d: %w", i, err)
			}
			return nil, err
		}
	}
	return g, nil
}

// ask runs fn on l through Post and returns its result. It gives up with ctx.Err() when
// ctx ends, with errLoopSlow after wait (when positive), and with loop.ErrServerClosed
// when the loop will not run fn. Not on l's goroutine.
func ask[T any](ctx context.Context, l *loop.Loop, wait time.Duration, fn func() T) (T, error) {
	got := make(chan T, 1) // buffered: a late answer must not block the loop
	var zero T
	if err := l.Post(func() { got <- fn() }); err != nil {
		return zero, err
	}
	var slow <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		slow = t.C
	}
	select {
	case v := <-got:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-slow:
		return zero, errLoopSlow
	case <-l.Server().Done():
		select {
		case v := <-got: // it ran just before the loop stopped
			return v, nil
		default:
			return zero, loop.ErrServerClosed
		}
	}
}

// find returns the section named name.
func find(srv *loop.Server, name string) (loop.StatsSection, bool) {
	secs := srv.StatsSections()
	i := slices.IndexFunc(secs, func(s loop.StatsSection) bool { return s.Name == name })
	if i < 0 {
		return loop.StatsSection{}, false
	}
	return secs[i], true
}

// bytesBuffer is a bytes.Buffer whose contents are taken as a copy.
type bytesBuffer struct{ bytes.Buffer }

// take returns a copy of the contents and empties the buffer.
func (b *bytesBuffer) take() []byte {
	out := slices.Clone(b.Bytes())
	b.Reset()
	return out
}
