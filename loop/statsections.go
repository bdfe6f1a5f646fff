package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
)

// StatsSection is a feature's part of the server's figures: a stats page (prefix/Name,
// under HandleStats and StatsHandler), a section of Snapshot (Snapshot.Sections[Name]) and
// a panel of the live dashboard. A feature package registers it with Server.AddStats and
// the engine does the rest: it takes the figures on every loop, sums them, and renders
// them, so that a feature never edits the stats code.
type StatsSection struct {
	// Name is the page's last path segment and the key in Snapshot.Sections: lower case
	// letters, digits and '-', not the name of one of the engine's own pages.
	Name string
	// Take returns loop l's figures as plain data the caller then owns. It runs on l (in
	// a function posted to it, or from a task of l), must not park, and should be quick:
	// copy counters, compute off the loop. q holds the page's query (nil for Snapshot and
	// the dashboard); an error answers the page with 400 and the error's text (a bad
	// query).
	Take func(l *Loop, q url.Values) (any, error)
	// Sum combines the figures of every loop, in index order, into the totals (several
	// loops only). Nil: the totals are the first loop's figures.
	Sum func(perLoop []any) any
	// Text renders figures as the page's ?format=text. Nil: the page is JSON only.
	Text func(w io.Writer, v any) error
	// JSON renders figures as the page's JSON (an object). Nil: encoding/json.
	JSON func(w io.Writer, v any) error
	// Panel returns what the live dashboard shows of the figures (JSON-marshalable), under
	// the frame's "panels" member by Name. Nil: no panel.
	Panel func(v any) any
}

// ErrStatsSection is wrapped by AddStats's errors.
var ErrStatsSection = errors.New("loop: stats section")

// statsRegistry holds the sections added with AddStats, shared by every loop of the
// process. Safe for concurrent use: readers load the slice, writers copy it under mu.
type statsRegistry struct {
	mu   sync.Mutex
	secs atomic.Pointer[[]StatsSection]
}

// AddStats registers sec for every loop of the server: its page answers under the
// prefixes given to HandleStats and StatsHandler (also when added after them), Snapshot
// carries it in Sections, and the dashboard shows its Panel. It returns an error wrapping
// ErrStatsSection when the name is invalid, taken, or Take is nil. Safe for concurrent
// use.
func (s *Server) AddStats(sec StatsSection) error {
	if err := validSectionName(sec.Name); err != nil {
		return err
	}
	if sec.Take == nil {
		return fmt.Errorf("%w %q: Take is nil", ErrStatsSection, sec.Name)
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
			return fmt.Errorf("%w %q: already added", ErrStatsSection, sec.Name)
		}
	}
	next := append(append(make([]StatsSection, 0, len(cur)+1), cur...), sec)
	r.secs.Store(&next)
	return nil
}

// validSectionName checks a section's name: a path segment of its own.
func validSectionName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrStatsSection)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w %q: name must be lower case letters, digits and '-'", ErrStatsSection, name)
		}
	}
	for _, k := range enginePages {
		if k == name {
			return fmt.Errorf("%w %q: the name of one of the engine's pages", ErrStatsSection, name)
		}
	}
	return nil
}

// enginePages are the engine's own stats pages, and the dashboard's event stream.
var enginePages = append(append([]string(nil), statsKinds...), "events")

// sections returns the sections registered so far. Any goroutine.
func (s *Server) sections() []StatsSection {
	if p := s.statsReg.secs.Load(); p != nil {
		return *p
	}
	return nil
}

// section returns the section named name.
func (s *Server) section(name string) (StatsSection, bool) {
	for _, sec := range s.sections() {
		if sec.Name == name {
			return sec, true
		}
	}
	return StatsSection{}, false
}

// errSectionQuery marks a Take error: the page answers 400.
type errSectionQuery struct{ err error }

func (e errSectionQuery) Error() string { return e.err.Error() }

// takeSection gathers sec from every loop of the server (at once), and returns the totals
// and, with several loops, each loop's figures. Not on a loop of the server (it waits for
// each one).
func (s *Server) takeSection(ctx context.Context, sec StatsSection, q url.Values) (total any, per []any, err error) {
	loops := s.Loops()
	per = make([]any, len(loops))
	errs := make([]error, len(loops))
	var wg sync.WaitGroup
	for i, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			type res struct {
				v   any
				err error
			}
			r, err := askLoop(ctx, l.srv, statsWait, func() res {
				v, err := sec.Take(l, q)
				return res{v, err}
			})
			if err == nil && r.err != nil {
				err = errSectionQuery{r.err}
			}
			per[i], errs[i] = r.v, err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	if len(per) == 1 {
		return per[0], nil, nil
	}
	total = per[0]
	if sec.Sum != nil {
		total = sec.Sum(per)
	}
	return total, per, nil
}

