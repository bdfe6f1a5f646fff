package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(looptest.GoleakOptions(), // gnet's worker pool is not the server's
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)...)
}

// logBuffer collects the server's log records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func startDemo(t *testing.T) (string, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	srv := newServer(loop.Config{
		Addr:   "127.0.0.1:0",
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	<-srv.Ready()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-errc; !errors.Is(err, loop.ErrServerClosed) {
			t.Errorf("ListenAndServe: %v", err)
		}
	})
	return "http://" + srv.Addr().String(), logs
}

type figures struct {
	ID             uint64             `json:"id"`
	Status         int                `json:"status"`
	Rounds         *int               `json:"rounds"`
	OnLoop         *float64           `json:"on_loop_seconds"`
	QueueDelay     *float64           `json:"queue_delay_seconds"`
	Parked         *float64           `json:"parked_seconds"`
	ParkedByReason map[string]float64 `json:"parked_by_reason_seconds"`
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v in %s", url, err, b)
	}
}

func demo(t *testing.T, base, path string) figures {
	t.Helper()
	var f figures
	getJSON(t, base+path, &f)
	if f.Rounds == nil || f.OnLoop == nil || f.QueueDelay == nil || f.Parked == nil {
		t.Fatalf("%s: missing figures in %+v", path, f)
	}
	return f
}

// within asserts lo <= v <= hi (seconds): bounds wide enough not to flake on a loaded
// 2-core machine under -race, narrow enough to tell the patterns apart.
func within(t *testing.T, what string, v, lo, hi float64) {
	t.Helper()
	if v < lo || v > hi {
		t.Errorf("%s = %.3f s, want between %.3f and %.3f", what, v, lo, hi)
	}
}

func TestBlockNiceYieldsEveryStep(t *testing.T) {
	base, _ := startDemo(t)
	f := demo(t, base, "/block?amount=1&nice=true")
	if *f.Rounds != 100 {
		t.Errorf("rounds = %d, want 100 (one per 10 ms step)", *f.Rounds)
	}
	within(t, "on_loop", *f.OnLoop, 0.95, 2.5)
}

func TestBlockNotNiceIsOneRoundAndAStall(t *testing.T) {
	base, logs := startDemo(t)
	// Other routes first: the stalling task then runs on a pooled coroutine that served
	// them, and the stall must still be described with its own route.
	demo(t, base, "/block?amount=0.02&nice=true")
	demo(t, base, "/sleep?amount=0.01")
	f := demo(t, base, "/block?amount=1&nice=false")
	if *f.Rounds != 1 {
		t.Errorf("rounds = %d, want 1", *f.Rounds)
	}
	within(t, "on_loop", *f.OnLoop, 0.95, 2.5)
	// The stall detector logged this task once, with its stack naming the handler.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "stall") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if fmt.Sprint(rec["task"]) != fmt.Sprint(f.ID) {
			continue
		}
		found = true
		stack := fmt.Sprint(rec["stack"])
		if !handlerFrame.MatchString(stack) {
			t.Errorf("stall log stack does not name the handler:\n%s\nlogs:\n%s", stack, logs.String())
		}
		if fmt.Sprint(rec["route"]) != "GET /block" {
			t.Errorf("stall log route %v", rec["route"])
		}
	}
	if !found {
		t.Fatalf("no stall logged for task %d; logs:\n%s", f.ID, logs.String())
	}
}

func TestSleepIsTwoRoundsNearZeroOnLoop(t *testing.T) {
	base, _ := startDemo(t)
	f := demo(t, base, "/sleep?amount=1")
	if *f.Rounds != 2 {
		t.Errorf("rounds = %d, want 2", *f.Rounds)
	}
	within(t, "on_loop", *f.OnLoop, 0, 0.05)
	within(t, "parked", *f.Parked, 0.95, 1.5)
	within(t, "parked by sleep", f.ParkedByReason["sleep"], 0.95, 1.5)
}

