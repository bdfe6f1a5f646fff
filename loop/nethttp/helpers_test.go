package nethttp

import (
	"bufio"
	"context"
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

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// quietLogger drops logs unless -v is given.
func quietLogger(t testing.TB) *slog.Logger { return looptest.Config(t, loop.Config{}).Logger }

// adapters holds the Adapter each test server mounts its net/http handlers with.
var adapters sync.Map // *loop.Server -> *Adapter

// mount makes s's Adapter with cfg; handle uses it. Call it before handle.
func mount(t testing.TB, s *loop.Server, cfg Config) *Adapter {
	t.Helper()
	a, err := New(s, cfg)
	if err != nil {
		t.Fatalf("nethttp.New: %v", err)
	}
	adapters.Store(s, a)
	t.Cleanup(func() { adapters.Delete(s) })
	return a
}

// handle mounts h at pattern on s, through s's Adapter (a default one unless mount made
// one).
func handle(t testing.TB, s *loop.Server, pattern string, h http.Handler) {
	t.Helper()
	a, ok := adapters.Load(s)
	if !ok {
		a = mount(t, s, Config{})
	}
	a.(*Adapter).Handle(pattern, h)
}

// startServer starts a server on a free loopback port with the routes set by setup and
// shuts it down at the end of the test. It returns the server and its host:port.
func startServer(t testing.TB, cfg loop.Config, setup func(s *loop.Server)) (*loop.Server, string) {
	t.Helper()
	s := loop.New(looptest.Config(t, cfg))
	if setup != nil {
		setup(s)
	}
	return s, strings.TrimPrefix(looptest.Start(t, s), "http://")
}

// serveInBackground runs s.ListenAndServe and waits until s is ready; the test shuts it
// down itself.
func serveInBackground(t testing.TB, s *loop.Server) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready after 10s")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
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
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *client) send(raw string) {
	c.t.Helper()
	_ = c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c.c, raw); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read reads one response (for a request with method) and its whole body.
func (c *client) read(method string) (*http.Response, string) {
	c.t.Helper()
	resp, body, err := c.tryRead(method)
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
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

func mustStatus(t testing.TB, resp *http.Response, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("status %d, want %d", resp.StatusCode, want)
	}
}
