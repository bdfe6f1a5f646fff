package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonrt/baton/bench/loadgen"
	"github.com/batonrt/baton/bench/servers"
)

// Environment variables that make the baton-bench binary (or a test binary calling
// MaybeServeChild) serve a built-in target instead of running the harness.
const (
	EnvServe = "BATON_BENCH_SERVE" // target name
	EnvAddr  = "BATON_BENCH_ADDR"  // listen address, default 127.0.0.1:0
	// EnvShards is baton's Config.Shards for the built-in baton targets (servers.Options),
	// unset or 1: one loop.
	EnvShards = "BATON_BENCH_SHARDS"
	// EnvCalibrate makes the binary print servers.CalibrateSim of the duration it holds
	// and exit: the rooms scenario runs it pinned to the server's CPUs (calibrateOn).
	EnvCalibrate = "BATON_BENCH_CALIBRATE"
)

// MaybeServeChild serves a built-in target and exits the process if EnvServe is set: the
// harness re-executes its own binary that way to run each server in a child process. Call
// it first thing in main (and in TestMain of tests that run the harness). The child stops
// on SIGTERM or when its standard input closes (the harness went away).
func MaybeServeChild() {
	if v := os.Getenv(EnvCalibrate); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "baton-bench calibrate: %s=%q is not a positive duration\n", EnvCalibrate, v)
			os.Exit(1)
		}
		fmt.Println(servers.CalibrateSim(d))
		os.Exit(0)
	}
	target := os.Getenv(EnvServe)
	if target == "" {
		return
	}
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var opt servers.Options
	if v := os.Getenv(EnvShards); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "baton-bench server: %s=%q is not a positive number\n", EnvShards, v)
			os.Exit(1)
		}
		opt.Shards = n
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	if err := servers.ServeChildWith(target, addr, opt, os.Stdout, stop); err != nil {
		fmt.Fprintln(os.Stderr, "baton-bench server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// calibrateOn returns servers.CalibrateSim(d) measured in a child process (this binary
// re-executed) pinned to cpus with taskset: the simulation's speed on the CPUs that will
// run it, which on a virtual machine may differ from the load generator's by a fifth.
func calibrateOn(cpus, taskset string, d time.Duration) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := pinned(cpus, taskset, exe)
	cmd.Env = append(os.Environ(), EnvCalibrate+"="+d.String())
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, EnvServe+"=") })
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("calibrating on CPUs %s: %w", cpus, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("calibrating on CPUs %s: unexpected output %q", cpus, out)
	}
	return n, nil
}

// server is a target process started by the harness.
type server struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int
	addr  string // host:port
	done  chan struct{}
	// builtin servers are this binary re-executed.
	builtin bool
	// dir, when set, is a temporary directory of the server's, removed once it stopped.
	dir string
}

// startChild runs a built-in target in a child process (this binary re-executed), pinned to
// cpus with taskset when cpus is not empty, with shards loops for a baton target (0 or 1:
// one).
func startChild(target, cpus, taskset string, shards int, logw io.Writer) (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := pinned(cpus, taskset, exe)
	cmd.Env = append(os.Environ(), EnvServe+"="+target, EnvAddr+"=127.0.0.1:0", EnvShards+"="+strconv.Itoa(max(shards, 1)))
	s, err := launch(cmd, logw, func(line string) (string, bool) {
		a, ok := strings.CutPrefix(line, servers.ListenPrefix)
		return strings.TrimSpace(a), ok
	}, "")
	if s != nil {
		s.builtin = true
	}
	return s, err
}

// startExternal runs an external server's command (through sh -c "exec ..."), pinned like
// the built-in ones, and waits until addr accepts connections.
func startExternal(command, addr, cpus, taskset string, logw io.Writer) (*server, error) {
	cmd := pinned(cpus, taskset, "/bin/sh", "-c", "exec "+command)
	return launch(cmd, logw, nil, addr)
}

func pinned(cpus, taskset string, name string, args ...string) *exec.Cmd {
	if cpus != "" && taskset != "" {
		return exec.Command(taskset, append([]string{"-c", cpus, name}, args...)...)
	}
	return exec.Command(name, args...)
}

