// Package render writes the loop's figures (tasks, routes, the loop itself) as the stats
// pages' JSON documents and text views, and a request's Server-Timing header. The engine's
// own: loop, the packages under loop/ and the loop's recorders import it (internal/layout
// checks it); the figures' types are accounting's. Every function may be called from any
// goroutine.
package render

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batonrt/baton/accounting"
)

// SwitchRateWindow is the window over which accounting.LoopSnapshot.SwitchRate counts
// switches: the last ten complete seconds. The loop's recorder (internal/recorder) counts
// over it and the loop's text view names it.
const SwitchRateWindow = 10 * time.Second

// JSON documents. Field names and units are defined in docs/accounting.md; a Summary encodes
// itself (accounting.Summary.MarshalJSON).
type (
	tasksDoc struct {
		LiveCount     int                     `json:"live_count"`
		FinishedTotal uint64                  `json:"finished_total"`
		Live          []accounting.TaskSample `json:"live"`
		Finished      []accounting.TaskSample `json:"finished"`
	}

	slicesDoc struct {
		Count     uint64  `json:"count"`
		Total     float64 `json:"total_seconds"`
		Mean      float64 `json:"mean_seconds"`
		Max       float64 `json:"max_seconds"`
		Slow      uint64  `json:"slow"`
		SlowTotal float64 `json:"slow_seconds"`
	}

	pairDoc struct {
		Cumulative accounting.Summary `json:"cumulative"`
		Recent     accounting.Summary `json:"recent"`
	}

	recentDoc struct {
		Count        uint64  `json:"count"`
		Errors       uint64  `json:"errors"`
		ClientErrors uint64  `json:"client_errors"`
		Span         float64 `json:"span_seconds"`
		PerSecond    float64 `json:"requests_per_second"`
	}

	routeDoc struct {
		Route        string    `json:"route"`
		Count        uint64    `json:"count"`
		Errors       uint64    `json:"errors"`
		ClientErrors uint64    `json:"client_errors"`
		InFlight     int64     `json:"in_flight"`
		Recent       recentDoc `json:"recent"`
		Latency      pairDoc   `json:"latency"`
		OnLoop       pairDoc   `json:"on_loop"`
		QueueDelay   pairDoc   `json:"queue_delay"`
		Parked       pairDoc   `json:"parked"`
	}

	routesDoc struct {
		Routes []routeDoc `json:"routes"`
	}

	stallsDoc struct {
		Threshold      float64            `json:"threshold_seconds"`
		Count          uint64             `json:"count"`
		Logged         uint64             `json:"logged"`
		Suppressed     uint64             `json:"suppressed"`
		Starved        uint64             `json:"starved"`
		Durations      accounting.Summary `json:"durations"`
		InProgress     bool               `json:"in_progress"`
		CurrentTask    uint64             `json:"current_task"`
		CurrentElapsed float64            `json:"current_elapsed_seconds"`
	}

	loopDoc struct {
		Uptime         float64            `json:"uptime_seconds"`
		BusyTotal      float64            `json:"busy_seconds_total"`
		Utilisation1s  float64            `json:"utilisation_1s"`
		Utilisation10s float64            `json:"utilisation_10s"`
		Utilisation60s float64            `json:"utilisation_60s"`
		Lag            accounting.Summary `json:"lag"`
		Slices         slicesDoc          `json:"slices"`
		ReadyDepth     int                `json:"ready_depth"`
		ReadyDepthMax  int                `json:"ready_depth_max"`
		Switches       uint64             `json:"switches_total"`
		SwitchesPerSec float64            `json:"switches_per_second"`
		LiveTasks      int64              `json:"live_tasks"`
		TasksStarted   uint64             `json:"tasks_started"`
		CompletedTasks uint64             `json:"completed_tasks"`
		Stalls         *stallsDoc         `json:"stalls"`
		ArrivalClock   string             `json:"arrival_clock"`
		ArrivalBounded uint64             `json:"arrival_bounded_reads"`
		ArrivalHidden  float64            `json:"arrival_hidden_seconds_total"`
		Goroutines     int                `json:"goroutines"`
		RSSBytes       int64              `json:"rss_bytes,omitempty"`
		OpenFDs        int                `json:"open_fds,omitempty"`
	}
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ms formats d in milliseconds with three decimals, the unit of the text views.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond))
}

// textWriter gathers a text view; the first write error sticks.
type textWriter struct {
	bw  *bufio.Writer
	err error
}

