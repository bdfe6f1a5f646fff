package loop_test

// Tests that need a process of their own run the server in a child process (this test
// binary re-executed with faultChildEnv set, see init) so that its file-descriptor limit and
// its memory can be set and measured without touching the test process. They use only
// loop's public API. This file holds the child's main and the parent's helpers.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/loop"
)

// faultChildEnv selects a child "server main" in a re-executed test binary; its value names
// the scenario. faultChildLimitEnv sets the child's soft RLIMIT_NOFILE.
const (
	faultChildEnv      = "BATON_LOOP_FAULT_CHILD"
	faultChildLimitEnv = "BATON_LOOP_FAULT_NOFILE"
)

func init() {
	if mode := os.Getenv(faultChildEnv); mode != "" {
		os.Exit(faultChildMain(mode))
	}
}

// setRlim stores n in a field of unix.Rlimit, whose type differs between platforms.
func setRlim[T ~int64 | ~uint64](f *T, n uint64) { *f = T(n) }

// faultChildMain is the child's main: it serves like a real program would and exits 0 only
// after a requested shutdown (SIGTERM or stdin closed), 1 when ListenAndServe fails, 3 when
// ListenAndServe returns ErrServerClosed without a Shutdown (the bug of issue 13 item 1).
func faultChildMain(mode string) int {
	if v := os.Getenv(faultChildLimitEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child: bad limit:", err)
			return 1
		}
		var rl unix.Rlimit
		setRlim(&rl.Cur, n) // uint64 on Linux and darwin, int64 on the BSDs
		setRlim(&rl.Max, n)
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			fmt.Fprintln(os.Stderr, "child: setrlimit:", err)
			return 1
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", KeepFileLimit: true, Logger: log})
	small := []byte("ok\n")
	s.Handle("GET /", func(c *loop.Ctx) { c.Bytes(200, "text/plain", small) })
	switch mode {
	case "emfile":
	case "rss":
		big := bytes.Repeat([]byte("x"), 1<<20)
		s.Handle("GET /big", func(c *loop.Ctx) { c.Bytes(200, "application/octet-stream", big) })
	default:
		fmt.Fprintln(os.Stderr, "child: unknown mode", mode)
		return 1
	}
	var requested sync.WaitGroup
	shutdownAsked := make(chan struct{})
	requested.Add(1)
	go func() {
		defer requested.Done()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		stdinEOF := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinEOF) }()
		select {
		case <-sig:
		case <-stdinEOF:
		case <-s.Done():
			return
		}
		close(shutdownAsked)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	go func() {
		<-s.Ready()
		if a := s.Addr(); a != nil {
			fmt.Printf("ADDR %s\n", a)
		}
	}()
	err := s.ListenAndServe()
	select {
	case <-shutdownAsked:
		if errors.Is(err, loop.ErrServerClosed) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "child: ListenAndServe after Shutdown:", err)
		return 1
	default:
	}
	if errors.Is(err, loop.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "child: ListenAndServe returned ErrServerClosed without a Shutdown")
		return 3 // not 2: that is the Go runtime's exit status for a panic
	}
	fmt.Fprintln(os.Stderr, "child: ListenAndServe:", err)
	return 1
}

// faultChild is a running child server as seen by the test.
type faultChild struct {
	cmd    *exec.Cmd
	addr   string
	stdin  io.WriteCloser
	stderr *syncBuffer
	exited chan struct{} // closed when the child has exited; then exitErr is set
	exitEr error
}

// startFaultChild starts the child for mode with the given RLIMIT_NOFILE (0: inherited) and
// waits until it reports its address. The child is stopped at the end of the test.
func startFaultChild(t *testing.T, mode string, nofile int) *faultChild {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), faultChildEnv+"="+mode)
	if nofile > 0 {
		cmd.Env = append(cmd.Env, faultChildLimitEnv+"="+strconv.Itoa(nofile))
	}
	fc := &faultChild{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = fc.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	fc.stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				addrCh <- a
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		fc.exitEr = cmd.Wait()
		close(fc.exited)
	}()
	t.Cleanup(func() {
		_ = fc.stdin.Close() // asks for a graceful shutdown
		select {
		case <-fc.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-fc.exited
		}
		if t.Failed() {
			t.Logf("child stderr:\n%s", fc.stderr.String())
		}
	})
	select {
	case fc.addr = <-addrCh:
	case <-fc.exited:
		require.FailNow(t, "child exited before serving", "%v\n%s", fc.exitEr, fc.stderr.String())
	case <-time.After(20 * time.Second):
		require.FailNow(t, "child did not report its address", fc.stderr.String())
	}
	return fc
}

func (fc *faultChild) alive() bool {
	select {
	case <-fc.exited:
		return false
	default:
		return true
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// getOn sends GET / on c and reads the response, within d.
func getOn(c net.Conn, br *bufio.Reader, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

// freshGet dials addr and does one GET / within d.
func freshGet(addr string, d time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return err
	}
	defer c.Close()
	return getOn(c, bufio.NewReader(c), d)
}

// procStatusKB reads a "Name:   N kB" field of /proc/<pid>/status.
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
