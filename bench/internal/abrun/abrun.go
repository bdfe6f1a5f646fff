// Package abrun starts the benchmark server binaries that the A/B commands (ws-ab,
// arena-ab) compare, and reads their CPU time: one copy of what both need.
package abrun

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/batonrt/baton/bench/servers"
)

// Server is a started server process.
type Server struct {
	Addr string // where it listens, from its listen line
	Pid  int    // its process (taskset execs it: the same pid)
	cmd  *exec.Cmd
}

// Start runs `taskset -c cpu bin -target kind -addr 127.0.0.1:0 extra...` and waits for
// its listen line. Stop it with Stop. Any goroutine.
func Start(cpu, bin, kind string, extra ...string) (*Server, error) {
	args := append([]string{"-c", cpu, bin, "-target", kind, "-addr", "127.0.0.1:0"}, extra...)
	cmd := exec.Command("taskset", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Pid: cmd.Process.Pid, cmd: cmd}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), servers.ListenPrefix); ok {
			s.Addr = a
			break
		}
	}
	if s.Addr == "" {
		s.Stop()
		return nil, fmt.Errorf("%s: no listen line", bin)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return s, nil
}

// Stop interrupts the server and waits for it, killing it after 5 s. Any goroutine.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// CPUTicks returns the user and system CPU ticks (USER_HZ) of pid, all threads, or zeros
// when /proc cannot say. Any goroutine.
func CPUTicks(pid int) (user, sys int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	st := string(b)
	if i := strings.LastIndexByte(st, ')'); i >= 0 && i+2 <= len(st) {
		st = st[i+2:]
	}
	f := strings.Fields(st)
	if len(f) < 13 {
		return 0, 0
	}
	user, _ = strconv.ParseInt(f[11], 10, 64)
	sys, _ = strconv.ParseInt(f[12], 10, 64)
	return user, sys
}

// Run is one server of an A/B command's -run list: a name for the report, the server
// binary and its -target. A plain value, safe to copy and share.
type Run struct{ Name, Bin, Kind string }

// ParseRuns parses an A/B command's -run flag: comma-separated name=binary:target. Any
// goroutine.
func ParseRuns(list string) ([]Run, error) {
	var rs []Run
	for _, s := range strings.Split(list, ",") {
		name, rest, ok1 := strings.Cut(s, "=")
		bin, kind, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("-run wants name=binary:target, got %q", s)
		}
		rs = append(rs, Run{name, bin, kind})
	}
	return rs, nil
}
