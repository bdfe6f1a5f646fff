// Command arena-ab runs the arena load (bench/arenaload) against several server binaries in
// interleaved rounds and prints, per run, the server's CPU per player-second (user and
// kernel apart, from /proc), the system calls it made per player-second by kind (perf stat
// on the syscall tracepoints, which counts exactly whatever the machine's load), the
// client-seen tick gap p99 and the states delivered. It is for comparing builds of a
// server, and a build with the floor, in one session:
//
//	go build -o /tmp/srv-old ./cmd/baton-bench-server   # on the old tree
//	go build -o /tmp/srv-new ./cmd/baton-bench-server   # on the new tree
//	taskset -c 1 go run ./cmd/arena-ab -players 500 -rounds 2 \
//	    -run old=/tmp/srv-old:baton,new=/tmp/srv-new:baton,floor=/tmp/srv-new:floor
//
// Each server runs under taskset -c SERVER-CPU; start this command pinned to another CPU.
// -syscalls needs perf and the syscalls tracepoints (root, or perf_event_paranoid -1).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonrt/baton/bench/arenaload"
	"github.com/batonrt/baton/bench/internal/abrun"
	"github.com/batonrt/baton/bench/servers"
)

var (
	perfDir string
	mallocs bool
)

// counted are the system calls -syscalls counts (the rest are summed as "other").
var counted = []string{"write", "writev", "read", "epoll_wait", "epoll_pwait", "epoll_pwait2", "epoll_ctl",
	"futex", "nanosleep", "clock_nanosleep", "getsockopt", "sched_yield", "madvise", "tgkill", "rt_sigreturn"}

func main() {
	runs := flag.String("run", "", "comma-separated name=binary:target (target baton, nethttp or floor)")
	players := flag.Int("players", 500, "players (4 per room)")
	warm := flag.Duration("warmup", 3*time.Second, "warm-up after every player joined")
	dur := flag.Duration("duration", 8*time.Second, "measurement window")
	rounds := flag.Int("rounds", 1, "rounds over all runs")
	cpu := flag.String("server-cpu", "0", "taskset CPU list for the servers")
	sys := flag.Bool("syscalls", true, "count the server's system calls in the window (perf stat)")
	extra := flag.String("args", "", "extra arguments for every server, space-separated")
	flag.StringVar(&perfDir, "perf", "", "directory: record each server's window with perf record -g (4 kHz)")
	flag.BoolVar(&mallocs, "mallocs", false, "count the server's heap allocations in the window (its -pprof endpoint's MemStats; baton-bench-server only)")
	flag.Parse()
	if err := servers.RaiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, "arena-ab:", err)
	}
	ts, err := abrun.ParseRuns(*runs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "arena-ab:", err)
		os.Exit(2)
	}
	for r := range *rounds {
		for _, t := range ts {
			if err := one(t, r, *players, *warm, *dur, *cpu, *sys, strings.Fields(*extra)); err != nil {
				fmt.Fprintf(os.Stderr, "arena-ab: %s round %d: %v\n", t.Name, r, err)
			}
		}
	}
}

