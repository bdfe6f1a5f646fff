package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/recorder"
	"github.com/batonrt/baton/internal/render"
)

// The figures of a server with shards: every page and Snapshot shows the totals in the
// usual format, then each shard's own. Counters and times add up; percentiles cannot be
// merged from percentiles, so a total's percentiles are the worst shard's (an upper
// bound), while its histogram buckets, counts, sums and maxima are exact. docs/accounting.md,
// "Shards", lists how each figure is combined.

// eachShard runs fn for every shard at once and waits for all; fn gets the shard's index.
func (set *shardSet) eachShard(fn func(i int, sh *Server)) {
	var wg sync.WaitGroup
	for i, sh := range set.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i, sh)
		}()
	}
	wg.Wait()
}

// askShards runs fn on every shard's loop (askLoop, all at once) and returns the results in
// shard order, or the first error.
func askShards[T any](ctx context.Context, set *shardSet, fn func(sh *Server) T) ([]T, error) {
	out := make([]T, len(set.all))
	errs := make([]error, len(set.all))
	set.eachShard(func(i int, sh *Server) {
		out[i], errs[i] = askLoop(ctx, sh, statsWait, func() T { return fn(sh) })
	})
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
	}
	return out, nil
}

// snapshot is Snapshot with shards: each shard's sections, taken on its own loop at once,
// and their totals.
func (set *shardSet) snapshot(ctx context.Context, v View) (Snapshot, error) {
	per := make([]Snapshot, len(set.all))
	errs := make([]error, len(set.all))
	set.eachShard(func(i int, sh *Server) { per[i], errs[i] = sh.snapshotOne(ctx, v) })
	for _, err := range errs {
		if err != nil {
			return Snapshot{}, err
		}
	}
	total := Snapshot{Shards: per}
	for i := range per {
		p := &per[i]
		if p.Taken.After(total.Taken) {
			total.Taken = p.Taken
		}
	}
	loops := make([]accounting.LoopSnapshot, len(per))
	routes := make([][]accounting.RouteSnapshot, len(per))
	tasks := make([]accounting.TasksSnapshot, len(per))
	offs := make([]OffloadSnapshot, len(per))
	adms := make([]AdmissionSnapshot, len(per))
	secs := make([]map[string]any, len(per))
	for i := range per {
		loops[i], routes[i], tasks[i], offs[i] = per[i].Loop, per[i].Routes, per[i].Tasks, per[i].Offload
		adms[i], secs[i] = per[i].Admission, per[i].Sections
	}
	if v&ViewLoop != 0 {
		total.Loop = sumLoops(loops)
	}
	if v&ViewRoutes != 0 {
		total.Routes = sumRoutes(routes)
	}
	if v&ViewTasks != 0 {
		total.Tasks = sumTasks(tasks)
	}
	if v&ViewOffload != 0 {
		total.Offload = sumOffload(offs)
	}
	if v&ViewAdmission != 0 {
		total.Admission = sumAdmission(adms)
	}
	if v&ViewSections != 0 {
		total.Sections = set.all[0].sumSections(secs)
	}
	return total, nil
}

// sumSummary combines two distributions: counts, sums, maxima and buckets exactly, the
// percentiles as the larger of the two (an upper bound of the merged percentile).
func sumSummary(a, b accounting.Summary) accounting.Summary {
	a.Count += b.Count
	a.Sum += b.Sum
	a.P50, a.P90, a.P99, a.P999 = max(a.P50, b.P50), max(a.P90, b.P90), max(a.P99, b.P99), max(a.P999, b.P999)
	a.Max = max(a.Max, b.Max)
	for i := range a.Buckets {
		a.Buckets[i] += b.Buckets[i]
	}
	return a
}

func sumPair(a, b accounting.SummaryPair) accounting.SummaryPair {
	return accounting.SummaryPair{Cumulative: sumSummary(a.Cumulative, b.Cumulative), Recent: sumSummary(a.Recent, b.Recent)}
}