func TestOffloadIsTwoRoundsParkedOneSecond(t *testing.T) {
	base, _ := startDemo(t)
	f := demo(t, base, "/offload?amount=1")
	if *f.Rounds != 2 {
		t.Errorf("rounds = %d, want 2", *f.Rounds)
	}
	within(t, "on_loop", *f.OnLoop, 0, 0.05)
	within(t, "parked", *f.Parked, 0.95, 1.5)
	within(t, "parked by offload", f.ParkedByReason["offload"], 0.95, 1.5)
}

// A CPU hog's neighbour shows the queue delay the hog caused: its sleep ended while the
// hog held the loop, and it waited ready until the hog let go.
func TestHogNeighbourShowsQueueDelay(t *testing.T) {
	base, _ := startDemo(t)
	neighbour := make(chan figures, 1)
	go func() {
		var f figures
		resp, err := http.Get(base + "/sleep?amount=0.2")
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&f)
			resp.Body.Close()
		}
		neighbour <- f
	}()
	time.Sleep(50 * time.Millisecond) // the neighbour is parked in its sleep
	hog := demo(t, base, "/block?amount=1&nice=false")
	within(t, "hog on_loop", *hog.OnLoop, 0.95, 2.5)
	n := <-neighbour
	if n.QueueDelay == nil {
		t.Fatal("neighbour request failed")
	}
	within(t, "neighbour queue_delay", *n.QueueDelay, 0.3, 2.5)
	within(t, "neighbour on_loop", *n.OnLoop, 0, 0.05)
}

func TestStatsEndpointsSchema(t *testing.T) {
	base, _ := startDemo(t)
	go func() { _, _ = http.Get(base + "/sleep?amount=0.5") }() // a parked task to list
	time.Sleep(100 * time.Millisecond)

	var tasks map[string]any
	getJSON(t, base+"/debug/baton/tasks?stacks=1", &tasks)
	live, _ := tasks["live"].([]any)
	var sleeping map[string]any
	for _, x := range live {
		if m, _ := x.(map[string]any); m["route"] == "GET /sleep" {
			sleeping = m
		}
	}
	if sleeping == nil {
		t.Fatalf("parked /sleep task not listed: %v", tasks)
	}
	for field, kind := range map[string]string{
		"id": "number", "kind": "string", "route": "string", "state": "string", "park_reason": "string",
		"rounds": "number", "on_loop_seconds": "number", "queue_delay_seconds": "number",
		"parked_seconds": "number", "parked_by_reason_seconds": "object", "age_seconds": "number",
		"max_slice_seconds": "number", "first_run_delay_seconds": "number", "stack": "string",
	} {
		if got := jsonKind(sleeping[field]); got != kind {
			t.Errorf("tasks: field %q is %s, want %s", field, got, kind)
		}
	}
	if sleeping["state"] != "parked" || sleeping["park_reason"] != "sleep" {
		t.Errorf("sleeping task state %v reason %v", sleeping["state"], sleeping["park_reason"])
	}
	if s := fmt.Sprint(sleeping["stack"]); !regexp.MustCompile(`(main|utilization)\.sleep\(`).MatchString(s) {
		t.Errorf("stack does not name the handler: %s", s)
	}

	var rdoc struct {
		Routes []map[string]any `json:"routes"`
	}
	getJSON(t, base+"/debug/baton/routes", &rdoc)
	routes := rdoc.Routes
	if len(routes) == 0 {
		t.Fatal("no routes")
	}
	for _, r := range routes {
		for field, kind := range map[string]string{
			"route": "string", "count": "number", "errors": "number", "in_flight": "number",
			"latency": "object", "on_loop": "object", "queue_delay": "object", "parked": "object",
		} {
			if got := jsonKind(r[field]); got != kind {
				t.Errorf("routes: field %q is %s, want %s (%v)", field, got, kind, r)
			}
		}
	}

	var lp map[string]any
	getJSON(t, base+"/debug/baton/loop", &lp)
	for field, kind := range map[string]string{
		"utilisation_1s": "number", "utilisation_10s": "number", "utilisation_60s": "number",
		"lag": "object", "ready_depth": "number", "ready_depth_max": "number",
		"switches_per_second": "number", "live_tasks": "number", "completed_tasks": "number", "stalls": "object",
	} {
		if got := jsonKind(lp[field]); got != kind {
			t.Errorf("loop: field %q is %s, want %s", field, got, kind)
		}
	}

	for _, page := range []string{"tasks", "routes", "loop"} {
		resp, err := http.Get(base + "/debug/baton/" + page + "?format=text")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || len(b) == 0 {
			t.Errorf("%s text: %d %q", page, resp.StatusCode, b)
		}
		if page == "tasks" && !strings.Contains(string(b), "GET /sleep") {
			t.Errorf("tasks text view lacks the sleeping task:\n%s", b)
		}
	}
}

