package loop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/offload"
)

// Faults found by attacking the server (issue 13), each over real sockets.

// Item 3: HEAD on a streamed GET route sends the head only: no stray final chunk that would
// be misread as the next pipelined response.
func TestAttackHeadOnStreamedRoute(t *testing.T) {
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

// Item 4: a stream cut short by the handler deadline ends without its terminating chunk
// (the client sees a truncated body, not a complete one), and it is logged.
func TestAttackStreamCutByDeadlineIsTruncated(t *testing.T) {
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

// Item 5: runtime.Goexit in a handler is contained like a panic: 500, and the server keeps
// serving, in both modes.
func TestAttackGoexitInHandler(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var deferred atomic.Int32
			_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				s.Handle("GET /exit", func(c *Ctx) {
					defer deferred.Add(1)
					runtime.Goexit()
				})
				s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
			})
			c := dial(t, addr)
			resp, _ := c.get("/exit")
			require.Equal(t, 500, resp.StatusCode)
			require.EqualValues(t, 1, deferred.Load())
			for i := 0; i < 3; i++ { // the loop lives
				resp, body := dial(t, addr).get("/ok")
				require.Equal(t, 200, resp.StatusCode)
				require.Equal(t, "ok", body)
			}
		})
	}
}

// Item 6: a graceful shutdown finishes while clients keep reconnecting after their 503s:
// connections opened during the drain do not hold it open.
func TestAttackDrainFinishesWhileClientsReconnect(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := New(m.cfg(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)}))
			s.Handle("GET /work", func(c *Ctx) {
				_ = c.Sleep(2 * time.Millisecond)
				c.String(200, "ok")
			})
			errc := serveInBackground(t, s)
			addr := s.Addr().String()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var answered atomic.Int64
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						nc, err := net.DialTimeout("tcp", addr, time.Second)
						if err != nil {
							continue // refused once the port is closed: keep trying, like a client would
						}
						cl := &client{c: nc, br: newReader(nc)}
						for {
							if _, err := io.WriteString(nc, "GET /work HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
								break
							}
							resp, _, err := cl.tryRead("GET")
							if err != nil {
								break
							}
							answered.Add(1)
							if resp.StatusCode != 200 || resp.Close {
								break // 503 or Connection: close: reconnect at once
							}
						}
						_ = nc.Close()
					}
				}()
			}
			require.Eventually(t, func() bool { return answered.Load() > 200 }, 10*time.Second, time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			err := s.Shutdown(ctx)
			took := time.Since(start)
			close(stop)
			wg.Wait()
			require.NoError(t, err, "the drain ran to its deadline (%v)", took)
			require.False(t, s.DrainReport().DeadlineReached)
			require.ErrorIs(t, <-errc, ErrServerClosed)
		})
	}
}

// Item 7: handler panics are rate-limited in the log: every one is counted, a sample is
// logged, and the next line says how many were suppressed.
func TestAttackPanicLogsAreRateLimited(t *testing.T) {
	var logs syncBuffer
	const panics = 300
	_, addr := startServer(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(s *Server) {
		s.Handle("GET /boom", func(c *Ctx) { panic("boom") })
		s.HandleStats("/debug/baton")
	})
	c := dial(t, addr)
	var sb strings.Builder
	for i := 0; i < panics; i++ {
		sb.WriteString("GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	c.send(sb.String())
	for i := 0; i < panics; i++ {
		resp, _ := c.read("GET")
		require.Equal(t, 500, resp.StatusCode)
	}
	lines := strings.Count(logs.String(), "handler panicked")
	assert.Positive(t, lines)
	assert.LessOrEqual(t, lines, 20, "a panic storm must not write one stack per panic")
	_, body := dial(t, addr).get("/debug/baton/admission")
	assert.Contains(t, body, fmt.Sprintf(`"panics_total": %d`, panics))
}

// Item 12: "Expect: 100-continue" on a route that will 404 gets the 404 at once, never
// "100 Continue" first.
func TestAttackExpectContinueOn404(t *testing.T) {
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("POST /upload", func(c *Ctx) { c.String(200, fmt.Sprint(len(c.Body()))) })
	})
	c := dial(t, addr)
	c.send("POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.br.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "HTTP/1.1 404"), "first line %q", line)
	// A route that exists still gets 100 Continue and the upload.
	c2 := dial(t, addr)
	c2.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
	_ = c2.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err = c2.br.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "HTTP/1.1 100"), "first line %q", line)
	_, _ = c2.br.ReadString('\n')
	c2.send("abc")
	resp, body := c2.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "3", body)
}

