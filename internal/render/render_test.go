package render

import (
	"bytes"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
)

var summarySchema = map[string]string{
	"count": tInt, "mean_seconds": tNum, "p50_seconds": tNum, "p90_seconds": tNum,
	"p99_seconds": tNum, "p999_seconds": tNum, "max_seconds": tNum,
}

func renderJSON(t *testing.T, write func(*bytes.Buffer) error) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, write(&buf))
	return decodeObject(t, buf.Bytes())
}

func testTasksSnapshot() accounting.TasksSnapshot {
	a, b := sampleTask(), sampleTask()
	b.ID, b.Kind, b.Route, b.Method, b.Path, b.State, b.ParkReason = 8, "background", "", "", "", "running", ""
	b.OnLoop, b.CPU, b.CPUMeasured, b.Goroutine, b.Stack = time.Second, 900*time.Millisecond, true, 5, "goroutine 5 [running]:\nmain.hog()"
	done := sampleTask()
	done.ID, done.State, done.ParkReason, done.Status = 3, "done", "", 503
	live := []accounting.TaskSample{a, b}
	SortTasks(live)
	return accounting.TasksSnapshot{Live: live, Finished: []accounting.TaskSample{done}, FinishedTotal: 40}
}

func TestTasksJSONSchema(t *testing.T) {
	snap := testTasksSnapshot()
	m := renderJSON(t, func(b *bytes.Buffer) error { return WriteTasksJSON(b, snap) })
	checkSchema(t, "tasks", m, map[string]string{"live_count": tInt, "finished_total": tInt, "live": tArr, "finished": tArr}, true)
	live := m["live"].([]any)
	require.Len(t, live, 2)
	require.Equal(t, 2.0, m["live_count"])
	require.Equal(t, 40.0, m["finished_total"])
	for _, x := range append(live, m["finished"].([]any)...) {
		checkSchema(t, "task", x.(map[string]any), taskSchema, true)
	}
	first := live[0].(map[string]any)
	assert.Equal(t, 8.0, first["id"], "first live task")
	assert.Equal(t, 0.9, first["cpu_seconds"], "first live task")
	assert.Contains(t, first["stack"], "main.hog", "first live task")
	// accounting.TaskSample.MarshalJSON gives the same encoding as the endpoint.
	one, _ := json.Marshal(snap.Live[0])
	got := decodeObject(t, one)
	assert.Equal(t, 8.0, got["id"], "MarshalJSON")
	assert.Equal(t, 1.0, got["on_loop_seconds"], "MarshalJSON")
}

// testRoutes are two routes' figures as the recorders give them: one with traffic and one
// never requested.
func testRoutes() []accounting.RouteSnapshot {
	lat := accounting.Summary{Count: 100, Sum: 4950 * time.Millisecond, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond,
		P99: 99 * time.Millisecond, P999: 99 * time.Millisecond, Max: 99 * time.Millisecond}
	onLoop := accounting.Summary{Count: 100, Sum: 100 * time.Microsecond, P50: time.Microsecond, P90: time.Microsecond,
		P99: time.Microsecond, P999: time.Microsecond, Max: time.Microsecond}
	zero := accounting.Summary{Count: 100}
	return []accounting.RouteSnapshot{
		{
			Route: "GET /users/{id}", Count: 100, Errors: 10, InFlight: 1,
			Recent:  accounting.RecentCounts{Count: 100, Errors: 10, Span: 2 * time.Second},
			Latency: accounting.SummaryPair{Cumulative: lat, Recent: lat}, OnLoop: accounting.SummaryPair{Cumulative: onLoop, Recent: onLoop},
			QueueDelay: accounting.SummaryPair{Cumulative: zero, Recent: zero}, Parked: accounting.SummaryPair{Cumulative: zero, Recent: zero},
		},
		{Route: "POST /login"},
	}
}