// sectionPage answers sec's page: its figures from every loop, as JSON (with several
// loops, the totals' object with a "shards" array of each loop's) or, with
// ?format=text and a Text renderer, as text.
func (s *Server) sectionPage(ctx context.Context, sec StatsSection, q url.Values) (code int, ctype string, body []byte) {
	total, per, err := s.takeSection(ctx, sec, q)
	var qe errSectionQuery
	switch {
	case errors.As(err, &qe):
		return http.StatusBadRequest, "text/plain; charset=utf-8", []byte("400 Bad Request: " + qe.Error() + "\n")
	case err != nil && ctx.Err() != nil:
		return http.StatusServiceUnavailable, "text/plain; charset=utf-8", []byte("request cancelled\n")
	case err != nil:
		return http.StatusServiceUnavailable, "text/plain; charset=utf-8", []byte(err.Error() + "\n")
	}
	text := q.Get("format") == "text" && sec.Text != nil
	write := sec.JSON
	if text {
		write = sec.Text
	} else if write == nil {
		write = func(w io.Writer, v any) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		}
	}
	totalB, perB, err := renderEach(total, per, func(b *bytes.Buffer, v any) error { return write(b, v) })
	if err != nil {
		return http.StatusInternalServerError, "text/plain; charset=utf-8", []byte(err.Error() + "\n")
	}
	switch {
	case text && per != nil:
		var b bytes.Buffer
		fmt.Fprintf(&b, "== total over %d shards ==\n", len(per))
		b.Write(totalB)
		for i, p := range perB {
			fmt.Fprintf(&b, "\n== shard %d ==\n", i)
			b.Write(p)
		}
		return http.StatusOK, "text/plain; charset=utf-8", b.Bytes()
	case text:
		return http.StatusOK, "text/plain; charset=utf-8", totalB
	case per != nil:
		out, err := spliceShards(totalB, perB)
		if err != nil {
			return http.StatusInternalServerError, "text/plain; charset=utf-8", []byte(err.Error() + "\n")
		}
		return http.StatusOK, "application/json", out
	}
	return http.StatusOK, "application/json", totalB
}

// handleSections mounts prefix/{section}: the pages of the sections added with AddStats,
// looked up when a request arrives, so that a section added later is served too.
func (s *Server) handleSections(prefix string) {
	s.Handle("GET "+prefix+"/{section}", func(c *Ctx) {
		sec, ok := s.section(c.PathValue("section"))
		if !ok {
			c.String(404, "404 Not Found\n")
			return
		}
		q := url.Values{}
		if raw := c.RawQuery(); raw != "" {
			if parsed, err := url.ParseQuery(raw); err == nil {
				q = parsed
			}
		}
		ctx := c.Context()
		var code int
		var ctype string
		var body []byte
		c.srv.mode.offLoop(c, func() { code, ctype, body = s.sectionPage(ctx, sec, q) })
		c.Bytes(code, ctype, body)
	}, Exempt())
}

// serveSectionHTTP answers a section's page for StatsHandler and reports whether the path
// named one. Any goroutine but a loop's.
func (s *Server) serveSectionHTTP(w http.ResponseWriter, r *http.Request) bool {
	name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	sec, ok := s.section(name)
	if !ok {
		return false
	}
	code, ctype, body := s.sectionPage(r.Context(), sec, r.URL.Query())
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(code)
	_, _ = w.Write(body)
	return true
}

// takeSections takes every section's figures on this loop (Snapshot, the dashboard).
// Loop-confined. A section whose Take fails is left out.
func (s *Server) takeSections() map[string]any {
	secs := s.sections()
	if len(secs) == 0 {
		return nil
	}
	out := make(map[string]any, len(secs))
	for _, sec := range secs {
		if v, err := sec.Take(s.loopRef, nil); err == nil {
			out[sec.Name] = v
		}
	}
	return out
}

// sumSections combines each section's per-loop figures (a Snapshot with shards).
func (s *Server) sumSections(per []map[string]any) map[string]any {
	secs := s.sections()
	if len(secs) == 0 {
		return nil
	}
	out := make(map[string]any, len(secs))
	for _, sec := range secs {
		vs := make([]any, 0, len(per))
		for _, p := range per {
			if v, ok := p[sec.Name]; ok {
				vs = append(vs, v)
			}
		}
		if len(vs) != len(per) || len(vs) == 0 {
			continue // added while the snapshot was taken: not on every loop yet
		}
		if sec.Sum != nil {
			out[sec.Name] = sec.Sum(vs)
		} else {
			out[sec.Name] = vs[0]
		}
	}
	return out
}

// panels returns what the dashboard shows of each section with a Panel.
func (s *Server) panels(sections map[string]any) map[string]any {
	var out map[string]any
	for _, sec := range s.sections() {
		v, ok := sections[sec.Name]
		if !ok || sec.Panel == nil {
			continue
		}
		if out == nil {
			out = map[string]any{}
		}
		out[sec.Name] = sec.Panel(v)
	}
	return out
}
