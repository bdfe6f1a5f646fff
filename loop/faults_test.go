package loop_test

// Fault tests that need a process of their own: the server runs in a child process (this
// test binary re-executed with faultChildEnv set, see init) so that its file-descriptor
// limit and its memory can be set and measured without touching the test process. They use
// only loop's public API.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"log/slog"

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
		t.Fatalf("child exited before serving: %v\n%s", fc.exitEr, fc.stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("child did not report its address\n%s", fc.stderr.String())
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

var fdExhaustedLine = regexp.MustCompile(`(?im)^.*too many open files.*$`)

// TestAcceptSurvivesFileDescriptorExhaustion is issue 13 item 1: a server whose
// RLIMIT_NOFILE is exhausted by connections must keep serving the connections it has,
// answer new ones once descriptors are free again, log the exhaustion (rate-limited), and
// not exit.
func TestAcceptSurvivesFileDescriptorExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("opens hundreds of connections")
	}
	const (
		limit   = 256 // the child's RLIMIT_NOFILE
		keepers = 20  // connections opened first and used before and after the exhaustion
		excess  = 400 // more connections than the child has descriptors left
	)
	var rl unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &rl))
	if rl.Cur < keepers+excess+100 {
		t.Skipf("the test process needs %d descriptors, RLIMIT_NOFILE is %d", keepers+excess+100, rl.Cur)
	}
	fc := startFaultChild(t, "emfile", limit)

	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	var kept []client
	for range keepers {
		c, err := net.DialTimeout("tcp", fc.addr, 5*time.Second)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		cl := client{c, bufio.NewReader(c)}
		require.NoError(t, getOn(cl.c, cl.br, 5*time.Second))
		kept = append(kept, cl)
	}

	var extra []net.Conn
	closeExtra := func() {
		for _, c := range extra {
			_ = c.Close()
		}
		extra = nil
	}
	t.Cleanup(closeExtra)
	for range excess {
		c, err := net.DialTimeout("tcp", fc.addr, 5*time.Second)
		if err != nil {
			break // the backlog is full or the server is gone; enough pressure either way
		}
		extra = append(extra, c)
	}
	// The child runs out of descriptors while accepting these: wait until it says so.
	require.Eventually(t, func() bool {
		return fdExhaustedLine.MatchString(fc.stderr.String()) || !fc.alive()
	}, 20*time.Second, 10*time.Millisecond, "the child never reported descriptor exhaustion")
	closeExtra()

	// New connections are answered again once descriptors are free.
	var lastErr error
	ok := assert.Eventually(t, func() bool {
		lastErr = freshGet(fc.addr, 2*time.Second)
		return lastErr == nil || !fc.alive()
	}, 20*time.Second, 20*time.Millisecond)
	require.True(t, fc.alive(), "the child exited: %v", fc.exitEr)
	require.True(t, ok)
	require.NoError(t, lastErr, "a new connection is not answered")

	// The connections that were open through the exhaustion still work.
	for i, cl := range kept {
		require.NoError(t, getOn(cl.c, cl.br, 5*time.Second), "kept connection %d", i)
	}
	require.True(t, fc.alive(), "the child exited: %v", fc.exitEr)

	// Logged, but rate-limited: hundreds of accepts failed, a handful of lines say so.
	lines := fdExhaustedLine.FindAllString(fc.stderr.String(), -1)
	t.Logf("child logged: %q", lines)
	require.NotEmpty(t, lines)
	assert.LessOrEqual(t, len(lines), 5, "one log line per failed accept: %q", lines)
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