func TestRoutesJSONSchema(t *testing.T) {
	m := renderJSON(t, func(b *bytes.Buffer) error { return WriteRoutesJSON(b, testRoutes()) })
	checkSchema(t, "routes", m, map[string]string{"routes": tArr}, true)
	routes := m["routes"].([]any)
	require.Len(t, routes, 2)
	for _, x := range routes {
		rm := x.(map[string]any)
		checkSchema(t, "route", rm, map[string]string{
			"route": tStr, "count": tInt, "errors": tInt, "client_errors": tInt, "in_flight": tInt,
			"recent": tObj, "latency": tObj, "on_loop": tObj, "queue_delay": tObj, "parked": tObj,
		}, true)
		checkSchema(t, "recent", rm["recent"].(map[string]any), map[string]string{
			"count": tInt, "errors": tInt, "client_errors": tInt, "span_seconds": tNum, "requests_per_second": tNum,
		}, true)
		for _, h := range []string{"latency", "on_loop", "queue_delay", "parked"} {
			hm := rm[h].(map[string]any)
			checkSchema(t, h, hm, map[string]string{"cumulative": tObj, "recent": tObj}, true)
			checkSchema(t, h+".cumulative", hm["cumulative"].(map[string]any), summarySchema, true)
			checkSchema(t, h+".recent", hm["recent"].(map[string]any), summarySchema, true)
		}
	}
	users := routes[0].(map[string]any) // sorted by key
	assert.Equal(t, "GET /users/{id}", users["route"])
	assert.Equal(t, 100.0, users["count"])
	assert.Equal(t, 10.0, users["errors"])
	assert.Equal(t, 1.0, users["in_flight"])
	assert.Equal(t, 0.099, users["latency"].(map[string]any)["cumulative"].(map[string]any)["max_seconds"], "latency max")
}

// testLoopSnapshot is a loop's figures as the recorders give them, with or without a
// watchdog's.
func testLoopSnapshot(withStalls bool) accounting.LoopSnapshot {
	lag := accounting.Summary{Count: 5, Sum: 5 * time.Microsecond, P50: time.Microsecond, P90: time.Microsecond,
		P99: time.Microsecond, P999: time.Microsecond, Max: time.Microsecond}
	l := accounting.LoopSnapshot{
		Uptime: 5 * time.Second, BusyTotal: 1250 * time.Millisecond,
		Lag: lag, Slices: accounting.SliceStats{Count: 5, Total: 15 * time.Microsecond, Max: 3 * time.Microsecond},
		ReadyDepth: 4, ReadyDepthMax: 4, Switches: 5, SwitchRate: accounting.SwitchRate{Switches: 4, Elapsed: 5 * time.Second},
		TasksStarted: 1, Goroutines: 12, RSSBytes: 32 << 20, OpenFDs: 9,
	}
	for i, w := range accounting.UtilisationWindows {
		el := min(w, 5*time.Second)
		l.Utilisation[i] = accounting.Window{Length: w, Busy: el / 4, Elapsed: el}
	}
	if withStalls {
		d := 200 * time.Millisecond
		l.Stalls = &accounting.StallStats{Threshold: time.Nanosecond, Count: 1, Logged: 1,
			Durations: accounting.Summary{Count: 1, Sum: d, P50: d, P90: d, P99: d, P999: d, Max: d}}
	}
	return l
}

var loopSchema = map[string]string{
	"uptime_seconds": tNum, "busy_seconds_total": tNum, "utilisation_1s": tNum,
	"utilisation_10s": tNum, "utilisation_60s": tNum, "lag": tObj, "slices": tObj,
	"ready_depth": tInt, "ready_depth_max": tInt, "switches_total": tInt,
	"switches_per_second": tNum, "live_tasks": tInt, "tasks_started": tInt,
	"completed_tasks": tInt, "stalls": tObj, "arrival_clock": tStr,
	"arrival_bounded_reads": tInt, "arrival_hidden_seconds_total": tNum,
	"goroutines": tInt, "rss_bytes": tInt, "open_fds": tInt,
}

func TestLoopJSONSchema(t *testing.T) {
	m := renderJSON(t, func(b *bytes.Buffer) error { return WriteLoopJSON(b, testLoopSnapshot(true)) })
	checkSchema(t, "loop", m, loopSchema, true)
	checkSchema(t, "lag", m["lag"].(map[string]any), summarySchema, true)
	checkSchema(t, "slices", m["slices"].(map[string]any), map[string]string{
		"count": tInt, "total_seconds": tNum, "mean_seconds": tNum, "max_seconds": tNum,
		"slow": tInt, "slow_seconds": tNum,
	}, true)
	stalls := m["stalls"].(map[string]any)
	checkSchema(t, "stalls", stalls, map[string]string{
		"threshold_seconds": tNum, "count": tInt, "logged": tInt, "suppressed": tInt,
		"starved": tInt, "durations": tObj, "in_progress": tBool, "current_task": tInt, "current_elapsed_seconds": tNum,
	}, true)
	checkSchema(t, "stalls.durations", stalls["durations"].(map[string]any), summarySchema, true)
	assert.Equal(t, 0.25, m["utilisation_1s"])
	assert.Equal(t, 4.0, m["ready_depth_max"])
	assert.Equal(t, 1.0, m["live_tasks"])
	assert.Equal(t, 1.0, stalls["count"])

	m = renderJSON(t, func(b *bytes.Buffer) error { return WriteLoopJSON(b, testLoopSnapshot(false)) })
	require.Contains(t, m, "stalls")
	assert.Nil(t, m["stalls"], "stalls without a watchdog")
}

