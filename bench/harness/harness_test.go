package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func init() {
	Register(&Scenario{Name: "test-needs", Summary: "a scenario whose code is missing", Spec: "skipped", Needs: "needs something missing"})
}

func TestMain(m *testing.M) {
	MaybeServeChild() // Run re-executes this test binary to start the servers
	code := m.Run()
	gameBinRelease() // the gameserver binary TestGameScenario built, if any
	os.Exit(code)
}

// TestRunResultsSchema runs a tiny suite (both built-in targets in child processes) and
// checks results.json against the documented schema, plus the other output files.
func TestRunResultsSchema(t *testing.T) {
	out := t.TempDir()
	var stdout, log bytes.Buffer
	res, err := Run(context.Background(), Options{
		Scenarios: "plaintext,slow-flood,cpu-hog,reconnect-burst,idle-conns,test-needs",
		Targets:   []Target{{Name: "baton", Builtin: true}, {Name: "nethttp", Builtin: true}},
		Params:    Params{Quick: true, Duration: 400 * time.Millisecond, Warmup: 100 * time.Millisecond, Conns: []int{8}, IdleConns: 100, BurstConns: 50, Rate: 400, Drain: 300 * time.Millisecond},
		Out:       out,
		Plots:     true,
		Stdout:    &stdout,
		Log:       &log,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	for _, sc := range res.Scenarios {
		for _, ph := range sc.Phases {
			for _, r := range ph.Runs {
				if r.Error != "" {
					t.Errorf("%s/%s %s: %s", sc.Name, ph.Name, r.Target, r.Error)
				}
			}
		}
	}

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Typed decode: every field in the file is one of the schema's.
	var typed Results
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&typed); err != nil {
		t.Fatalf("results.json does not match the Results type: %v", err)
	}
	// Untyped decode: the documented field names and types are there.
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["schema"] != Schema {
		t.Errorf("schema = %v", doc["schema"])
	}
	for _, path := range []string{"started", "finished", "host.cpus", "host.go_version", "host.load_avg", "options.targets",
		"options.quick", "options.pipeline", "scenarios", "summary", "warnings"} {
		if get(doc, path) == nil {
			t.Errorf("missing %s", path)
		}
	}
	scenarios := doc["scenarios"].([]any)
	if len(scenarios) != 6 {
		t.Fatalf("%d scenarios, want 6", len(scenarios))
	}
	byName := map[string]map[string]any{}
	for _, s := range scenarios {
		m := s.(map[string]any)
		byName[m["name"].(string)] = m
	}
	if byName["test-needs"]["skipped"] != "needs something missing" {
		t.Errorf("test-needs: skipped = %v", byName["test-needs"]["skipped"])
	}
	for _, name := range []string{"plaintext", "slow-flood", "cpu-hog", "reconnect-burst", "idle-conns"} {
		phases := byName[name]["phases"].([]any)
		if len(phases) == 0 {
			t.Fatalf("%s: no phases", name)
		}
		for _, p := range phases {
			runs := p.(map[string]any)["runs"].([]any)
			if len(runs) != 2 {
				t.Fatalf("%s: %d runs, want 2", name, len(runs))
			}
			for _, r := range runs {
				run := r.(map[string]any)
				where := fmt.Sprintf("%s %v", name, run["target"])
				for _, path := range []string{"server.pid", "server.cpu_s", "server.cpu_us_per_req", "server.cpu_util", "server.rss_before",
					"server.rss_start", "server.rss_end", "server.rss_peak", "client.cpu_s", "client.cpus", "client.util", "client.saturated", "elapsed_s"} {
					if _, ok := get(run, path).(float64); !ok && path != "client.saturated" {
						t.Errorf("%s: %s missing or not a number: %v", where, path, get(run, path))
					}
				}
				if get(run, "server.rss_end").(float64) <= 0 {
					t.Errorf("%s: no RSS", where)
				}
				for _, g := range run["groups"].([]any) {
					gm := g.(map[string]any)
					for _, path := range []string{"name", "mode", "conns", "pipeline", "sent", "requests", "rps", "errors", "status",
						"latency.count", "latency.mean_us", "latency.p50_us", "latency.p90_us", "latency.p99_us", "latency.p999_us", "latency.max_us"} {
						if get(gm, path) == nil {
							t.Errorf("%s group %v: missing %s", where, gm["name"], path)
						}
					}
					if gm["mode"] != "idle" {
						if get(gm, "latency.count").(float64) == 0 || gm["rps"].(float64) == 0 {
							t.Errorf("%s group %v: no responses", where, gm["name"])
						}
						if h, _ := gm["hgrm"].(string); h == "" {
							t.Errorf("%s group %v: no hgrm file", where, gm["name"])
						} else if b, err := os.ReadFile(filepath.Join(out, h)); err != nil || !strings.Contains(string(b), "Percentile") {
							t.Errorf("%s: hgrm %s: %v", where, h, err)
						}
					}
					// Refusals and timeouts are the point of the slow and request_task groups.
					if errs := gm["errors"].(map[string]any); len(errs) > 0 && gm["name"] != "slow" && gm["name"] != "request_task" {
						t.Errorf("%s group %v: errors %v", where, gm["name"], errs)
					}
				}
			}
		}
	}
	idle := byName["idle-conns"]["phases"].([]any)[0].(map[string]any)["runs"].([]any)[0].(map[string]any)
	if _, ok := get(idle, "extra.rss_per_conn").(float64); !ok {
		t.Errorf("idle-conns: no extra.rss_per_conn")
	}
	if g := idle["groups"].([]any)[0].(map[string]any); g["alive"] != float64(100) {
		t.Errorf("idle-conns: alive = %v", g["alive"])
	}
	burst := byName["reconnect-burst"]["phases"].([]any)[0].(map[string]any)["runs"].([]any)[0].(map[string]any)
	if get(burst, "extra.burst_stats.heartbeats") == nil || get(burst, "groups") == nil {
		t.Errorf("reconnect-burst: no extra.burst_stats: %v", burst["extra"])
	} else if hb := burst["groups"].([]any)[0].(map[string]any); get(hb, "connect.count") != float64(50) {
		t.Errorf("reconnect-burst: connect times %v", hb["connect"])
	}
	hog := byName["cpu-hog"]["phases"].([]any)[1].(map[string]any)["runs"].([]any)[0].(map[string]any)
	if get(hog, "extra.hog_stats.count") == nil || get(hog, "extra.hog_stats.max_slice_us") == nil {
		t.Errorf("cpu-hog: no extra.hog_stats: %v", hog["extra"])
	}

	// Headline ratios and the other files.
	var names []string
	for _, it := range typed.Summary {
		names = append(names, it.Name)
	}
	for _, want := range []string{"plaintext c8: baton/nethttp req/s", "plaintext c8: baton/nethttp server CPU per request", "cpu-hog: baton neighbour p99 spin/yield",
		"slow-flood: baton fast p99 with lanes / with no slow traffic", "reconnect-burst: baton heartbeat failures"} {
		if !strings.Contains(strings.Join(names, "\n"), want) {
			t.Errorf("summary lacks %q: %q", want, names)
		}
	}
	for _, f := range []string{"summary.txt", "plaintext-load.png", "cpu-hog-neighbour.png", "idle-conns-light.png", "logs/plaintext-c8-baton.log"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	if !strings.Contains(stdout.String(), "== plaintext") || !strings.Contains(stdout.String(), "== summary") {
		t.Errorf("no table printed:\n%s", stdout.String())
	}
}

// get follows a dotted path through decoded JSON objects.
func get(m map[string]any, path string) any {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = obj[k]
	}
	return cur
}

// TestExternalTarget: an external server given by URL and started by a command (here the
// net/http baseline, run from this binary) is measured like a built-in one.
func TestExternalTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	targets, err := ParseTargets("ext=http://"+addr, []string{fmt.Sprintf("ext=env %s=nethttp %s=%s %s", EnvServe, EnvAddr, addr, exe)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Options{
		Scenarios: "plaintext,json", Targets: targets, Out: t.TempDir(),
		Params: Params{Duration: 300 * time.Millisecond, Warmup: 0, Conns: []int{4}},
	})
	if err != nil {
		t.Fatal(err)
	}
	runs := res.Scenarios[0].Phases[0].Runs
	if len(runs) != 1 || runs[0].Error != "" || runs[0].Server == nil || runs[0].Group("load").Requests == 0 {
		t.Fatalf("external run: %+v", runs)
	}
	if n := len(res.Scenarios[1].Phases[0].Runs); n != 0 {
		t.Errorf("json ran %d times on an external target; external targets only take part in plaintext", n)
	}
}

func TestParseTargets(t *testing.T) {
	got, err := ParseTargets("baton, nethttp,fast=http://127.0.0.1:9000/api/,http://localhost:9001", []string{"fast=./fast -p 9000"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{Name: "baton", Builtin: true}, {Name: "nethttp", Builtin: true},
		{Name: "fast", Host: "127.0.0.1:9000", Prefix: "/api", Command: "./fast -p 9000"},
		{Name: "localhost:9001", Host: "localhost:9001"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"", "nginx", "baton,baton", "https://127.0.0.1:1", "http://127.0.0.1"} {
		if _, err := ParseTargets(bad, nil); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := ParseTargets("baton", []string{"ghost=cmd"}); err == nil {
		t.Error("-cmd for an unknown target: no error")
	}
	if err := loopbackOnly(context.Background(), "8.8.8.8:80"); err == nil {
		t.Error("a non-loopback address was accepted")
	}
	if err := loopbackOnly(context.Background(), "127.0.0.1:80"); err != nil {
		t.Error(err)
	}
}

func TestSelectScenarios(t *testing.T) {
	all, err := SelectScenarios("all")
	want := "[plaintext json slow-flood cpu-hog reconnect-burst idle-conns"
	if err != nil || !strings.HasPrefix(fmt.Sprint(names(all)), want) {
		t.Fatalf("all: %v %v", names(all), err)
	}
	some, err := SelectScenarios("cpu-hog, json,cpu-hog")
	if err != nil || fmt.Sprint(names(some)) != "[cpu-hog json]" {
		t.Errorf("list: %v %v", names(some), err)
	}
	if _, err := SelectScenarios("plaintext,bogus"); err == nil {
		t.Error("unknown scenario: no error")
	}
	for _, s := range all {
		if s.Summary == "" || s.Spec == "" || (s.Needs == "" && s.Phases == nil) {
			t.Errorf("%s: incomplete spec", s.Name)
		}
	}
}

func TestProcStats(t *testing.T) {
	start := time.Now()
	for time.Since(start) < 50*time.Millisecond {
	}
	cpu, err := procCPU(os.Getpid())
	if err != nil || cpu < 20*time.Millisecond {
		t.Errorf("procCPU = %v, %v", cpu, err)
	}
	rss, hwm, threads, err := procMem(os.Getpid())
	if err != nil || rss <= 0 || hwm < rss || threads < 1 {
		t.Errorf("procMem = %d %d %d %v", rss, hwm, threads, err)
	}
}