func one(t abrun.Run, round, players int, warm, dur time.Duration, cpu string, sys bool, extra []string) error {
	args := extra
	pprofAddr := ""
	if mallocs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		pprofAddr = ln.Addr().String()
		ln.Close()
		args = append(args, "-pprof", pprofAddr)
	}
	srv, err := abrun.Start(cpu, t.Bin, t.Kind, args...)
	if err != nil {
		return err
	}
	defer srv.Stop()
	addr, pid := srv.Addr, srv.Pid
	var perf *exec.Cmd
	perfOut := fmt.Sprintf("%s/arena-ab-%d-%s-%d.perf", os.TempDir(), os.Getpid(), t.Name, round)
	var u0, k0, u1, k1 int64
	var m0, m1 int64
	var rec *exec.Cmd
	rooms := (players + 3) / 4
	res, err := arenaload.Run(context.Background(), arenaload.Config{Addr: addr, Rooms: rooms, Warmup: warm, Duration: dur,
		OnWindow: func(start bool) {
			if start {
				if sys {
					ev := make([]string, 0, 2*len(counted))
					for _, c := range counted {
						ev = append(ev, "-e", "syscalls:sys_enter_"+c)
					}
					pargs := append([]string{"stat", "-x", ",", "-o", perfOut, "-e", "raw_syscalls:sys_enter"}, ev...)
					perf = exec.Command("perf", append(pargs, "-p", strconv.Itoa(pid))...)
					if err := perf.Start(); err != nil {
						fmt.Fprintln(os.Stderr, "arena-ab: perf:", err)
						perf = nil
					}
				}
				if perfDir != "" {
					_ = os.MkdirAll(perfDir, 0o755)
					rec = exec.Command("perf", "record", "-g", "-F", "4000", "-p", strconv.Itoa(pid),
						"-o", filepath.Join(perfDir, fmt.Sprintf("%s-%d.data", t.Name, round)))
					rec.Stderr = io.Discard
					if err := rec.Start(); err != nil {
						fmt.Fprintln(os.Stderr, "arena-ab: perf record:", err)
						rec = nil
					}
				}
				if pprofAddr != "" {
					m0 = heapMallocs(pprofAddr)
				}
				u0, k0 = abrun.CPUTicks(pid)
				return
			}
			u1, k1 = abrun.CPUTicks(pid)
			if pprofAddr != "" {
				m1 = heapMallocs(pprofAddr)
			}
			if rec != nil {
				_ = rec.Process.Signal(syscall.SIGINT)
			}
			if perf != nil {
				_ = perf.Process.Signal(syscall.SIGINT)
			}
		}})
	if perf != nil {
		_ = perf.Wait()
	}
	if rec != nil {
		_ = rec.Wait()
	}
	if err != nil {
		return err
	}
	ps := float64(res.Connected) * res.Window.Seconds() // player-seconds
	tick := 1e6 / 100.0                                 // µs per USER_HZ tick
	usr, ker := float64(u1-u0)*tick/ps, float64(k1-k0)*tick/ps
	var errs []string
	for k, v := range res.Errors {
		errs = append(errs, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(errs)
	fmt.Printf("%-8s r%d players %d: cpu %.1f µs/player-s (user %.1f, kernel %.1f), gap p99 %.0f ms, delivered %.2f%%, srv core %.0f%% %s\n",
		t.Name, round, res.Connected, usr+ker, usr, ker, float64(res.Gap.ValueAtQuantile(99))/1e3,
		100*res.DeliveredRatio(), 100*float64(u1-u0+k1-k0)/100/res.Window.Seconds(), strings.Join(errs, " "))
	if pprofAddr != "" && m0 > 0 && m1 > 0 {
		fmt.Printf("         heap allocations: %.2f per player-s, %.3f per state\n", float64(m1-m0)/ps, float64(m1-m0)/float64(res.States))
	}
	if perf != nil {
		if b, err := os.ReadFile(perfOut); err == nil {
			printSyscalls(b, ps, float64(res.States))
		}
		_ = os.Remove(perfOut)
	}
	return nil
}

// printSyscalls prints perf stat's counts per player-second and per state delivered.
func printSyscalls(b []byte, ps, states float64) {
	var total float64
	var parts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		n, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(f[2], "syscalls:sys_enter_"), "raw_syscalls:")
		if name == "sys_enter" {
			total = n
			continue
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, n/ps))
		}
	}
	fmt.Printf("         syscalls per player-s: all %.2f (%.3f per state): %s\n", total/ps, total/states, strings.Join(parts, ", "))
}

// heapMallocs returns the server's cumulative heap allocation count (MemStats.Mallocs), read
// from its pprof endpoint at addr, or 0.
func heapMallocs(addr string) int64 {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# Mallocs = "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