// TestDocDefinesEveryField checks that docs/accounting.md names every JSON field the
// package emits (as `field`).
func TestDocDefinesEveryField(t *testing.T) {
	doc, err := os.ReadFile("../../docs/accounting.md")
	require.NoError(t, err)
	keys := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				keys[k] = true
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	snap := testTasksSnapshot()
	walk(renderJSON(t, func(b *bytes.Buffer) error { return WriteTasksJSON(b, snap) }))
	walk(renderJSON(t, func(b *bytes.Buffer) error { return WriteRoutesJSON(b, testRoutes()) }))
	walk(renderJSON(t, func(b *bytes.Buffer) error { return WriteLoopJSON(b, testLoopSnapshot(true)) }))
	var missing []string
	for k := range keys {
		if !bytes.Contains(doc, []byte("`"+k+"`")) {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	assert.Empty(t, missing, "fields docs/accounting.md does not define")
}

func renderText(t *testing.T, write func(*bytes.Buffer) error) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, write(&buf))
	return buf.String()
}

func TestTextViews(t *testing.T) {
	snap := testTasksSnapshot()
	tasks := renderText(t, func(b *bytes.Buffer) error { return WriteTasksText(b, snap) })
	routes := renderText(t, func(b *bytes.Buffer) error { return WriteRoutesText(b, testRoutes()) })
	loop := renderText(t, func(b *bytes.Buffer) error { return WriteLoopText(b, testLoopSnapshot(true)) })
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"tasks", tasks, append(strings.Split(taskColumns, "\t"),
			"LIVE", "RECENTLY FINISHED", "GET /users/{id} /users/3", "background", "1000.000", "900.000",
			"--- task 8", "main.hog", "503")},
		{"routes", routes, append(strings.Split(routeColumns, "\t"), "GET /users/{id}", "POST /login")},
		{"loop", loop, []string{"utilisation", "1s", "10s", "60s", "25.0%", "ready queue", "switches",
			"lag (ready->run)", "slices        mean", "stalls", "P99", "P999", "MAX", "1 ended, 1 logged"}},
	} {
		for _, w := range c.want {
			assert.Contains(t, c.text, w, "%s view", c.name)
		}
	}
	// The live table lists the hog first (sorted by on-loop time).
	assert.Less(t, strings.Index(tasks, "background"), strings.Index(tasks, "GET /users/{id}"), "live tasks not in on-loop order:\n%s", tasks)
	if testing.Verbose() {
		t.Logf("\n%s\n%s\n%s", tasks, routes, loop)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

func TestWriteErrors(t *testing.T) {
	snap := testTasksSnapshot()
	for name, err := range map[string]error{
		"tasks json":  WriteTasksJSON(failWriter{}, snap),
		"tasks text":  WriteTasksText(failWriter{}, snap),
		"routes json": WriteRoutesJSON(failWriter{}, testRoutes()),
		"routes text": WriteRoutesText(failWriter{}, testRoutes()),
		"loop json":   WriteLoopJSON(failWriter{}, testLoopSnapshot(false)),
		"loop text":   WriteLoopText(failWriter{}, testLoopSnapshot(false)),
	} {
		assert.Error(t, err, "%s: a failing writer", name)
	}
}

func TestServerTiming(t *testing.T) {
	s := sampleTask()
	got := string(AppendServerTiming(nil, &s))
	want := "onloop;dur=0.123, queue;dur=0.010, parked;dur=50.200"
	assert.Equal(t, want, got)
	s.CPU, s.CPUMeasured = 101*time.Microsecond, true
	got = string(AppendServerTiming([]byte("x: "), &s))
	assert.Equal(t, "x: "+want+", cpu;dur=0.101", got)
}

func TestSortTasks(t *testing.T) {
	ts := []accounting.TaskSample{{ID: 1, OnLoop: 5}, {ID: 2, OnLoop: 9}, {ID: 3, OnLoop: 5}, {ID: 0, OnLoop: 1}}
	SortTasks(ts)
	var ids []uint64
	for _, s := range ts {
		ids = append(ids, s.ID)
	}
	assert.Equal(t, []uint64{2, 1, 3, 0}, ids)
}

func TestServerTimingRounding(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0.000", 499: "0.000", 500: "0.001", 1234567: "1.235", -5: "0.000",
		time.Second: "1000.000", 90*time.Second + 7*time.Microsecond: "90000.007",
	} {
		s := accounting.TaskSample{OnLoop: d}
		got := string(AppendServerTiming(nil, &s))
		assert.Equal(t, "onloop;dur="+want+", queue;dur=0.000, parked;dur=0.000", got, "%d ns", int64(d))
	}
}

