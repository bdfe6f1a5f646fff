package ws

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/loop"
)

// wsRSSChildEnv selects the WebSocket memory child: a server whose /ws handler upgrades
// and reads in a loop, as a game's would (value "task"), or upgrades in the callback form
// and returns (value "callback"). It prints "ADDR host:port", then answers each
// "gc" line on stdin with a garbage collection, the heap returned to the OS, and "GC"; it
// exits when stdin closes.
const wsRSSChildEnv = "BATON_LOOP_WS_RSS_CHILD"

func init() {
	if os.Getenv(wsRSSChildEnv) != "" {
		os.Exit(wsRSSChildMain())
	}
}

// wsRSSConfig turns the saturation checks off: the child measures memory per connection,
// and 10,000 upgrades in a burst on a loaded 2-core machine can hold the loop's lag past
// the default 100 ms, which would refuse the rest with 503.
var wsRSSConfig = Config{SaturatedLag: -1, SaturatedUtilisation: -1}

func wsRSSTaskHandler(c *loop.Ctx) {
	w, err := Upgrade(c, wsRSSConfig)
	if err != nil {
		return
	}
	for {
		if _, _, err := w.ReadMessage(); err != nil {
			return
		}
	}
}

func wsRSSChildMain() int {
	if os.Getenv("BATON_WS_HEAP_PROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: log})
	if os.Getenv(wsRSSChildEnv) == "callback" {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			_, _ = UpgradeTo(c, wsRSSConfig, Handler{OnMessage: func(*Conn, bool, []byte) {}})
		})
	} else {
		s.Handle("GET /ws", wsRSSTaskHandler)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	<-s.Ready()
	fmt.Printf("ADDR %s\n", s.Addr())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "gc" {
			runtime.GC()
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if f := os.Getenv("BATON_WS_HEAP_PROFILE"); f != "" {
				if out, err := os.Create(f); err == nil {
					_ = pprof.WriteHeapProfile(out)
					_ = out.Close()
				}
			}
			fmt.Printf("GC heap_inuse=%d stack_inuse=%d goroutines=%d\n", ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine())
		}
	}
	_ = s.Close()
	if err := <-errc; err != loop.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// TestWSIdleConnectionRSS opens 10,000 idle WebSocket connections to one server (in a child
// process, so its memory is its own) and reports the server's resident memory per
// connection, in both forms: the task form holds, for an upgraded connection whose handler
// is parked in ReadMessage, the task's coroutine, the request, the WSConn, the conn and
// gnet's connection; the callback form (UpgradeTo) holds no task and no request.
func TestWSIdleConnectionRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 connections (about 5 s); skipped with -short")
	}
	if wsRaceEnabled {
		t.Skip("measures memory, which the race detector multiplies")
	}
	const warm, total = 500, 10_000
	var rl unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &rl))
	if rl.Max < total+200 {
		t.Skipf("RLIMIT_NOFILE hard limit %d: this test needs %d descriptors for its clients", rl.Max, total+200)
	}
	if rl.Cur < total+200 {
		old := rl
		rl.Cur = rl.Max
		require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &rl))
		t.Cleanup(func() { _ = unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
	}

	// The goal is 4 KiB for the callback form; the task form's bound is what it must
	// never regress past (its coroutine stack alone is about 4 KiB).
	t.Run("task", func(t *testing.T) { wsIdleRSS(t, "task", 16*1024) })
	t.Run("callback", func(t *testing.T) { wsIdleRSS(t, "callback", 4*1024) })
}

func wsIdleRSS(t *testing.T, form string, bound float64) {
	const warm, total = 500, 10_000
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), wsRSSChildEnv+"="+form)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("child stderr:\n%s", stderr.String())
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the child exited\n%s", stderr.String())
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("the child said nothing for 30 s\n%s", stderr.String())
			return ""
		}
	}
	addr, ok := strings.CutPrefix(next(), "ADDR ")
	require.True(t, ok)
	settledRSS := func() (int64, string) {
		_, err := io.WriteString(stdin, "gc\n")
		require.NoError(t, err)
		figures, ok := strings.CutPrefix(next(), "GC ")
		require.True(t, ok)
		kb, err := procStatusKB(cmd.Process.Pid, "VmRSS")
		require.NoError(t, err)
		return kb, figures
	}

	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	open := func(n int) {
		var failed atomic.Value
		var wg sync.WaitGroup
		per := make(chan struct{}, n)
		for range n {
			per <- struct{}{}
		}
		close(per)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					c, err := wsUpgradeRaw(addr)
					if err != nil {
						failed.Store(err)
						return
					}
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatalf("after %d connections: %v", len(conns), err)
		}
	}
	start := time.Now()
	open(warm) // the loop's tables and pools grow to their working size first
	base, baseFigures := settledRSS()
	open(total - warm)
	took := time.Since(start)
	after, afterFigures := settledRSS()
	perConn := float64(after-base) * 1024 / float64(total-warm)
	t.Logf("%s form: %d idle WebSocket connections (opened in %v): child RSS %d kB with %d (%s), %d kB with %d (%s): %.0f bytes per connection",
		form, total, took.Round(time.Millisecond), base, warm, baseFigures, after, total, afterFigures, perConn)
	require.Less(t, perConn, bound, "bytes of RSS per idle WebSocket connection")
}

// wsUpgradeRaw opens a WebSocket to addr/ws over a raw socket and returns it after the 101.
func wsUpgradeRaw(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	if resp.StatusCode != 101 {
		_ = c.Close()
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
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
