// Command ws-ab runs the ws-broadcast load against several server binaries in interleaved
// rounds (A, B, A, B, ...) and prints, per run, delivered messages/s, the server's CPU per
// delivered message (user + system from /proc, and each apart), delivery p50/p99 and closes.
// It is for comparing two builds of a server in the same session, and for profiling one
// (-perf records the server's window with perf record -g):
//
//	go build -o /tmp/srv-old ./cmd/baton-bench-server   # on the old tree
//	go build -o /tmp/srv-new ./cmd/baton-bench-server   # on the new tree
//	taskset -c 1 go run ./cmd/ws-ab -run old=/tmp/srv-old:baton,new=/tmp/srv-new:baton,gorilla=/tmp/srv-new:nethttp \
//	    -server-cpu 0 -conns 1000 -rounds 3
//
// Each server is started under taskset -c SERVER-CPU (a Go server then sees one CPU); start
// this command pinned to another CPU. Columns: msgs/s delivered in the window, server CPU
// µs per delivered message (usr + sys), delivery p50/p99/max, the server's and this
// command's CPU as a share of one core, then closes by kind. bench/scripts/perfclass.py
// breaks a -perf recording down by stack (kernel write path, runtime, gnet, baton, ...).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonrt/baton/bench/internal/abrun"
	"github.com/batonrt/baton/bench/servers"
	"github.com/batonrt/baton/bench/wsload"
)

var (
	debugPath string
	noStats   bool
)

func main() {
	runs := flag.String("run", "", "comma-separated name=binary:target (target baton or nethttp)")
	conns := flag.Int("conns", 1000, "connections (100 per room)")
	warm := flag.Duration("warmup", 2*time.Second, "warm-up after the rooms start")
	dur := flag.Duration("duration", 5*time.Second, "measurement window")
	rounds := flag.Int("rounds", 2, "rounds over all runs")
	cpu := flag.String("server-cpu", "0", "taskset CPU list for the servers")
	perfDir := flag.String("perf", "", "directory: record each server's window with perf record -g")
	noKeepAlive := flag.Bool("nokeepalive", false, "a new connection for every HTTP request to the server")
	flag.BoolVar(&verbose, "v", false, "print the time of each step to stderr")
	flag.BoolVar(&noStats, "nostats", false, "read no /ws/stats during the run (a GET to a saturated baton loop can wait tens of seconds)")
	flag.StringVar(&debugPath, "debug", "", "path to GET from the server after the window and print (e.g. /debug/baton/websockets?format=text)")
	flag.Parse()
	if *noKeepAlive {
		http.DefaultTransport.(*http.Transport).DisableKeepAlives = true
	}
	if err := servers.RaiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, "ws-ab:", err)
	}
	ts, err := abrun.ParseRuns(*runs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ws-ab:", err)
		os.Exit(2)
	}
	fmt.Printf("%-10s %5s %9s %8s %8s %8s %8s %8s %8s %6s %6s %s\n", "run", "round", "msgs/s", "µs/msg", "usr", "sys", "p50", "p99", "max", "srv", "cli", "errors")
	for r := range *rounds {
		for _, t := range ts {
			if err := one(t, r, *conns, *warm, *dur, *cpu, *perfDir); err != nil {
				fmt.Fprintf(os.Stderr, "ws-ab: %s round %d: %v\n", t.Name, r, err)
			}
		}
	}
}

func one(t abrun.Run, round, conns int, warm, dur time.Duration, cpu, perfDir string) error {
	srv, err := abrun.Start(cpu, t.Bin, t.Kind)
	if err != nil {
		return err
	}
	defer srv.Stop()
	addr := srv.Addr
	ctx := context.Background()
	rooms := max(1, (conns+99)/100)
	dialStart := time.Now()
	fleet, err := wsload.Dial(ctx, wsload.Config{Addr: addr, Conns: conns,
		Path: func(i int) string { return fmt.Sprintf("/ws/room-%d", i%rooms) }})
	if err != nil {
		return err
	}
	defer fleet.Close()
	base := "http://" + addr
	var st servers.WSStats
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := getJSON(base+"/ws/stats", &st); err != nil {
			return err
		}
		if st.Conns >= fleet.Connected() {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server counts %d of %d", st.Conns, fleet.Connected())
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "ws-ab: %s: %d connected in %v\n", t.Name, fleet.Connected(), time.Since(dialStart).Round(time.Millisecond))
	body, _ := json.Marshal(servers.WSStart{Rooms: rooms})
	resp, err := http.Post(base+"/ws/start", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	time.Sleep(warm)
	pid := srv.Pid
	// taskset execs the server: same pid.
	var perf *exec.Cmd
	if perfDir != "" {
		_ = os.MkdirAll(perfDir, 0o755)
		perf = exec.Command("perf", "record", "-g", "-F", "4000", "-p", strconv.Itoa(pid),
			"-o", filepath.Join(perfDir, fmt.Sprintf("%s-%d.data", t.Name, round)), "--", "sleep", strconv.FormatFloat(dur.Seconds(), 'f', 1, 64))
		perf.Stderr = io.Discard
		if err := perf.Start(); err != nil {
			return err
		}
	}
	var s0, s1 servers.WSStats
	step("before s0")
	if !noStats {
		_ = getJSON(base+"/ws/stats", &s0)
	}
	step("after s0")
	u0, k0 := abrun.CPUTicks(pid)
	c0 := selfCPU()
	fleet.MeasureStart()
	time.Sleep(dur)
	fleet.MeasureEnd()
	u1, k1 := abrun.CPUTicks(pid)
	cli := (selfCPU() - c0).Seconds() / dur.Seconds()
	step("before s1")
	if !noStats {
		_ = getJSON(base+"/ws/stats", &s1)
	}
	step("after s1")
	if perf != nil {
		_ = perf.Wait()
	}
	if debugPath != "" {
		if resp, err := http.Get(base + debugPath); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Printf("%s\n", b)
		}
	}
	fleet.Close()
	res := fleet.Result()
	n := float64(res.Delivered)
	tick := 1e6 / 100.0 // µs per clock tick (USER_HZ 100)
	usr, sys := float64(u1-u0)*tick/n, float64(k1-k0)*tick/n
	var errs []string
	for k, v := range res.Errors {
		errs = append(errs, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(errs)
	fmt.Printf("%-10s %5d %9.0f %8.2f %8.2f %8.2f %8s %8s %8s %5.0f%% %5.0f%% sent=%d slow=%d %s\n", t.Name, round,
		n/res.Window.Seconds(), usr+sys, usr, sys,
		us(res.Latency.ValueAtQuantile(50)), us(res.Latency.ValueAtQuantile(99)), us(res.Latency.Max()),
		(usr+sys)*n/res.Window.Seconds()/1e4, 100*cli, s1.Sent-s0.Sent, s1.SlowClosed, strings.Join(errs, " "))
	return nil
}

var verbose bool

func step(s string) {
	if verbose {
		fmt.Fprintf(os.Stderr, "ws-ab: %s %s\n", time.Now().Format("15:04:05.000"), s)
	}
}

func us(v int64) string {
	if v >= 1000 {
		return strconv.FormatFloat(float64(v)/1000, 'f', 2, 64) + "ms"
	}
	return strconv.FormatInt(v, 10) + "µs"
}

// selfCPU returns this process's CPU time (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
