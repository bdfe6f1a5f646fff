package accesslog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/accesslog"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// startServer2 starts a server with setup's routes; it is shut down when the test ends.
func startServer2(t *testing.T, cfg loop.Config, setup func(s *loop.Server)) (*loop.Server, string) {
	t.Helper()
	s := loop.New(looptest.Config(t, cfg))
	setup(s)
	return s, looptest.Start(t, s)
}

func startServer(t *testing.T, cfg loop.Config, setup func(s *loop.Server)) string {
	t.Helper()
	_, url := startServer2(t, cfg, setup)
	return url
}

// get fetches url and returns its status, the body read and discarded.
func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// blockingHandler is a slog handler that blocks every record until released.
type blockingHandler struct {
	release chan struct{}
	mu      sync.Mutex
	lines   []slog.Record
}

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockingHandler) Handle(_ context.Context, r slog.Record) error {
	<-h.release
	h.mu.Lock()
	h.lines = append(h.lines, r)
	h.mu.Unlock()
	return nil
}
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler      { return h }

// TestAccessLoggerSlowLogDoesNotStallLoop: with a log that does not move, requests are
// still served at once and the records past the buffer are dropped and counted.
func TestAccessLoggerSlowLogDoesNotStallLoop(t *testing.T) {
	h := &blockingHandler{release: make(chan struct{})}
	al, err := accesslog.New(slog.New(h), accesslog.Options{Buffer: 4})
	require.NoError(t, err)
	defer al.Close()
	url := startServer(t, loop.Config{OnRequestDone: al.Record}, func(s *loop.Server) {
		s.Handle("GET /x", func(c *loop.Ctx) { c.String(200, "x") })
	})
	const n = 50
	for range n {
		require.Equal(t, 200, get(t, url+"/x"), "answered while the log writer is stuck")
	}
	// At most one record in the writer's hands and four in the buffer.
	require.Eventually(t, func() bool { return al.Dropped() >= n-5 }, 10*time.Second, time.Millisecond)
	close(h.release)
	require.Eventually(t, func() bool { return al.Logged()+al.Dropped() == n }, 10*time.Second, time.Millisecond)
	assert.LessOrEqual(t, al.Logged(), uint64(5))
}

// TestAccessLoggerSamples logs one request in SampleEvery, and every 5xx.
func TestAccessLoggerSamples(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil))
	al, err := accesslog.New(l, accesslog.Options{SampleEvery: 10})
	require.NoError(t, err)
	s, url := startServer2(t, loop.Config{OnRequestDone: al.Record}, func(s *loop.Server) {
		s.Handle("GET /ok", func(c *loop.Ctx) { c.String(200, "ok") })
		s.Handle("GET /fail", func(c *loop.Ctx) { c.String(503, "no") })
	})
	for range 30 {
		require.Equal(t, 200, get(t, url+"/ok"))
	}
	require.Equal(t, 503, get(t, url+"/fail"))
	require.NoError(t, s.Shutdown(context.Background()))
	al.Close()
	assert.Equal(t, uint64(4), al.Logged())
	assert.Zero(t, al.Dropped())
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4)
	var last map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[3]), &last))
	assert.Equal(t, "request", last["msg"])
	assert.Equal(t, "GET /fail", last["route"])
	assert.Equal(t, "/fail", last["path"])
	assert.EqualValues(t, 503, last["status"])
	for _, k := range []string{"start", "method", "bytes", "latency", "on_loop", "queue", "parked", "rounds", "remote", "task"} {
		assert.Contains(t, last, k)
	}
}

func TestAccessLogOptionsErrors(t *testing.T) {
	_, err := accesslog.New(slog.Default(), accesslog.Options{SampleEvery: -1})
	require.EqualError(t, err, "accesslog: Options.SampleEvery must not be negative, got -1")
	_, err = accesslog.New(slog.Default(), accesslog.Options{Buffer: -2})
	require.EqualError(t, err, "accesslog: Options.Buffer must not be negative, got -2")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// BenchmarkRecord is the loop's share of a logged request: Record's sampling and copy onto
// the writer's buffer (what the hook adds to BenchmarkEcosystemCost's hook-noop variant).
func BenchmarkRecord(b *testing.B) {
	for _, every := range []int{1, 100} {
		b.Run("sample-every="+strconv.Itoa(every), func(b *testing.B) {
			al, err := accesslog.New(slog.New(slog.NewTextHandler(io.Discard, nil)), accesslog.Options{SampleEvery: every, Buffer: 1 << 16})
			require.NoError(b, err)
			b.Cleanup(al.Close)
			rec := &accounting.RequestRecord{Method: "GET", Route: "GET /x", Path: "/x", Status: 200, Bytes: 120}
			b.ReportAllocs()
			for b.Loop() {
				al.Record(rec)
			}
		})
	}
}