// TestIOParksWhileAnotherThreadCompletesTheFD: /io waits on a pipe that another goroutine
// writes after amount, as the asyncio demo's /io waits on a descriptor another thread
// completes: the task parks (2 rounds, almost nothing on the loop) and the loop answers
// other requests meanwhile (issue 27, item 20: it held the loop, 1 round, 1.0 s).
func TestIOParksWhileAnotherThreadCompletesTheFD(t *testing.T) {
	base, _ := startDemo(t)
	ioDone := make(chan figures, 1)
	go func() {
		var f figures
		resp, err := http.Get(base + "/io?amount=1")
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&f)
			resp.Body.Close()
		}
		ioDone <- f
	}()
	// While /io waits, the loop serves others: wait until the /io task is parked on the
	// tasks page, then a quick request is answered before /io is.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var tasks struct {
			Live []map[string]any `json:"live"`
		}
		getJSON(t, base+"/debug/baton/tasks", &tasks)
		parked := false
		for _, x := range tasks.Live {
			if x["route"] == "GET /io" && x["state"] == "parked" {
				parked = true
			}
		}
		if parked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the /io task never showed parked: %v", tasks.Live)
		}
		time.Sleep(5 * time.Millisecond)
	}
	quick := demo(t, base, "/sleep?amount=0")
	select {
	case <-ioDone:
		t.Fatal("/io answered before the request made while it waited")
	default:
	}
	within(t, "neighbour queue_delay", *quick.QueueDelay, 0, 0.2)
	f := <-ioDone
	if f.Rounds == nil {
		t.Fatal("/io failed")
	}
	if *f.Rounds != 2 {
		t.Errorf("rounds = %d, want 2 (start, then resume when the pipe is readable)", *f.Rounds)
	}
	within(t, "on_loop", *f.OnLoop, 0, 0.05)
	within(t, "parked", *f.Parked, 0.95, 1.5)
	within(t, "parked waiting", f.ParkedByReason["wait"], 0.95, 1.5)
}

// TestDefaultsAndStatus: /block without parameters is amount 0 and nice, as in the asyncio
// demo (it answered 400); a bad amount is still refused; the status field is the
// response's own status (it was always 0).
func TestDefaultsAndStatus(t *testing.T) {
	base, _ := startDemo(t)
	f := demo(t, base, "/block")
	if *f.Rounds != 1 {
		t.Errorf("rounds = %d, want 1 (no work)", *f.Rounds)
	}
	if f.Status != 200 {
		t.Errorf("status = %d, want 200, the status of this response", f.Status)
	}
	f = demo(t, base, "/block?amount=0.05")
	if *f.Rounds != 5 {
		t.Errorf("rounds = %d, want 5: nice by default, one round per 10 ms step", *f.Rounds)
	}
	for _, q := range []string{"/block?amount=x", "/block?amount=-1", "/block?nice=maybe", "/sleep?amount=1e9"} {
		resp, err := http.Get(base + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d %s, want 400", q, resp.StatusCode, b)
		}
	}
}

// handlerFrame matches the blocking handler's frames in a stack (package main is named by
// its import path in a test binary).
var handlerFrame = regexp.MustCompile(`(main|utilization)\.burn\(`)

func jsonKind(v any) string {
	switch v.(type) {
	case float64:
		return "number"
	case string:
		return "string"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