// sumLoops adds the loops up: busy time, slices, switches and tasks add; utilisation is
// busy over elapsed summed, so the mean over the shards; lag is combined by sumSummary;
// uptime and the ready-queue depths are the largest.
func sumLoops(ls []accounting.LoopSnapshot) accounting.LoopSnapshot {
	var t accounting.LoopSnapshot
	for i, l := range ls {
		if i == 0 {
			t.ArrivalClock = l.ArrivalClock
		}
		t.Uptime = max(t.Uptime, l.Uptime)
		t.BusyTotal += l.BusyTotal
		for w := range t.Utilisation {
			t.Utilisation[w].Length = l.Utilisation[w].Length
			t.Utilisation[w].Busy += l.Utilisation[w].Busy
			t.Utilisation[w].Elapsed += l.Utilisation[w].Elapsed
		}
		t.Lag = sumSummary(t.Lag, l.Lag)
		t.Slices.Count += l.Slices.Count
		t.Slices.Total += l.Slices.Total
		t.Slices.Max = max(t.Slices.Max, l.Slices.Max)
		t.Slices.Slow += l.Slices.Slow
		t.Slices.SlowTotal += l.Slices.SlowTotal
		t.ReadyDepth = max(t.ReadyDepth, l.ReadyDepth)
		t.ReadyDepthMax = max(t.ReadyDepthMax, l.ReadyDepthMax)
		t.Switches += l.Switches
		t.SwitchRate.Switches += l.SwitchRate.Switches
		t.SwitchRate.Elapsed = max(t.SwitchRate.Elapsed, l.SwitchRate.Elapsed)
		t.TasksStarted += l.TasksStarted
		t.TasksDone += l.TasksDone
		t.ArrivalBounded += l.ArrivalBounded
		t.ArrivalHidden += l.ArrivalHidden
		// The process's figures are the same process's, read at about the same time: the
		// largest reading.
		t.Goroutines = max(t.Goroutines, l.Goroutines)
		t.RSSBytes = max(t.RSSBytes, l.RSSBytes)
		t.OpenFDs = max(t.OpenFDs, l.OpenFDs)
		if st := l.Stalls; st != nil {
			if t.Stalls == nil {
				t.Stalls = &accounting.StallStats{Threshold: st.Threshold}
			}
			t.Stalls.Count += st.Count
			t.Stalls.Logged += st.Logged
			t.Stalls.Suppressed += st.Suppressed
			t.Stalls.Starved += st.Starved
			t.Stalls.Durations = sumSummary(t.Stalls.Durations, st.Durations)
			if st.InProgress && (!t.Stalls.InProgress || st.CurrentElapsed > t.Stalls.CurrentElapsed) {
				t.Stalls.InProgress, t.Stalls.CurrentTask, t.Stalls.CurrentElapsed = true, st.CurrentTask, st.CurrentElapsed
			}
		}
	}
	return t
}

// sumRoutes merges the routes of every shard by route key (every shard has the same
// routes), sorted by key like one shard's.
func sumRoutes(per [][]accounting.RouteSnapshot) []accounting.RouteSnapshot {
	var out []accounting.RouteSnapshot
	at := map[string]int{}
	for _, rs := range per {
		for _, r := range rs {
			i, ok := at[r.Route]
			if !ok {
				at[r.Route] = len(out)
				out = append(out, r)
				continue
			}
			t := &out[i]
			t.Count += r.Count
			t.Errors += r.Errors
			t.ClientErrors += r.ClientErrors
			t.InFlight += r.InFlight
			t.Recent.Count += r.Recent.Count
			t.Recent.Errors += r.Recent.Errors
			t.Recent.ClientErrors += r.Recent.ClientErrors
			t.Recent.Span = max(t.Recent.Span, r.Recent.Span)
			t.Latency = sumPair(t.Latency, r.Latency)
			t.OnLoop = sumPair(t.OnLoop, r.OnLoop)
			t.QueueDelay = sumPair(t.QueueDelay, r.QueueDelay)
			t.Parked = sumPair(t.Parked, r.Parked)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Route < out[j].Route })
	return out
}

// sumTasks lists every shard's live tasks (busiest first) and finished ones.
func sumTasks(per []accounting.TasksSnapshot) accounting.TasksSnapshot {
	var t accounting.TasksSnapshot
	for _, p := range per {
		t.Live = append(t.Live, p.Live...)
		t.Finished = append(t.Finished, p.Finished...)
		t.FinishedTotal += p.FinishedTotal
	}
	render.SortTasks(t.Live)
	return t
}

// sumOffload is the one shared pool and every shard's gates, by name.
func sumOffload(per []OffloadSnapshot) OffloadSnapshot {
	var t OffloadSnapshot
	for i, p := range per {
		if i == 0 {
			t.Pool = p.Pool
		}
		t.Gates = append(t.Gates, p.Gates...)
	}
	sort.SliceStable(t.Gates, func(i, j int) bool { return t.Gates[i].Name < t.Gates[j].Name })
	return t
}

