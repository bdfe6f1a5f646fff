package ws

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

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

// testConfigs holds the WebSocket Config each test server's handlers upgrade with (opts).
var testConfigs sync.Map // *loop.Server -> Config

// opts returns the Config the test gave c's server (startWS), with o's handshake options.
func opts(c *loop.Ctx, o Config) Config {
	cfg, _ := testConfigs.Load(c.Loop().Server())
	out, _ := cfg.(Config)
	out.Subprotocols, out.CheckOrigin = o.Subprotocols, o.CheckOrigin
	return out
}

// startServer starts a server on a free loopback port with the routes set by setup and
// shuts it down at the end of the test; its handlers upgrade with the zero Config.
func startServer(t testing.TB, cfg loop.Config, setup func(s *loop.Server)) (*loop.Server, string) {
	t.Helper()
	return startWS(t, cfg, Config{}, setup)
}

// startWS is startServer whose handlers upgrade with wcfg (through opts).
func startWS(t testing.TB, cfg loop.Config, wcfg Config, setup func(s *loop.Server)) (*loop.Server, string) {
	t.Helper()
	s := newServer(t, cfg, wcfg)
	if setup != nil {
		setup(s)
	}
	looptest.Start(t, s)
	return s, s.Addr().String()
}

// newServer makes a server for a test that starts it itself; its handlers upgrade with
// wcfg (through opts).
func newServer(t testing.TB, cfg loop.Config, wcfg Config) *loop.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger(t)
	}
	s := loop.New(looptest.Config(t, cfg))
	testConfigs.Store(s, wcfg)
	t.Cleanup(func() { testConfigs.Delete(s) })
	return s
}

// serveInBackground runs s.ListenAndServe in a goroutine, waits until s is ready, and
// returns the channel ListenAndServe's result arrives on: for tests that shut the server
// down themselves.
func serveInBackground(t testing.TB, s *loop.Server) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready after 10s")
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
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *client) send(raw string) {
	c.t.Helper()
	_ = c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := io.WriteString(c.c, raw)
	require.NoError(c.t, err)
}

// read reads one response (for a request with method) and its whole body.
func (c *client) read(method string) (*http.Response, string) {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	require.NoError(c.t, err)
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(c.t, err)
	return resp, string(b)
}

// wsStats returns the websockets section of s (its first loop's figures).
func wsStats(t testing.TB, s *loop.Server) Stats {
	var doc Stats
	onLoop(t, s, func() { doc = take(s.Loop(0)) })
	return doc
}

// onLoop runs fn on s's loop and waits for it.
func onLoop(t testing.TB, s *loop.Server, fn func()) {
	t.Helper()
	looptest.OnLoop(t, s.Loop(0), fn)
}
