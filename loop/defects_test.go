package loop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The defects issue 12 found by reading, each through the public API, over real sockets.

// Shutdown on a server that never started must close Done, so that a second Shutdown,
// Close, <-Done() and DrainReport return (defer Close plus an explicit Shutdown).
func TestDefectShutdownBeforeStartClosesDone(t *testing.T) {
	s := New(Config{Logger: quietLogger(t)})
	require.NoError(t, s.Shutdown(context.Background()))
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_ = s.Shutdown(context.Background())
		_ = s.Close()
		<-s.Done()
		s.DrainReport()
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown, Close, Done or DrainReport blocked on a server that never started")
	}
	require.ErrorIs(t, s.ListenAndServe(), ErrServerClosed)
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

// Requests refused with 429 appear on a stats page, in the DrainReport and in a log line.
func TestDefectRefusalsAreVisible(t *testing.T) {
	var logs syncBuffer
	cfg := Config{RequestConcurrency: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	s, addr := startServer(t, cfg, func(s *Server) {
		s.Handle("GET /hold", func(c *Ctx) {
			_ = c.Sleep(time.Hour) // holds the only slot until the client leaves
		})
		s.Handle("GET /x", func(c *Ctx) { c.String(200, "x") })
		s.HandleStats("/debug/baton")
	})
	hold := dial(t, addr)
	hold.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	c := dial(t, addr)
	require.Eventually(t, func() bool {
		resp, _ := c.get("/x")
		return resp.StatusCode == 429
	}, 10*time.Second, 5*time.Millisecond)
	resp, body := c.get("/debug/baton/admission")
	require.Equal(t, 200, resp.StatusCode)
	var page struct {
		Refused uint64 `json:"refused_total"`
		Active  int    `json:"active"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &page), body)
	assert.GreaterOrEqual(t, page.Refused, uint64(1))
	assert.Equal(t, 1, page.Active)
	assert.Contains(t, logs.String(), "429")
	_ = hold.c.Close()
	require.NoError(t, s.Shutdown(context.Background()))
	assert.GreaterOrEqual(t, s.DrainReport().Refused, uint64(1))
}

// Each chunk a handler writes to a Stream reaches the client within a loop turn, without
// waiting for 32 KiB to gather: the client asks for the next chunk only after it has
// received the previous one.
func TestDefectStreamChunksReachTheWireAtOnce(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var next *Event
			var mu sync.Mutex // next is replaced per chunk; MT handlers run in parallel
			_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				s.Handle("GET /feed", func(c *Ctx) {
					w := c.Stream(200, "text/plain")
					for i := 0; i < 5; i++ {
						mu.Lock()
						ev := NewEvent(s.loopRef)
						next = ev
						mu.Unlock()
						_, _ = fmt.Fprintf(w, "chunk%d;", i)
						if err := ev.WaitTimeout(c, 30*time.Second); err != nil {
							return
						}
					}
				})
				s.Handle("POST /next", func(c *Ctx) {
					mu.Lock()
					ev := next
					mu.Unlock()
					if ev != nil {
						ev.Set()
					}
					c.NoContent()
				})
			})
			feed := dial(t, addr)
			feed.send("GET /feed HTTP/1.1\r\nHost: x\r\n\r\n")
			_ = feed.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(feed.br, &http.Request{Method: "GET"})
			require.NoError(t, err)
			ctl := dial(t, addr)
			br := bufio.NewReader(resp.Body)
			for i := 0; i < 5; i++ {
				want := fmt.Sprintf("chunk%d;", i)
				got := make([]byte, len(want))
				_, err := io.ReadFull(br, got)
				require.NoError(t, err, "chunk %d did not arrive", i)
				require.Equal(t, want, string(got))
				ctl.send("POST /next HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
				r, _ := ctl.read("POST")
				require.Equal(t, 204, r.StatusCode)
			}
		})
	}
}

// PathValue unescapes like net/http's Request.PathValue.
func TestDefectPathValueIsUnescaped(t *testing.T) {
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /p/{name}", func(c *Ctx) { c.String(200, c.PathValue("name")) })
		s.Handle("GET /f/{rest...}", func(c *Ctx) { c.String(200, c.PathValue("rest")) })
	})
	c := dial(t, addr)
	for path, want := range map[string]string{
		"/p/caf%C3%A9":     "café",
		"/p/a%20b":         "a b",
		"/p/plain":         "plain",
		"/f/dir/x%2Fy.txt": "dir/x/y.txt",
	} {
		resp, body := c.get(path)
		require.Equal(t, 200, resp.StatusCode, path)
		assert.Equal(t, want, body, path)
	}
	// net/http agrees on the same input.
	r, _ := http.NewRequest("GET", "http://x/p/caf%C3%A9", nil)
	mux := http.NewServeMux()
	var got string
	mux.HandleFunc("GET /p/{name}", func(_ http.ResponseWriter, r *http.Request) { got = r.PathValue("name") })
	mux.ServeHTTP(nopWriter{}, r)
	assert.Equal(t, "café", got)
	assert.True(t, strings.HasPrefix(got, "caf"))
}

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) WriteHeader(int)             {}
