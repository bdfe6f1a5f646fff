// Package looptest starts baton servers in tests: on a free loopback port, shut down when
// the test ends, with the goroutine-leak checks that gnet's package-level pool needs.
package looptest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonrt/baton/internal/leakcheck"
	"github.com/batonrt/baton/loop"
)

// Config returns cfg ready for a test server: Addr "127.0.0.1:0" (a free loopback port)
// unless set, and a Logger that writes through t.Log when the test runs with -v and
// discards otherwise, unless set. Safe for concurrent use.
func Config(t testing.TB, cfg loop.Config) loop.Config {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		var w io.Writer = io.Discard
		if testing.Verbose() {
			w = testLog{t}
		}
		cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return cfg
}

type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// Start serves s (its routes already added, its Config from Config or with a port of its
// own) in a goroutine, waits until it is ready and returns its base URL, e.g.
// "http://127.0.0.1:41234". When the test ends the server is shut down gracefully (10 s at
// most) and the test fails if ListenAndServe returned anything but loop.ErrServerClosed.
// Call it from the test's goroutine.
func Start(t testing.TB, s *loop.Server) string {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	select {
	case <-s.Ready():
	case err := <-errc:
		t.Fatalf("looptest: server did not start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("looptest: server not ready after 10 s")
	}
	if s.Addr() == nil {
		t.Fatal("looptest: server stopped before it was ready")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("looptest: Shutdown: %v", err)
		}
		if err := <-errc; !errors.Is(err, loop.ErrServerClosed) {
			t.Errorf("looptest: ListenAndServe returned %v, want loop.ErrServerClosed", err)
		}
	})
	return "http://" + s.Addr().String()
}

// GoleakOptions returns goleak options that ignore the goroutines of gnet's package-level
// worker pool: its janitors start when gnet is loaded and never stop, and its idle workers
// wait until the pool expires them. They are not the server's; every goroutine the server
// starts is still checked. Use them with goleak.VerifyTestMain or goleak.VerifyNone. Any
// goroutine.
func GoleakOptions() []goleak.Option { return leakcheck.GnetPool() }

// OnLoop runs fn on loop l (through its Post) and waits for it, failing the test when the
// loop does not run it within 10 s: how a test reaches loop-confined state. Call it from
// the test's goroutine.
func OnLoop(t testing.TB, l *loop.Loop, fn func()) {
	t.Helper()
	done := make(chan struct{})
	if err := l.Post(func() { defer close(done); fn() }); err != nil {
		t.Fatalf("looptest: Post: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("looptest: the loop did not run the posted function within 10s")
	}
}

// Conn is a raw HTTP/1.1 client over one connection, for tests that need to see the
// bytes, pipeline requests or hold a connection: Dial makes one. Use it from one goroutine.
type Conn struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

// Dial connects to addr (host:port); the connection is closed when the test ends.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("looptest: dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &Conn{t: t, c: c, br: bufio.NewReader(c)}
}

// Send writes raw to the connection, failing the test on error.
func (c *Conn) Send(raw string) {
	c.t.Helper()
	_ = c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c.c, raw); err != nil {
		c.t.Fatalf("looptest: write: %v", err)
	}
}

// Read reads one response (to a request with method) and its whole body, failing the test
// when none arrives within 20 s.
func (c *Conn) Read(method string) (*http.Response, string) {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("looptest: read response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		c.t.Fatalf("looptest: read body: %v", err)
	}
	return resp, string(b)
}

// Get sends a GET for path and reads its response.
func (c *Conn) Get(path string) (*http.Response, string) {
	c.t.Helper()
	c.Send("GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n")
	return c.Read("GET")
}

// Raw returns the underlying connection, for deadlines and half-closes.
func (c *Conn) Raw() net.Conn { return c.c }

// LogBuffer is a bytes.Buffer safe for concurrent use: give it to a slog handler as the
// server's log (written by the loop) and read it from the test. The zero value is ready.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p. Safe for concurrent use.
func (w *LogBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// String returns what was written so far. Safe for concurrent use.
func (w *LogBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