// TestNonReadingPipelinerMemoryBounded is issue 13 item 2: a client that pipelines requests
// for large responses without reading them, then keeps sending requests as fast as it can,
// must not grow the server's memory without bound. The server may stop reading the
// connection (the client's writes then block) or close it; it must not buffer it all.
//
// The bound, 200 MB of resident memory, is generous on purpose: per connection the server
// may hold Config.MaxOutputBytes (4 MiB) of output and Config.MaxBufferedInput (4 MiB) of
// input by default; even a server that kept all 40 responses (40 MiB) with the Go
// collector's default headroom (GOGC=100, twice the live heap) stays near 100 MB, while
// unbounded growth (about 100 MB/s in the report) passes 200 MB within seconds.
func TestNonReadingPipelinerMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("pushes a child process's memory")
	}
	const (
		boundKB   = 200 << 10 // kB
		pipelined = 40
		sendFor   = 5 * time.Second
	)
	fc := startFaultChild(t, "rss", 0)
	pid := fc.cmd.Process.Pid
	base, err := procStatusKB(pid, "VmRSS")
	require.NoError(t, err)

	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", fc.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	deadline := time.Now().Add(sendFor)
	require.NoError(t, c.SetWriteDeadline(deadline))
	_, err = io.WriteString(c, strings.Repeat("GET /big HTTP/1.1\r\nHost: x\r\n\r\n", pipelined))
	require.NoError(t, err)

	// Flood small requests until the deadline, a write error (the server stopped reading:
	// the write blocked until the deadline; or it closed the connection), or the bound.
	over := make(chan int64, 1)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			if rss, err := procStatusKB(pid, "VmRSS"); err == nil && rss > boundKB {
				over <- rss
				_ = c.SetWriteDeadline(time.Now()) // end the flood now
				return
			}
		}
	}()
	req := bytes.Repeat([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 64)
	var sent int64
	var werr error
	for time.Now().Before(deadline) {
		var n int
		n, werr = c.Write(req)
		sent += int64(n)
		if werr != nil {
			break
		}
	}
	close(stop)
	<-sampled
	peak, err := procStatusKB(pid, "VmHWM")
	require.NoError(t, err)
	t.Logf("sent %d MB of requests; write ended with %v; child RSS %d kB at start, peak %d kB", sent>>20, werr, base, peak)
	select {
	case rss := <-over:
		t.Fatalf("child RSS reached %d kB (bound %d kB) after %d MB of requests", rss, boundKB, sent>>20)
	default:
	}
	require.True(t, fc.alive(), "the child exited: %v", fc.exitEr)
	assert.Less(t, peak, int64(boundKB), "child peak RSS")
}

// TestEngineStopAfterServingIsAnError: when the event loop stops although neither
// Shutdown nor Close asked (here gnet's own Stop is called behind the server's back, the
// way a fatal loop error ends it) after it has run handlers and with one still parked,
// ListenAndServe must return an error that is not ErrServerClosed (so that a supervisor
// restarts the program), and the parked handler is unwound, not leaked.
func TestEngineStopAfterServingIsAnError(t *testing.T) {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s.Handle("GET /", func(c *loop.Ctx) { c.String(200, "ok\n") })
	parked := make(chan struct{})
	unwound := make(chan struct{})
	s.Handle("GET /park", func(c *loop.Ctx) {
		defer close(unwound)
		close(parked)
		_ = c.Sleep(time.Hour)
	})
	served := make(chan error, 1)
	go func() { served <- s.ListenAndServe() }()
	<-s.Ready()
	require.NoError(t, freshGet(s.Addr().String(), 5*time.Second))
	pc, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	defer pc.Close()
	_, err = io.WriteString(pc, "GET /park HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	<-parked

	// Not gnet's package-level Stop: every server's placeholder listener has the same
	// address (accept_guard.go), so it would find whichever engine registered last.
	require.NoError(t, loop.StopEngine(s))
	select {
	case err = <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("ListenAndServe did not return after the engine stopped")
	}
	require.Error(t, err)
	assert.NotErrorIs(t, err, loop.ErrServerClosed)
	assert.ErrorIs(t, err, loop.ErrEngineStopped)
	select {
	case <-unwound:
	default:
		t.Error("the parked handler was not unwound")
	}
	_, derr := net.DialTimeout("tcp", s.Addr().String(), time.Second)
	assert.Error(t, derr, "the listener is closed once ListenAndServe returned")
	require.NoError(t, s.Shutdown(context.Background()))
}