// sumAdmission adds the shards' admission figures (limits are per shard, so they add
// too); the mean service time is the mean weighted by admissions, Retry-After the largest.
func sumAdmission(per []AdmissionSnapshot) AdmissionSnapshot {
	var t AdmissionSnapshot
	var weighted float64
	for _, p := range per {
		t.Limit += p.Limit
		t.QueueLimit += p.QueueLimit
		t.Active += p.Active
		t.Queued += p.Queued
		t.AdmittedTotal += p.AdmittedTotal
		t.QueuedTotal += p.QueuedTotal
		t.RefusedTotal += p.RefusedTotal
		weighted += p.MeanServiceSeconds * float64(p.AdmittedTotal)
		t.RetryAfterSeconds = max(t.RetryAfterSeconds, p.RetryAfterSeconds)
		t.InFlight += p.InFlight
		t.Parsed += p.Parsed
		t.PanicsTotal += p.PanicsTotal
		t.Accept.Accepted += p.Accept.Accepted
		t.Accept.ResourceErrors += p.Accept.ResourceErrors
		t.Accept.Shed += p.Accept.Shed
		t.Accept.OtherErrors += p.Accept.OtherErrors
		t.Accept.RegisterErrored += p.Accept.RegisterErrored
	}
	if t.AdmittedTotal > 0 {
		t.MeanServiceSeconds = weighted / float64(t.AdmittedTotal)
	}
	return t
}

// shardPageKinds are the stats pages a server with shards answers from every shard.
var shardPageKinds = slices.Clone(statsKinds)

// handleStats is HandleStats with shards: every shard answers every page with the totals
// and each shard's figures (gathered from each shard's loop, off the loop of the shard
// that serves the request), and each shard has its own dashboard hub, whose frames come
// from Snapshot and so cover every shard.
func (set *shardSet) handleStats(prefix string) {
	root := set.all[0]
	for _, kind := range shardPageKinds {
		root.Handle("GET "+prefix+"/"+kind, func(c *Ctx) { set.servePage(c, kind) }, Exempt())
	}
	root.handleSections(prefix) // AddStats's pages, from every shard (statsections.go)
	for _, sh := range set.all {
		sh.handle("GET "+prefix+"/", func(c *Ctx) { c.Bytes(200, "text/html; charset=utf-8", dashboardHTML) }, sh.middleware, []RouteOption{Exempt()})
		sh.handle("GET "+prefix+"/events", sh.serveDashEvents, sh.middleware, []RouteOption{Exempt()})
	}
}

// servePage answers a stats page on the loop of c's shard: the page is gathered and
// rendered off the loop while c's task parks.
func (set *shardSet) servePage(c *Ctx, kind string) {
	q := url.Values{}
	for _, k := range []string{"format", "stacks", "top"} {
		if v := c.Query(k); v != "" {
			q.Set(k, v)
		}
	}
	ctx := c.Context()
	var code int
	var ctype string
	var body []byte
	c.srv.mode.offLoop(c, func() { code, ctype, body = set.page(ctx, kind, q) })
	c.Bytes(code, ctype, body)
}

// statsHandler is StatsHandler with shards.
func (set *shardSet) statsHandler() http.Handler {
	root := set.all[0]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if root.serveSectionHTTP(w, r) { // AddStats's pages, from every shard (statsections.go)
			return
		}
		if root.cfg.NoAccounting {
			http.NotFound(w, r)
			return
		}
		for _, kind := range shardPageKinds {
			if strings.HasSuffix(r.URL.Path, "/"+kind) || r.URL.Path == kind {
				code, ctype, body := set.page(r.Context(), kind, r.URL.Query())
				w.Header().Set("Content-Type", ctype)
				w.WriteHeader(code)
				_, _ = w.Write(body)
				return
			}
		}
		if !root.serveDashboardHTTP(w, r) { // a path ending in / or /events
			http.NotFound(w, r)
		}
	})
}

