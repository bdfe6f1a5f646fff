package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordSink collects request records from the loop.
func recordSink() (func(*RequestRecord), <-chan RequestRecord) {
	ch := make(chan RequestRecord, 100)
	return func(r *RequestRecord) {
		cp := *r
		cp.Path = strings.Clone(r.Path)
		ch <- cp
	}, ch
}

func nextRecord(t *testing.T, ch <-chan RequestRecord) RequestRecord {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request record after 10s")
	}
	return RequestRecord{}
}

// rawExchange sends one request on a new connection that closes after it and returns
// every byte the server sent, and the client's address.
func rawExchange(t *testing.T, addr, req string) ([]byte, net.Addr) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = io.WriteString(c, req)
	require.NoError(t, err)
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	return b, c.LocalAddr()
}

// TestRequestRecordsMatchTraffic sends known requests and checks their records.
func TestRequestRecordsMatchTraffic(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		hook, recs := recordSink()
		_, addr := startServer(t, Config{MultiThread: multi, OnRequestDone: hook}, func(s *Server) {
			s.Handle("GET /hello/{name}", func(c *Ctx) { c.String(200, "hello "+c.PathValue("name")) })
			s.Handle("GET /nap", func(c *Ctx) {
				_ = c.Sleep(30 * time.Millisecond)
				c.String(201, "rested")
			})
			s.Handle("GET /stream", func(c *Ctx) {
				w := c.Stream(200, "text/plain")
				for range 3 {
					_, _ = w.Write([]byte(strings.Repeat("s", 1000)))
				}
			})
		})
		out, local := rawExchange(t, addr, "GET /hello/ann?x=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
		r := nextRecord(t, recs)
		assert.Equal(t, "GET", r.Method)
		assert.Equal(t, "GET /hello/{name}", r.Route)
		assert.Equal(t, "/hello/ann", r.Path)
		assert.Equal(t, 200, r.Status)
		assert.Equal(t, int64(len(out)), r.Bytes)
		assert.Equal(t, local.String(), r.Remote.String())
		assert.NotZero(t, r.TaskID)
		assert.GreaterOrEqual(t, r.Rounds, uint64(1))
		assert.Positive(t, r.OnLoop)
		assert.GreaterOrEqual(t, r.Latency, r.OnLoop)
		assert.WithinDuration(t, time.Now(), r.Time, 10*time.Second)

		out, _ = rawExchange(t, addr, "GET /nap HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
		r = nextRecord(t, recs)
		assert.Equal(t, 201, r.Status)
		assert.Equal(t, int64(len(out)), r.Bytes)
		assert.GreaterOrEqual(t, r.Latency, 30*time.Millisecond)
		if !multi { // a multi-thread handler's sleep blocks its goroutine: counted as parked too
			assert.GreaterOrEqual(t, r.Rounds, uint64(2))
		}
		assert.GreaterOrEqual(t, r.Parked, 25*time.Millisecond) // the loop's clock is not the timer's

		out, _ = rawExchange(t, addr, "GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
		r = nextRecord(t, recs)
		assert.Equal(t, 200, r.Status)
		assert.Equal(t, int64(len(out)), r.Bytes, "streamed pieces are counted")

		out, _ = rawExchange(t, addr, "GET /nothing HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
		r = nextRecord(t, recs)
		assert.Equal(t, 404, r.Status)
		assert.Equal(t, "", r.Route)
		assert.Equal(t, "/nothing", r.Path)
		assert.Equal(t, int64(len(out)), r.Bytes)
		assert.Zero(t, r.TaskID)
		select {
		case extra := <-recs:
			t.Fatalf("unexpected record %+v", extra)
		default:
		}
	})
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
	al, err := NewAccessLogger(slog.New(h), AccessLogOptions{Buffer: 4})
	require.NoError(t, err)
	defer al.Close()
	_, addr := startServer(t, Config{OnRequestDone: al.Record}, func(s *Server) {
		s.Handle("GET /x", func(c *Ctx) { c.String(200, "x") })
	})
	c := dial(t, addr)
	const n = 50
	for range n {
		resp, _ := c.get("/x") // each answered while the log writer is stuck
		mustStatus(t, resp, 200)
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
	al, err := NewAccessLogger(l, AccessLogOptions{SampleEvery: 10})
	require.NoError(t, err)
	s, addr := startServer(t, Config{OnRequestDone: al.Record}, func(s *Server) {
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
		s.Handle("GET /fail", func(c *Ctx) { c.String(503, "no") })
	})
	c := dial(t, addr)
	for range 30 {
		resp, _ := c.get("/ok")
		mustStatus(t, resp, 200)
	}
	resp, _ := c.get("/fail")
	mustStatus(t, resp, 503)
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
	_, err := NewAccessLogger(slog.Default(), AccessLogOptions{SampleEvery: -1})
	require.EqualError(t, err, "loop: AccessLogOptions.SampleEvery must not be negative, got -1")
	_, err = NewAccessLogger(slog.Default(), AccessLogOptions{Buffer: -2})
	require.EqualError(t, err, "loop: AccessLogOptions.Buffer must not be negative, got -2")
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