func BenchmarkAppendServerTiming(b *testing.B) {
	s := sampleTask()
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendServerTiming(buf[:0], &s)
	}
}

// TestAppendServerTimingDoesNotAllocate: the header value is built on the loop at every
// request end that asks for it.
func TestAppendServerTimingDoesNotAllocate(t *testing.T) {
	s := sampleTask()
	s.CPUMeasured = true
	buf := make([]byte, 0, 256)
	assert.Zero(t, testing.AllocsPerRun(100, func() { buf = AppendServerTiming(buf[:0], &s) }))
}

func sampleTask() accounting.TaskSample {
	s := accounting.TaskSample{
		ID: 7, Kind: "request", Route: "GET /users/{id}", Method: "GET", Path: "/users/3",
		State: "parked", ParkReason: "sleep", Goroutine: 99,
		Rounds: 3, OnLoop: 123 * time.Microsecond, MaxSlice: 100 * time.Microsecond,
		SlowSlices: 1, SlowTime: 100 * time.Microsecond, QueueDelay: 10 * time.Microsecond,
		FirstRunDelay: 4 * time.Microsecond, Age: 60 * time.Millisecond, Status: 200,
	}
	s.Parked.Sleep = 50 * time.Millisecond
	s.Parked.Offload = 200 * time.Microsecond
	return s
}

// Field types for schema checks.
const (
	tInt    = "integer"
	tNum    = "number"
	tStr    = "string"
	tObj    = "object"
	tArr    = "array"
	tBool   = "bool"
	tNumNil = "number or null"
)

// taskSchema is the documented JSON of one task (docs/accounting.md).
var taskSchema = map[string]string{
	"id": tInt, "kind": tStr, "route": tStr, "method": tStr, "path": tStr, "state": tStr,
	"park_reason": tStr, "goroutine": tInt, "rounds": tInt, "on_loop_seconds": tNum,
	"max_slice_seconds": tNum, "mean_slice_seconds": tNum, "slow_slices": tInt,
	"slow_seconds": tNum, "queue_delay_seconds": tNum, "first_run_delay_seconds": tNum,
	"parked_seconds": tNum, "parked_by_reason_seconds": tObj, "cpu_seconds": tNumNil,
	"age_seconds": tNum, "status": tInt,
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return m
}

// checkSchema checks that every field of schema is in m with its type; with exact, that m
// has no other field.
func checkSchema(t *testing.T, what string, m map[string]any, schema map[string]string, exact bool) {
	t.Helper()
	for k, typ := range schema {
		v, ok := m[k]
		if !assert.True(t, ok, "%s: field %q missing", what, k) {
			continue
		}
		got := jsonType(v)
		assert.True(t, got == typ || typ == tNumNil && (got == tNum || got == tInt || v == nil) || typ == tNum && got == tInt,
			"%s: field %q is %s (%v), want %s", what, k, got, v, typ)
	}
	if exact {
		for k := range m {
			_, ok := schema[k]
			assert.True(t, ok || k == "stack", "%s: undocumented field %q", what, k)
		}
	}
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return tBool
	case string:
		return tStr
	case float64:
		if v == float64(int64(v)) {
			return tInt
		}
		return tNum
	case map[string]any:
		return tObj
	case []any:
		return tArr
	}
	return "unknown"
}