// page gathers the page kind from every shard and renders the totals, then each shard's
// page: in JSON the totals' object gets a "shards" array of the shards' objects, each with
// its "shard" index; in text each shard's view follows the totals under a header line.
func (set *shardSet) page(ctx context.Context, kind string, q url.Values) (code int, ctype string, body []byte) {
	text := q.Get("format") == "text" && kind != "offload" && kind != "admission"
	var total []byte
	per := make([][]byte, len(set.all))
	var err error
	switch kind {
	case "tasks":
		var snaps []accounting.TasksSnapshot
		if snaps, err = askShards(ctx, set, func(sh *Server) accounting.TasksSnapshot { return sh.snapshotTasks() }); err == nil {
			if q.Get("stacks") == "1" {
				for _, s := range snaps {
					addStacks(s.Live)
				}
			}
			write := render.WriteTasksJSON
			if text {
				write = render.WriteTasksText
			}
			total, per, err = renderEach(sumTasks(snaps), snaps, func(b *bytes.Buffer, v accounting.TasksSnapshot) error { return write(b, v) })
		}
	case "routes":
		now := time.Now()
		var copies []*recorder.RoutesCopy
		if copies, err = askShards(ctx, set, func(sh *Server) *recorder.RoutesCopy { return sh.takeRoutes(now) }); err == nil {
			rs := make([][]accounting.RouteSnapshot, len(copies))
			for i, c := range copies {
				rs[i] = readRoutes(c)
			}
			write := render.WriteRoutesJSON
			if text {
				write = render.WriteRoutesText
			}
			total, per, err = renderEach(sumRoutes(rs), rs, func(b *bytes.Buffer, v []accounting.RouteSnapshot) error { return write(b, v) })
		}
	case "loop":
		var snaps []accounting.LoopSnapshot
		if snaps, err = askShards(ctx, set, func(sh *Server) accounting.LoopSnapshot { return sh.snapshotLoop() }); err == nil {
			var proc accounting.LoopSnapshot
			fillProcess(&proc) // once, off the loops: the process is the same for each
			for i := range snaps {
				snaps[i].Goroutines, snaps[i].RSSBytes, snaps[i].OpenFDs = proc.Goroutines, proc.RSSBytes, proc.OpenFDs
			}
			write := render.WriteLoopJSON
			if text {
				write = render.WriteLoopText
			}
			total, per, err = renderEach(sumLoops(snaps), snaps, func(b *bytes.Buffer, v accounting.LoopSnapshot) error { return write(b, v) })
		}
	case "admission":
		var snaps []AdmissionSnapshot
		if snaps, err = askShards(ctx, set, func(sh *Server) AdmissionSnapshot { return sh.admissionSnapshot() }); err == nil {
			total, per, err = renderEach(sumAdmission(snaps), snaps, func(b *bytes.Buffer, v AdmissionSnapshot) error { return json.NewEncoder(b).Encode(v) })
		}
	case "offload":
		snaps := make([]OffloadSnapshot, len(set.all))
		for i, sh := range set.all {
			snaps[i] = sh.snapshotOffload()
		}
		total, per, err = renderEach(sumOffload(snaps), snaps, func(b *bytes.Buffer, v OffloadSnapshot) error { return json.NewEncoder(b).Encode(v) })
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return http.StatusServiceUnavailable, "text/plain; charset=utf-8", []byte("request cancelled\n")
	default:
		return http.StatusServiceUnavailable, "text/plain; charset=utf-8", []byte(err.Error() + "\n")
	}
	if text {
		var b bytes.Buffer
		b.WriteString("== total over " + fmt.Sprint(len(per)) + " shards ==\n")
		b.Write(total)
		for i, p := range per {
			fmt.Fprintf(&b, "\n== shard %d ==\n", i)
			b.Write(p)
		}
		return http.StatusOK, "text/plain; charset=utf-8", b.Bytes()
	}
	out, err := spliceShards(total, per)
	if err != nil {
		return http.StatusInternalServerError, "text/plain; charset=utf-8", []byte(err.Error() + "\n")
	}
	return http.StatusOK, "application/json", out
}

// renderEach renders the total and every shard's value with write.
func renderEach[T any](total T, per []T, write func(*bytes.Buffer, T) error) ([]byte, [][]byte, error) {
	var b bytes.Buffer
	if err := write(&b, total); err != nil {
		return nil, nil, err
	}
	t := slices.Clone(b.Bytes())
	out := make([][]byte, len(per))
	for i, v := range per {
		b.Reset()
		if err := write(&b, v); err != nil {
			return nil, nil, err
		}
		out[i] = slices.Clone(b.Bytes())
	}
	return t, out, nil
}

// spliceShards adds to the JSON object total a "shards" array of the JSON objects per,
// each given a leading "shard" member with its index.
func spliceShards(total []byte, per [][]byte) ([]byte, error) {
	t := bytes.TrimSpace(total)
	if len(t) < 2 || t[0] != '{' || t[len(t)-1] != '}' {
		return nil, fmt.Errorf("loop: stats page is not a JSON object")
	}
	out := append([]byte(nil), bytes.TrimRight(t[:len(t)-1], " \n\t")...)
	if out[len(out)-1] != '{' {
		out = append(out, ',')
	}
	out = append(out, `"shards":[`...)
	for i, p := range per {
		p = bytes.TrimSpace(p)
		if len(p) < 2 || p[0] != '{' {
			return nil, fmt.Errorf("loop: shard %d's stats page is not a JSON object", i)
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = fmt.Appendf(out, `{"shard":%d`, i)
		if inner := bytes.TrimSpace(p[1 : len(p)-1]); len(inner) > 0 {
			out = append(out, ',')
			out = append(out, inner...)
		}
		out = append(out, '}')
	}
	out = append(out, "]}\n"...)
	if !json.Valid(out) {
		return nil, fmt.Errorf("loop: stats page with shards is not valid JSON")
	}
	return out, nil
}
