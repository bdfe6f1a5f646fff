package loop

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Each chunk a handler writes to a Stream reaches the client within a loop turn, without
// waiting for 32 KiB to gather: the client asks for the next chunk only after it has
// received the previous one.
func TestStreamChunksReachTheWireAtOnce(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var next *Future[struct{}]
			var mu sync.Mutex // next is replaced per chunk; MT handlers run in parallel
			_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				s.Handle("GET /feed", func(c *Ctx) {
					w := c.Stream(200, "text/plain")
					for i := 0; i < 5; i++ {
						mu.Lock()
						ev := NewFuture[struct{}](s.loopRef)
						next = ev
						mu.Unlock()
						_, _ = fmt.Fprintf(w, "chunk%d;", i)
						if _, err := ev.Await(c, 30*time.Second); err != nil {
							return
						}
					}
				})
				s.Handle("POST /next", func(c *Ctx) {
					mu.Lock()
					ev := next
					mu.Unlock()
					if ev != nil {
						ev.Resolve(struct{}{}, nil)
					}
					c.Bytes(204, "", nil)
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

// HEAD on a streamed GET route sends the head only: no stray final chunk that would
// be misread as the next pipelined response.
func TestHeadOnStreamedRouteSendsHeadOnly(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				s.Handle("GET /stream", func(c *Ctx) {
					w := c.Stream(200, "text/plain")
					_, _ = w.Write([]byte("hello"))
				})
				s.Handle("GET /x", func(c *Ctx) { c.String(200, "x") })
			})
			c := dial(t, addr)
			c.send("HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\nGET /x HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, body := c.read("HEAD")
			require.Equal(t, 200, resp.StatusCode)
			require.Empty(t, body)
			resp, body, err := c.tryRead("GET")
			require.NoError(t, err, "the response after a streamed HEAD must parse")
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "x", body)
		})
	}
}

// A stream cut short by the handler deadline ends without its terminating chunk
// (the client sees a truncated body, not a complete one), and it is logged.
func TestStreamCutByDeadlineIsTruncated(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var logs syncBuffer
			cfg := m.cfg(Config{HandlerTimeout: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			_, addr := startServer(t, cfg, func(s *Server) {
				s.Handle("GET /long", func(c *Ctx) {
					w := c.Stream(200, "application/octet-stream")
					chunk := []byte(strings.Repeat("y", 1024))
					for {
						if _, err := w.Write(chunk); err != nil {
							return
						}
						if err := c.Sleep(5 * time.Millisecond); err != nil {
							// Deadline passed: a handler that writes on after its
							// cancellation must not complete the response either.
							_, _ = w.Write(chunk)
							return
						}
					}
				})
			})
			c := dial(t, addr)
			c.send("GET /long HTTP/1.1\r\nHost: x\r\n\r\n")
			_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(c.br, &http.Request{Method: "GET"})
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			n, err := io.Copy(io.Discard, resp.Body)
			require.Positive(t, n)
			require.ErrorIs(t, err, io.ErrUnexpectedEOF, "a cut stream must not end like a complete one")
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cut short") }, 5*time.Second, 10*time.Millisecond)
		})
	}
}

// A stream parked on backpressure is woken when the socket drains, not by polling:
// parked for 300 ms behind a client that does not read, it is scheduled a handful of times,
// where a 1 ms poll would schedule it hundreds of times.
func TestParkedStreamIsWokenNotPolled(t *testing.T) {
	if !hasDrainPoller {
		t.Skip("no drain watch on " + runtime.GOOS + ": a parked stream polls (drainWatch)")
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			const total = 16 << 20
			var written atomic.Int64
			rounds := make(chan uint64, 1)
			s, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				s.Handle("GET /big", bigStream(total, &written, func(c *Ctx) { rounds <- c.Stats().Rounds }))
			})
			c := dial(t, addr)
			c.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
			waitHeldBack(t, s)
			time.Sleep(300 * time.Millisecond) // the window the handler stays parked
			resp, body := c.read("GET")
			require.Equal(t, 200, resp.StatusCode)
			require.Len(t, body, total)
			// Each 64 KiB write spends a slice's byte budget and yields once (streamshare.go):
			// those slices are the stream writing, not polling.
			r := <-rounds
			if !m.multi {
				r -= uint64(total / (64 << 10))
			}
			t.Logf("the stream was scheduled %d times besides its yields", r)
			require.Less(t, r, uint64(100), "the parked stream was scheduled %d times: it polls", r)
		})
	}
}
