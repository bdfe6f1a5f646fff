package loop

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
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/leakcheck"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleakOptions...)
}

// goleakOptions ignores gnet's package-level worker pool (see leakcheck.GnetPool).
var goleakOptions = leakcheck.GnetPool()

// bothModes runs f in single-thread and multi-thread mode.
func bothModes(t *testing.T, f func(t *testing.T, multi bool)) {
	for _, multi := range []bool{false, true} {
		name := "single"
		if multi {
			name = "multi"
		}
		t.Run(name, func(t *testing.T) { f(t, multi) })
	}
}

// quietLogger drops logs below Error unless -v is given.
func quietLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startServer starts a server on a free loopback port with the routes set by setup and
// shuts it down at the end of the test.
func startServer(t testing.TB, cfg Config, setup func(s *Server)) (*Server, string) {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger(t)
	}
	s := New(cfg)
	if setup != nil {
		setup(s)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	select {
	case <-s.Ready():
	case err := <-errc:
		require.FailNow(t, "server did not start", "%v", err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "server not ready after 10s")
	}
	require.NotNil(t, s.Addr(), "no address")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		assert.Equal(t, ErrServerClosed, <-errc, "ListenAndServe's result")
	})
	return s, s.Addr().String()
}

// serveInBackground runs s.ListenAndServe in a goroutine, waits until s is ready, and
// returns the channel ListenAndServe's result arrives on: for tests that shut the server
// down themselves.
func serveInBackground(t testing.TB, s *Server) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "server not ready after 10s")
	}
	return errc
}

// client is a raw HTTP/1.1 client over one connection.
type client struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err, "dial")
	t.Cleanup(func() { _ = c.Close() })
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *client) send(raw string) {
	c.t.Helper()
	_ = c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := io.WriteString(c.c, raw)
	require.NoError(c.t, err, "write")
}

// read reads one response (for a request with method) and its whole body.
func (c *client) read(method string) (*http.Response, string) {
	c.t.Helper()
	resp, body, err := c.tryRead(method)
	require.NoError(c.t, err, "read response")
	return resp, body
}

func (c *client) tryRead(method string) (*http.Response, string, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, "", err
	}
	return resp, string(b), nil
}

// get sends a GET and reads its response.
func (c *client) get(path string) (*http.Response, string) {
	c.t.Helper()
	c.send(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path))
	return c.read("GET")
}

// expectClosed asserts that the server closes the connection (EOF or reset) within d,
// ignoring any bytes before that.
func (c *client) expectClosed(d time.Duration) {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := c.c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		require.False(c.t, errors.As(err, &ne) && ne.Timeout(), "connection still open after %v", d)
		return
	}
}

func mustStatus(t testing.TB, resp *http.Response, want int) {
	t.Helper()
	require.Equal(t, want, resp.StatusCode, "status")
}

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// inLoop runs fn on s's loop and waits for it.
func inLoop(t testing.TB, s *Server, fn func()) {
	t.Helper()
	done := make(chan struct{})
	require.NoError(t, s.Loop(0).Post(func() { defer close(done); fn() }))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "loop did not run the posted function within 10s")
	}
}

// spinFor holds the thread (and the loop, when called on it) for d.
func spinFor(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// syncBuffer is a log sink safe for the loop and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