func (t *textWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.bw, format, args...)
	}
}

func (t *textWriter) table(header string, rows [][]string) {
	if t.err != nil {
		return
	}
	tw := tabwriter.NewWriter(t.bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	// The last cell of a line is not tab-terminated: it is free text, left as it is (the
	// route, like top's COMMAND), while the cells before it are right-aligned.
	line := func(cells []string) string {
		n := len(cells) - 1
		return strings.Join(cells[:n], "\t") + "\t  " + cells[n] + "\n"
	}
	_, t.err = io.WriteString(tw, line(strings.Split(header, "\t")))
	for _, r := range rows {
		if t.err == nil {
			_, t.err = io.WriteString(tw, line(r))
		}
	}
	if t.err == nil {
		t.err = tw.Flush()
	}
}

func (t *textWriter) flush() error {
	if t.err != nil {
		return t.err
	}
	return t.bw.Flush()
}

func pairOf(p accounting.SummaryPair) pairDoc {
	return pairDoc{Cumulative: p.Cumulative, Recent: p.Recent}
}

// WriteTasksJSON writes s as JSON: {"live_count", "finished_total", "live": [task...],
// "finished": [task...]}, each task as accounting.TaskSample.MarshalJSON encodes it, in the order given. Any goroutine.
func WriteTasksJSON(w io.Writer, s accounting.TasksSnapshot) error {
	return writeJSON(w, tasksDoc{
		LiveCount: len(s.Live), FinishedTotal: s.FinishedTotal,
		Live: s.Live, Finished: s.Finished,
	})
}

// WriteRoutesJSON writes rs as JSON: {"routes": [route...]}, in the order given. Any
// goroutine.
func WriteRoutesJSON(w io.Writer, rs []accounting.RouteSnapshot) error {
	doc := routesDoc{Routes: make([]routeDoc, len(rs))}
	for i, r := range rs {
		doc.Routes[i] = routeDoc{
			Route: r.Route, Count: r.Count, Errors: r.Errors, ClientErrors: r.ClientErrors,
			InFlight: r.InFlight,
			Recent: recentDoc{
				Count: r.Recent.Count, Errors: r.Recent.Errors,
				ClientErrors: r.Recent.ClientErrors, Span: r.Recent.Span.Seconds(),
				PerSecond: r.Recent.PerSecond(),
			},
			Latency: pairOf(r.Latency), OnLoop: pairOf(r.OnLoop),
			QueueDelay: pairOf(r.QueueDelay), Parked: pairOf(r.Parked),
		}
	}
	return writeJSON(w, doc)
}

// WriteLoopJSON writes l as JSON (one flat object; "stalls" is null without a watchdog).
// Any goroutine.
func WriteLoopJSON(w io.Writer, l accounting.LoopSnapshot) error {
	doc := loopDoc{
		Uptime:         l.Uptime.Seconds(),
		BusyTotal:      l.BusyTotal.Seconds(),
		Utilisation1s:  l.Utilisation[0].Utilisation(),
		Utilisation10s: l.Utilisation[1].Utilisation(),
		Utilisation60s: l.Utilisation[2].Utilisation(),
		Lag:            l.Lag,
		Slices: slicesDoc{Count: l.Slices.Count, Total: l.Slices.Total.Seconds(), Mean: l.Slices.Mean().Seconds(),
			Max: l.Slices.Max.Seconds(), Slow: l.Slices.Slow, SlowTotal: l.Slices.SlowTotal.Seconds()},
		ReadyDepth:     l.ReadyDepth,
		ReadyDepthMax:  l.ReadyDepthMax,
		Switches:       l.Switches,
		SwitchesPerSec: l.SwitchRate.PerSecond(),
		LiveTasks:      l.LiveTasks(),
		TasksStarted:   l.TasksStarted,
		CompletedTasks: l.TasksDone,
		ArrivalClock:   l.ArrivalClock,
		ArrivalBounded: l.ArrivalBounded,
		ArrivalHidden:  l.ArrivalHidden.Seconds(),
		Goroutines:     l.Goroutines,
		RSSBytes:       l.RSSBytes,
		OpenFDs:        l.OpenFDs,
	}
	if st := l.Stalls; st != nil {
		doc.Stalls = &stallsDoc{
			Threshold: st.Threshold.Seconds(), Count: st.Count, Logged: st.Logged,
			Suppressed: st.Suppressed, Starved: st.Starved, Durations: st.Durations,
			InProgress: st.InProgress, CurrentTask: st.CurrentTask,
			CurrentElapsed: st.CurrentElapsed.Seconds(),
		}
	}
	return writeJSON(w, doc)
}

// taskColumns are the columns of the tasks text view; times in milliseconds.
const taskColumns = "ID\tKIND\tSTATE\tPARK\tROUNDS\tON_LOOP\tCPU\tMAX_SLICE\tSLOW\tQUEUE\tPARKED\tAGE\tSTATUS\tROUTE"

func taskRows(ts []accounting.TaskSample) [][]string {
	rows := make([][]string, len(ts))
	for i := range ts {
		s := &ts[i]
		cpu := "-"
		if s.CPUMeasured {
			cpu = ms(s.CPU)
		}
		park := s.ParkReason
		if park == "" {
			park = "-"
		}
		route := s.Route
		if route == "" {
			route = "-"
		}
		if s.Path != "" && s.Path != route {
			route += " " + s.Path
		}
		status := "-"
		if s.Status != 0 {
			status = fmt.Sprint(s.Status)
		}
		rows[i] = []string{
			fmt.Sprint(s.ID), s.Kind, s.State, park, fmt.Sprint(s.Rounds),
			ms(s.OnLoop), cpu, ms(s.MaxSlice), fmt.Sprint(s.SlowSlices), ms(s.QueueDelay),
			ms(s.ParkedTotal()), ms(s.Age), status, route,
		}
	}
	return rows
}

// WriteTasksText writes s as a top-style text view: a table of live tasks, then one of
// recently finished tasks (times in milliseconds), then each stack that was captured. Any
// goroutine.
func WriteTasksText(w io.Writer, s accounting.TasksSnapshot) error {
	t := &textWriter{bw: bufio.NewWriter(w)}
	t.printf("baton tasks: %d live, %d finished since start (times in ms)\n\nLIVE\n", len(s.Live), s.FinishedTotal)
	t.table(taskColumns, taskRows(s.Live))
	t.printf("\nRECENTLY FINISHED (newest first)\n")
	t.table(taskColumns, taskRows(s.Finished))
	for _, group := range [][]accounting.TaskSample{s.Live, s.Finished} {
		for i := range group {
			if st := group[i].Stack; st != "" {
				t.printf("\n--- task %d (%s, goroutine %d)\n%s\n", group[i].ID, group[i].State, group[i].Goroutine, st)
			}
		}
	}
	return t.flush()
}

// routeColumns are the columns of the routes text view; times in milliseconds.
const routeColumns = "COUNT\t5XX\t4XX\tINFLIGHT\tRECENT\tRECENT/S\tLAT_P50\tLAT_P99\tLAT_MAX\tONLOOP_MEAN\tONLOOP_P99\tQUEUE_P99\tPARKED_P99\tR_LAT_P99\tR_ONLOOP_P99\tROUTE"

// WriteRoutesText writes rs as a text table, one line per route (times in milliseconds;
// R_ columns are the recent view). Any goroutine.
func WriteRoutesText(w io.Writer, rs []accounting.RouteSnapshot) error {
	t := &textWriter{bw: bufio.NewWriter(w)}
	t.printf("baton routes: %d (times in ms; RECENT and R_ columns: the recent view)\n\n", len(rs))
	rows := make([][]string, len(rs))
	for i, r := range rs {
		rows[i] = []string{
			fmt.Sprint(r.Count), fmt.Sprint(r.Errors), fmt.Sprint(r.ClientErrors),
			fmt.Sprint(r.InFlight), fmt.Sprint(r.Recent.Count), fmt.Sprintf("%.1f", r.Recent.PerSecond()),
			ms(r.Latency.Cumulative.P50), ms(r.Latency.Cumulative.P99), ms(r.Latency.Cumulative.Max),
			ms(r.OnLoop.Cumulative.Mean()), ms(r.OnLoop.Cumulative.P99),
			ms(r.QueueDelay.Cumulative.P99), ms(r.Parked.Cumulative.P99),
			ms(r.Latency.Recent.P99), ms(r.OnLoop.Recent.P99), r.Route,
		}
	}
	t.table(routeColumns, rows)
	return t.flush()
}

// WriteLoopText writes l as a short text report. Any goroutine.
func WriteLoopText(w io.Writer, l accounting.LoopSnapshot) error {
	t := &textWriter{bw: bufio.NewWriter(w)}
	t.printf("baton loop: up %s, busy %s in total\n", l.Uptime.Round(time.Millisecond), l.BusyTotal.Round(time.Microsecond))
	t.printf("utilisation   1s %5.1f%%   10s %5.1f%%   60s %5.1f%%\n",
		100*l.Utilisation[0].Utilisation(), 100*l.Utilisation[1].Utilisation(), 100*l.Utilisation[2].Utilisation())
	t.printf("tasks         live %d   started %d   completed %d\n", l.LiveTasks(), l.TasksStarted, l.TasksDone)
	t.printf("ready queue   now %d   max %d\n", l.ReadyDepth, l.ReadyDepthMax)
	t.printf("switches      total %d   %.1f/s over the last %s\n", l.Switches, l.SwitchRate.PerSecond(), SwitchRateWindow)
	t.printf("slices        mean %s ms   max %s ms   slow %d (%s ms in all)\n",
		ms(l.Slices.Mean()), ms(l.Slices.Max), l.Slices.Slow, ms(l.Slices.SlowTotal))
	if l.ArrivalClock != "" {
		t.printf("arrival       clock %q   bounded reads %d (%s ms hidden wait in all)\n",
			l.ArrivalClock, l.ArrivalBounded, ms(l.ArrivalHidden))
	}
	if l.Goroutines > 0 {
		t.printf("process       goroutines %d", l.Goroutines)
		if l.RSSBytes > 0 {
			t.printf("   rss %.1f MiB", float64(l.RSSBytes)/(1<<20))
		}
		if l.OpenFDs > 0 {
			t.printf("   open fds %d", l.OpenFDs)
		}
		t.printf("\n")
	}
	t.printf("\n")
	rows := [][]string{summaryRow("lag (ready->run)", l.Lag)}
	if st := l.Stalls; st != nil {
		rows = append(rows, summaryRow("stalls", st.Durations))
	}
	t.table("COUNT\tMEAN\tP50\tP90\tP99\tP999\tMAX\t(ms)", rows)
	if st := l.Stalls; st != nil {
		t.printf("\nstalls over %s: %d ended, %d logged, %d not logged (rate limit), %d starved (the machine's doing)",
			st.Threshold, st.Count, st.Logged, st.Suppressed, st.Starved)
		if st.InProgress {
			t.printf("; IN PROGRESS: task %d for %s", st.CurrentTask, st.CurrentElapsed.Round(time.Millisecond))
		}
		t.printf("\n")
	}
	return t.flush()
}

func summaryRow(name string, s accounting.Summary) []string {
	return []string{fmt.Sprint(s.Count), ms(s.Mean()), ms(s.P50), ms(s.P90), ms(s.P99), ms(s.P999), ms(s.Max), name}
}

// SortTasks sorts tasks by OnLoop, longest first (ties by ID), the order of
// accounting.TasksSnapshot.Live. Any goroutine (it sorts ts in place).
func SortTasks(ts []accounting.TaskSample) {
	slices.SortFunc(ts, func(a, b accounting.TaskSample) int {
		if c := cmp.Compare(b.OnLoop, a.OnLoop); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// AppendServerTiming appends a Server-Timing header value for one request to dst and
// returns the extended buffer:
//
//	onloop;dur=0.123, queue;dur=0.010, parked;dur=50.200, cpu;dur=0.101
//
// Durations are in milliseconds (as the Server-Timing specification says) with three
// decimals; cpu is present only when CPUMeasured. It does not allocate when dst has room
// (about 80 bytes). Any goroutine.
func AppendServerTiming(dst []byte, s *accounting.TaskSample) []byte {
	dst = appendTiming(dst, "onloop;dur=", s.OnLoop)
	dst = appendTiming(dst, ", queue;dur=", s.QueueDelay)
	dst = appendTiming(dst, ", parked;dur=", s.ParkedTotal())
	if s.CPUMeasured {
		dst = appendTiming(dst, ", cpu;dur=", s.CPU)
	}
	return dst
}

// appendTiming appends name and d in milliseconds with three decimals (rounded to the
// microsecond), formatted as integers: cheaper than strconv.AppendFloat and exact.
func appendTiming(dst []byte, name string, d time.Duration) []byte {
	dst = append(dst, name...)
	us := (max(d, 0) + time.Microsecond/2) / time.Microsecond
	dst = strconv.AppendInt(dst, int64(us/1000), 10)
	frac := us % 1000
	return append(dst, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}
