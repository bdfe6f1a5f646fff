package accesslog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/accesslog"
)

// idKey is where the test's own request-id middleware keeps the id (package requestid
// is another feature, which this package's tests may not import).
type idKey struct{}

// setID is a request-id middleware: the id is the X-Test-Id header's.
func setID(next loop.HandlerFunc) loop.HandlerFunc {
	return func(c *loop.Ctx) {
		c.SetValue(idKey{}, c.Header("X-Test-Id"))
		next(c)
	}
}

func readID(c *loop.Ctx) string { s, _ := c.Value(idKey{}).(string); return s }

// TestAccessLogRequestID: in both modes and with the access log's middleware inside or
// outside the one that sets the id, each line carries its request's id, a panicking
// handler's 500 included, and the 503 of a handler past its deadline (recorded when its
// task ends); a 404 (no middleware ran) has an empty request_id; no id is
// left behind once the requests are logged.
func TestAccessLogRequestID(t *testing.T) {
	for _, mt := range []bool{false, true} {
		for _, inside := range []bool{true, false} {
			t.Run(fmt.Sprintf("multithread=%v/inside=%v", mt, inside), func(t *testing.T) {
				var mu sync.Mutex
				var buf bytes.Buffer
				al, err := accesslog.New(slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil)),
					accesslog.Options{RequestID: readID})
				require.NoError(t, err)
				// HandlerTimeout: far above an /ok under -race beside a CPU hog.
				s, url := startServer2(t, loop.Config{MultiThread: mt, OnRequestDone: al.Record, HandlerTimeout: 400 * time.Millisecond}, func(s *loop.Server) {
					if inside {
						s.Use(setID, al.Middleware())
					} else {
						s.Use(al.Middleware(), setID)
					}
					s.Handle("GET /ok/{n}", func(c *loop.Ctx) { c.String(200, "ok") })
					s.Handle("GET /panic", func(c *loop.Ctx) { panic("boom") })
					s.Handle("GET /late", func(c *loop.Ctx) {
						_ = c.Sleep(10 * time.Second) // cut short at the deadline, after the server's 503
						c.String(200, "too late")
					})
				})
				const n = 20
				want := map[string]string{} // path -> id
				send := func(path, id string) int {
					req, err := http.NewRequest("GET", url+path, nil)
					require.NoError(t, err)
					req.Header.Set("X-Test-Id", id)
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					require.NoError(t, resp.Body.Close())
					want[path] = id
					return resp.StatusCode
				}
				for i := range n {
					require.Equal(t, 200, send(fmt.Sprintf("/ok/%d", i), fmt.Sprintf("req-%d", i)))
				}
				require.Equal(t, 500, send("/panic", "req-panic"))
				require.Equal(t, 404, send("/nowhere", "req-404"))
				want["/nowhere"] = ""
				require.Equal(t, 503, send("/late", "req-late"))
				http.DefaultClient.CloseIdleConnections()
				require.NoError(t, s.Shutdown(context.Background()))
				al.Close()
				assert.Zero(t, accesslog.PendingIDs(al), "ids noted and never recorded")

				mu.Lock()
				defer mu.Unlock()
				lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
				require.Len(t, lines, n+3)
				for _, l := range lines {
					var rec map[string]any
					require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
					path, _ := rec["path"].(string)
					assert.Equal(t, want[path], rec["request_id"], "line %s", l)
				}
			})
		}
	}
}

// TestAccessLogWithoutRequestID: without Options.RequestID the lines have no request_id
// and Middleware returns the handler it wraps.
func TestAccessLogWithoutRequestID(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	al, err := accesslog.New(slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil)), accesslog.Options{})
	require.NoError(t, err)
	s, url := startServer2(t, loop.Config{OnRequestDone: al.Record}, func(s *loop.Server) {
		s.Use(al.Middleware())
		s.Handle("GET /ok", func(c *loop.Ctx) { c.String(200, "ok") })
	})
	require.Equal(t, 200, get(t, url+"/ok"))
	http.DefaultClient.CloseIdleConnections()
	require.NoError(t, s.Shutdown(context.Background()))
	al.Close()
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, buf.String(), `"path":"/ok"`)
	assert.NotContains(t, buf.String(), "request_id")
}

// TestAccessLogRequestIDSeveralLoops: on a server of two loops, whose task ids are each
// loop's own and so repeat across loops, concurrent requests over many connections are
// each logged with their own id, in both modes.
func TestAccessLogRequestIDSeveralLoops(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			var mu sync.Mutex
			var buf bytes.Buffer
			al, err := accesslog.New(slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil)),
				accesslog.Options{RequestID: readID})
			require.NoError(t, err)
			s, url := startServer2(t, loop.Config{MultiThread: mt, Shards: 2, OnRequestDone: al.Record}, func(s *loop.Server) {
				s.Use(setID, al.Middleware())
				s.Handle("GET /r/{id}", func(c *loop.Ctx) {
					_ = c.Sleep(time.Millisecond) // overlap requests on both loops
					c.String(200, "ok")
				})
			})
			const clients, each = 16, 10
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					cl := &http.Client{Transport: &http.Transport{}} // a connection of its own
					defer cl.CloseIdleConnections()
					for j := range each {
						id := fmt.Sprintf("c%d-%d", i, j)
						req, err := http.NewRequest("GET", url+"/r/"+id, nil)
						if !assert.NoError(t, err) {
							return
						}
						req.Header.Set("X-Test-Id", id)
						resp, err := cl.Do(req)
						if !assert.NoError(t, err) {
							return
						}
						assert.NoError(t, resp.Body.Close())
						assert.Equal(t, 200, resp.StatusCode)
					}
				})
			}
			wg.Wait()
			require.NoError(t, s.Shutdown(context.Background()))
			al.Close()
			assert.Zero(t, accesslog.PendingIDs(al))
			mu.Lock()
			defer mu.Unlock()
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			require.Len(t, lines, clients*each)
			for _, l := range lines {
				var rec struct {
					Path      string `json:"path"`
					RequestID string `json:"request_id"`
				}
				require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
				assert.Equal(t, "/r/"+rec.RequestID, rec.Path)
			}
		})
	}
}