// launch starts cmd. With parse, the address is read from the child's stdout; otherwise
// addr is polled until it accepts a connection.
func launch(cmd *exec.Cmd, logw io.Writer, parse func(string) (string, bool), addr string) (*server, error) {
	cmd.Stderr = logw
	cmd.SysProcAttr = childAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, stdin: stdin, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()

	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if parse != nil {
				if a, ok := parse(sc.Text()); ok {
					found <- a
					break
				}
			}
			if logw != nil {
				fmt.Fprintln(logw, sc.Text())
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	deadline := time.After(15 * time.Second)
	if parse != nil {
		select {
		case s.addr = <-found:
			return s, nil
		case <-s.done:
			return nil, fmt.Errorf("server exited before listening (%v)", cmd.ProcessState)
		case <-deadline:
			s.stop()
			return nil, errors.New("server did not report its address within 15 s")
		}
	}
	s.addr = addr
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("server exited before accepting connections (%v)", cmd.ProcessState)
		case <-deadline:
			s.stop()
			return nil, fmt.Errorf("%s did not accept connections within 15 s", addr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the server. A built-in server is killed at once (its figures are taken and a
// graceful shutdown would only delay the next run); an external one gets SIGTERM and closed
// stdin, then SIGKILL after 5 s.
func (s *server) stop() {
	if s.dir != "" {
		defer os.RemoveAll(s.dir)
	}
	_ = s.stdin.Close()
	if s.builtin {
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		<-s.done
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		<-s.done
	}
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on every
// Linux configuration Go supports.
const clockTicks = 100

// procCPU returns the CPU time (user + system, all threads, exited ones included) of pid.
func procCPU(pid int) (time.Duration, error) {
	u, s, err := procTimes(pid)
	return u + s, err
}

// procTimes returns the user and the system (kernel) CPU time of pid, all threads,
// exited ones included: utime and stime of /proc/<pid>/stat, in USER_HZ ticks (10 ms).
func procTimes(pid int) (user, sys time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may contain spaces: fields are counted after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, 0, errors.New("short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, 0, errors.New("malformed /proc stat times")
	}
	return time.Duration(utime) * time.Second / clockTicks, time.Duration(stime) * time.Second / clockTicks, nil
}

// cpusBusy returns the busy time (user, nice, system, irq, softirq, steal) of the CPUs
// in the taskset list cpus ("0", "0-1", "0,2"), from /proc/stat; ok is false when cpus
// is empty or cannot be read.
func cpusBusy(cpus string) (busy time.Duration, ok bool) {
	want := map[string]bool{}
	for _, part := range strings.Split(cpus, ",") {
		lo, hi, rng := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if rng {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a || b-a > 4096 {
			return 0, false
		}
		for n := a; n <= b; n++ {
			want["cpu"+strconv.Itoa(n)] = true
		}
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	var ticks int64
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !want[f[0]] {
			continue
		}
		found++
		for _, k := range []int{1, 2, 3, 6, 7, 8} {
			v, _ := strconv.ParseInt(f[k], 10, 64)
			ticks += v
		}
	}
	if found != len(want) {
		return 0, false
	}
	return time.Duration(ticks) * time.Second / clockTicks, true
}

// loadAvg1 returns the 1-minute load average, or -1.
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// procMem returns VmRSS and VmHWM (bytes) and the thread count of pid.
func procMem(pid int) (rss, hwm int64, threads int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch name {
		case "VmRSS":
			rss = n * 1024
		case "VmHWM":
			hwm = n * 1024
		case "Threads":
			threads = int(n)
		}
	}
	return rss, hwm, threads, nil
}

// pinSelf pins every thread of this process to cpus with taskset and sets GOMAXPROCS to
// the number of CPUs it may use.
func pinSelf(cpus, taskset string) error {
	if taskset == "" {
		return errors.New("taskset not found")
	}
	out, err := exec.Command(taskset, "-a", "-p", "-c", cpus, strconv.Itoa(os.Getpid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset: %v: %s", err, bytes.TrimSpace(out))
	}
	runtime.GOMAXPROCS(loadgen.UsableCPUs())
	return nil
}

// loopbackOnly checks that host:port names a loopback address.
func loopbackOnly(ctx context.Context, hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
	if err != nil {
		return err
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("%s resolves to %s: baton-bench only loads loopback addresses", host, ip)
		}
	}
	return nil
}
