package loop

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"sync/atomic"
)

// StatsSection is one part of the server's figures: a stats page (prefix/Name), a section
// of the snapshot and a panel of the live dashboard, all rendered by package loop/stats.
// The engine's own figures are sections ("loop", "routes", "tasks", "offload",
// "admission"); a feature package adds its own with Server.AddStats. Package loop/stats
// reads every section through Server.StatsSections: it runs Take on every loop, Read off
// the loop, Sum over the loops, and renders the result, so that neither the engine nor a
// feature renders pages and loop/stats knows no feature.
type StatsSection struct {
	// Name is the page's last path segment and the key in Snapshot.Sections: lower case
	// letters, digits and '-', not the name of one of the engine's own pages.
	Name string
	// Take returns loop l's figures as plain data the caller then owns. It runs on l (in
	// a function posted to it, or from a task of l), must not park, and should be quick:
	// copy counters, compute off the loop (in Read). q holds the page's query (nil for the
	// snapshot and the dashboard); an error answers the page with 400 and the error's text
	// (a bad query).
	Take func(l *Loop, q url.Values) (any, error)
	// Read, when not nil, turns what Take returned into the figures, off the loop (on the
	// reader's goroutine): the costly part of a section (percentiles from copied
	// histograms) runs there. Every reader of a section calls it once on each value Take
	// returned, before Sum and before rendering. Nil: Take's value is the figures.
	Read func(taken any) any
	// Sum combines the figures of every loop, in index order, into the totals (several
	// loops only). Nil: the totals are the first loop's figures. Any goroutine.
	Sum func(perLoop []any) any
	// Text renders figures as the page's ?format=text. Nil: the page is JSON only.
	Text func(w io.Writer, v any) error
	// JSON renders figures as the page's JSON (an object). Nil: encoding/json.
	JSON func(w io.Writer, v any) error
	// Panel returns what the live dashboard shows of the figures (JSON-marshalable), under
	// the frame's "panels" member by Name. Nil: no panel.
	Panel func(v any) any
	// Series returns the figures the dashboard charts over time, read from the totals
	// once a second whether or not a page is open: a name ending in "_total" is a counter
	// (charted as a rate per second; a counter that falls, as when a room ends, counts
	// from its new value), any other a gauge. Nil: no chart.
	Series func(v any) map[string]float64
}

// errStatsSection is wrapped by AddStats's errors.
var errStatsSection = errors.New("loop: stats section")

// statsRegistry holds the sections added with AddStats, shared by every loop of the
// process. Safe for concurrent use: readers load the slice, writers copy it under mu.
type statsRegistry struct {
	mu   sync.Mutex
	secs atomic.Pointer[[]StatsSection]
}

// AddStats registers sec for every loop of the server: package loop/stats then serves its
// page under the prefixes it is mounted on (also when added after), carries it in
// Snapshot.Sections, and shows its Panel on the dashboard. It returns an error, naming
// the section, when the name is invalid, taken, or Take is nil. Safe for concurrent
// use.
func (s *Server) AddStats(sec StatsSection) error {
	if err := validSectionName(sec.Name); err != nil {
		return err
	}
	if sec.Take == nil {
		return fmt.Errorf("%w %q: Take is nil", errStatsSection, sec.Name)
	}
	r := s.statsReg
	r.mu.Lock()
	defer r.mu.Unlock()
	var cur []StatsSection
	if p := r.secs.Load(); p != nil {
		cur = *p
	}
	for _, x := range cur {
		if x.Name == sec.Name {
			return fmt.Errorf("%w %q: already added", errStatsSection, sec.Name)
		}
	}
	next := append(append(make([]StatsSection, 0, len(cur)+1), cur...), sec)
	r.secs.Store(&next)
	return nil
}

// validSectionName checks a section's name: a path segment of its own.
func validSectionName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", errStatsSection)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w %q: name must be lower case letters, digits and '-'", errStatsSection, name)
		}
	}
	if name == dashboardEvents {
		return fmt.Errorf("%w %q: the path of the dashboard's event stream", errStatsSection, name)
	}
	for _, k := range engineSectionNames {
		if k == name {
			return fmt.Errorf("%w %q: the name of one of the engine's sections", errStatsSection, name)
		}
	}
	return nil
}

// dashboardEvents is the path segment of the live dashboard's event stream (package
// loop/stats), beside the sections' pages under the same prefix.
const dashboardEvents = "events"

// StatsSections returns the stats registry: the engine's own sections (engine_stats.go),
// then the sections added with AddStats, in the order they were added. Package loop/stats
// reads every page, snapshot section and dashboard panel from it. The slice is the
// caller's. Safe for concurrent use.
func (s *Server) StatsSections() []StatsSection {
	out := s.engineSections()
	if p := s.statsReg.secs.Load(); p != nil {
		out = append(out, *p...)
	}
	return out
}