// Item 15: tasks started by Every count in the loop's started/live counts, and end.
func TestAttackEveryTasksAreCounted(t *testing.T) {
	ticked := make(chan struct{}, 1)
	var h *TaskHandle
	s, addr := startServer(t, Config{}, func(s *Server) {
		h = s.Loop(0).Every("tick", time.Millisecond, func(t *Task) {
			select {
			case ticked <- struct{}{}:
			default:
			}
		})
		s.HandleStats("/debug/baton")
	})
	<-ticked
	snap := make(chan accounting.LoopSnapshot, 1)
	require.NoError(t, s.Loop(0).Post(func() { snap <- s.snapshotLoop() }))
	before := <-snap
	require.GreaterOrEqual(t, before.LiveTasks(), int64(1))
	h.Stop()
	waitDone(t, "stopped Every", h.Done())
	require.NoError(t, s.Loop(0).Post(func() { snap <- s.snapshotLoop() }))
	after := <-snap
	require.Equal(t, before.LiveTasks()-1, after.LiveTasks())
	_, body := dial(t, addr).get("/debug/baton/tasks")
	require.NotContains(t, body, `"tick"`, "a stopped task is not live")
}

// Item 2's fix: a client that stops reading but keeps sending is cut off once its
// unparsed input passes Config.MaxBufferedInput, whatever the connection is doing.
func TestAttackInputBoundedWhileOutputBacksUp(t *testing.T) {
	big := strings.Repeat("b", 1<<20)
	_, addr := startServer(t, Config{MaxBufferedInput: 1 << 20, MaxOutputBytes: 2 << 20}, func(s *Server) {
		s.Handle("GET /big", func(c *Ctx) { c.String(200, big) })
	})
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer nc.Close()
	var sb strings.Builder
	for i := 0; i < 40; i++ {
		sb.WriteString("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	_, err = io.WriteString(nc, sb.String())
	require.NoError(t, err)
	flood := []byte(strings.Repeat("GET /big HTTP/1.1\r\nHost: x\r\n\r\n", 1000))
	deadline := time.Now().Add(20 * time.Second)
	var sent int
	for time.Now().Before(deadline) {
		_ = nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := nc.Write(flood)
		sent += n
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // the kernel buffers are full: keep pushing until the server cuts us off
			}
			break // reset or broken pipe: the server closed the connection
		}
	}
	require.True(t, time.Now().Before(deadline), "still accepting input after %d MiB", sent>>20)
}

// Item 11: Shutdown honours its context while offloaded functions that ignore their
// context still run, instead of waiting a fixed 10 s for them.
func TestAttackShutdownHonoursDeadlineForHungOffload(t *testing.T) {
	release := make(chan struct{})
	defer close(release) // let the hung function go at the end (goleak)
	started := make(chan struct{})
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	s.Handle("GET /hang", func(c *Ctx) {
		_, _ = offload.Do(c, func(context.Context) (int, error) {
			close(started)
			<-release // ignores its context
			return 0, nil
		})
		c.String(200, "late")
	})
	errc := serveInBackground(t, s)
	cl := dial(t, s.Addr().String())
	cl.send("GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Shutdown(ctx)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, <-errc, ErrServerClosed)
	require.Less(t, took, 5*time.Second, "Shutdown waited past its context for a hung offloaded function")
}

// Item 9: a stream parked on backpressure is woken when the socket drains, not by polling:
// parked for 300 ms behind a client that does not read, it is scheduled a handful of times,
// where a 1 ms poll would schedule it hundreds of times.
func TestAttackParkedStreamDoesNotPoll(t *testing.T) {
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

// Item 14: the stall detector reports a stall's true length when the slice ends (the loop
// reports long slices to it), not the last poll's value, and names the task's route.
func TestAttackStallLengthIsExact(t *testing.T) {
	var logs syncBuffer
	cfg := Config{StallThreshold: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	_, addr := startServer(t, cfg, func(s *Server) {
		s.Handle("GET /hog", func(c *Ctx) {
			end := time.Now().Add(150 * time.Millisecond)
			for time.Now().Before(end) { // holds the loop: a stall
			}
			c.String(200, "done")
		})
	})
	resp, _ := dial(t, addr).get("/hog")
	require.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "gave the loop back") }, 10*time.Second, 10*time.Millisecond)
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "gave the loop back") {
			line = l
		}
	}
	require.Contains(t, line, "exact=true", line)
	i := strings.Index(line, "length=")
	require.GreaterOrEqual(t, i, 0, line)
	length, err := time.ParseDuration(strings.Fields(line[i+len("length="):])[0])
	require.NoError(t, err, line)
	require.GreaterOrEqual(t, length, 150*time.Millisecond, line)
	require.Less(t, length, 2*time.Second, line)
}
