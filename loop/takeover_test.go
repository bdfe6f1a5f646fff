package loop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// lineEcho is a tiny raw protocol for the takeover seam: after "Upgrade: line-echo" the
// connection echoes every line it gets back as "echo: <line>\n"; "bye" makes the server
// answer "bye\n" and close. It checks the seam's goroutine rules as it goes: every call on
// the loop, none from inside another.
type lineEcho struct {
	t      testing.TB
	l      *Loop
	in     atomic.Bool // inside a RawHandler call
	wrong  atomic.Int32
	events chan string // what happened, for the test; buffered

	// Loop-confined.
	returned, closed int
	sweeps           int
	lastSweep        time.Time
}

const lineEchoHead = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: line-echo\r\nConnection: Upgrade\r\n\r\n"

func newLineEcho(t testing.TB) *lineEcho { return &lineEcho{t: t, events: make(chan string, 64)} }

// enter checks a call's goroutine rules.
func (e *lineEcho) enter() func() {
	if !e.l.OnLoop() || e.in.Swap(true) {
		e.wrong.Add(1)
	}
	return func() { e.in.Store(false) }
}

func (e *lineEcho) OnData(rc *RawConn, in []byte) int {
	defer e.enter()()
	used := 0
	for {
		i := bytes.IndexByte(in[used:], '\n')
		if i < 0 {
			return used
		}
		line := string(in[used : used+i])
		used += i + 1
		if line == "bye" {
			_, _ = rc.Write([]byte("bye\n"))
			rc.Close(time.Second)
			return len(in)
		}
		_, _ = rc.Write([]byte("echo: " + line + "\n"))
	}
}

func (e *lineEcho) OnWritable(*RawConn) { defer e.enter()(); e.events <- "writable" }

func (e *lineEcho) OnSweep(_ *RawConn, now time.Time) {
	defer e.enter()()
	if !e.lastSweep.IsZero() && !now.After(e.lastSweep) {
		e.wrong.Add(1) // the loop's clock goes forward
	}
	e.lastSweep = now
	e.sweeps++
	if e.sweeps == 10 {
		e.events <- "swept"
	}
}

func (e *lineEcho) OnDrain(rc *RawConn) {
	defer e.enter()()
	_, _ = rc.Write([]byte("draining\n"))
	rc.Close(time.Second)
	e.events <- "drain"
}

func (e *lineEcho) OnHandlerReturn(_ *RawConn, panicked bool) {
	defer e.enter()()
	e.returned++
	e.events <- "return panicked=" + map[bool]string{true: "true", false: "false"}[panicked]
}

func (e *lineEcho) OnClose(rc *RawConn, err error) {
	defer e.enter()()
	e.closed++
	if errors.Is(err, ErrServerClosed) {
		_, _ = rc.Write([]byte("stopping\n"))
	}
	e.events <- "close " + err.Error()
}

// expect waits for the next event and asserts it is want.
func (e *lineEcho) expect(want string) {
	e.t.Helper()
	select {
	case got := <-e.events:
		require.Equal(e.t, want, got)
	case <-time.After(10 * time.Second):
		e.t.Fatalf("no %q within 10s", want)
	}
}

// lineEchoServer serves /echo, whose handler takes the connection over with e and
// returns (or, with hold, parks until the test releases it).
func lineEchoServer(t *testing.T, cfg Config, e *lineEcho, hold *Future[struct{}]) (*Server, string) {
	return startServer(t, cfg, func(s *Server) {
		e.l = s.Loop(0)
		if hold == nil {
			hold = NewFuture[struct{}](s.Loop(0))
			hold.Resolve(struct{}{}, nil)
		}
		s.Handle("GET /echo", func(c *Ctx) {
			if c.Header("Upgrade") != "line-echo" {
				c.String(426, "upgrade to line-echo\n")
				return
			}
			if _, err := c.Takeover(e, []byte(lineEchoHead)); err != nil {
				c.String(400, err.Error()+"\n")
				return
			}
			_, _ = hold.Await(c, 0)
		})
	})
}

// dialLineEcho upgrades a new connection to line-echo, sending first (a line) with the
// request, and reads the 101.
func dialLineEcho(t *testing.T, addr, first string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = io.WriteString(c, "GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: line-echo\r\nConnection: Upgrade\r\n\r\n"+first)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, 101, resp.StatusCode)
	require.Equal(t, "line-echo", resp.Header.Get("Upgrade"))
	return c, br
}

func readLine(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSuffix(line, "\n")
}

// TestTakeoverLineEcho: a request hands its connection to a raw protocol, in both modes:
// the input that came with the request goes to the protocol after the switch, lines are
// echoed, the connection outlives its handler (which returns once), the protocol closes
// it, and OnClose follows once; every call is on the loop, never nested.
func TestTakeoverLineEcho(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newLineEcho(t)
			_, addr := lineEchoServer(t, m.cfg(Config{}), e, nil)
			c, br := dialLineEcho(t, addr, "first\nsec")
			e.expect("return panicked=false")
			assert.Equal(t, "echo: first", readLine(t, br))
			_, err := io.WriteString(c, "ond\nthird\n")
			require.NoError(t, err)
			assert.Equal(t, "echo: second", readLine(t, br))
			assert.Equal(t, "echo: third", readLine(t, br))
			_, err = io.WriteString(c, "bye\n")
			require.NoError(t, err)
			assert.Equal(t, "bye", readLine(t, br))
			_, err = br.ReadByte()
			assert.ErrorIs(t, err, io.EOF, "the protocol closed the connection")
			require.NoError(t, c.Close())
			e.expect("close " + ErrClientGone.Error())
			assert.Zero(t, e.wrong.Load(), "calls off the loop or nested")
		})
	}
}

// TestTakeoverSweepDrainReport: a taken connection gets the sweep with the loop's clock
// (the engine's idle and stall deadlines do not apply to it: it stays open past
// IdleTimeout, which ten sweeps, a quarter of it apart, pass); a graceful shutdown calls OnDrain, whose goodbye reaches the client before
// the close, and the drain report counts the connection as closed by its handler.
func TestTakeoverSweepDrainReport(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newLineEcho(t)
			s := New(m.cfg(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t), IdleTimeout: 50 * time.Millisecond}))
			e.l = s.Loop(0)
			s.Handle("GET /echo", func(c *Ctx) {
				if _, err := c.Takeover(e, []byte(lineEchoHead)); err != nil {
					c.String(400, err.Error()+"\n")
				}
			})
			errc := serveInBackground(t, s)
			c, br := dialLineEcho(t, s.Addr().String(), "")
			e.expect("return panicked=false")
			e.expect("swept") // past IdleTimeout: the connection is the protocol's
			_, err := io.WriteString(c, "still\n")
			require.NoError(t, err)
			assert.Equal(t, "echo: still", readLine(t, br))

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- s.Shutdown(ctx) }()
			e.expect("drain")
			assert.Equal(t, "draining", readLine(t, br))
			require.NoError(t, c.Close()) // the client closes its side: the linger ends
			e.expect("close " + ErrClientGone.Error())
			require.NoError(t, <-shut)
			require.ErrorIs(t, <-errc, ErrServerClosed)
			rep := s.DrainReport()
			assert.Equal(t, 1, rep.TakeoversClosed)
			assert.Zero(t, rep.TakeoversForced)
			assert.Zero(t, e.wrong.Load(), "calls off the loop or nested")
		})
	}
}

// TestTakeoverStop: a server that stops with the connection still open (Close: the drain
// ends at once, and this protocol does not close on OnDrain) tells the protocol with
// OnClose(ErrServerClosed), and what it writes then still reaches the client.
func TestTakeoverStop(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newLineEcho(t)
			s := New(m.cfg(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)}))
			e.l = s.Loop(0)
			s.Handle("GET /echo", func(c *Ctx) { _, _ = c.Takeover(stayer{e}, []byte(lineEchoHead)) })
			errc := serveInBackground(t, s)
			_, br := dialLineEcho(t, s.Addr().String(), "")
			e.expect("return panicked=false")
			require.NoError(t, s.Close())
			require.ErrorIs(t, <-errc, ErrServerClosed)
			e.expect("drain")
			e.expect("close " + ErrServerClosed.Error())
			assert.Equal(t, "stopping", readLine(t, br))
			select {
			case ev := <-e.events:
				t.Fatalf("a call after OnClose: %s", ev)
			default:
			}
		})
	}
}

// TestTakeoverRefused: Takeover refuses an HTTP/1.0 request and a request whose response
// was written, and answers nothing itself: the handler answers.
func TestTakeoverRefused(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newLineEcho(t)
			_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				e.l = s.Loop(0)
				s.Handle("GET /echo", func(c *Ctx) {
					if _, err := c.Takeover(e, []byte(lineEchoHead)); err != nil {
						c.String(400, err.Error()+"\n")
					}
				})
				s.Handle("GET /late", func(c *Ctx) {
					st := c.Stream(200, "text/plain")
					_, _ = st.Write([]byte("streaming\n"))
					_, err := c.Takeover(e, []byte(lineEchoHead))
					_, _ = st.Write([]byte(err.Error() + "\n"))
				})
			})
			cl := dial(t, addr)
			cl.send("GET /echo HTTP/1.0\r\nHost: x\r\nUpgrade: line-echo\r\nConnection: Upgrade\r\n\r\n")
			resp, body := cl.read("GET")
			assert.Equal(t, 400, resp.StatusCode)
			assert.Contains(t, body, "HTTP/1.0")
			resp, body = dial(t, addr).get("/late")
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, "streaming\n"+errTakeoverWritten.Error()+"\n", body)
			select {
			case ev := <-e.events:
				t.Fatalf("a refused takeover's handler was called: %s", ev)
			default:
			}
		})
	}
}

// TestTakeoverWaitWake: the handler's task parks in RawConn.Wait until the protocol wakes
// it (here, from OnData), and a panicking handler is reported to OnHandlerReturn while the
// connection stays the protocol's. Single-thread mode: Wait parks a task of the loop.
func TestTakeoverWaitWake(t *testing.T) {
	e := newLineEcho(t)
	woke := make(chan error, 1)
	_, addr := startServer(t, Config{}, func(s *Server) {
		e.l = s.Loop(0)
		s.Handle("GET /echo", func(c *Ctx) {
			rc, err := c.Takeover(waker{e}, []byte(lineEchoHead))
			require.NoError(t, err)
			woke <- rc.Wait(0)
			assert.ErrorIs(t, rc.Wait(time.Millisecond), ErrTimeout)
			panic("after the switch")
		})
	})
	c, br := dialLineEcho(t, addr, "")
	_, err := io.WriteString(c, "wake\n")
	require.NoError(t, err)
	require.NoError(t, <-woke)
	e.expect("return panicked=true")
	assert.Equal(t, "echo: wake", readLine(t, br))
	_, err = io.WriteString(c, "again\n")
	require.NoError(t, err)
	assert.Equal(t, "echo: again", readLine(t, br), "the protocol keeps the connection after the handler's panic")
}

// stayer is lineEcho that stays open when the drain begins.
type stayer struct{ *lineEcho }

func (s stayer) OnDrain(*RawConn) { defer s.enter()(); s.events <- "drain" }

// waker is lineEcho that wakes the connection's waiters on each input.
type waker struct{ *lineEcho }

func (w waker) OnData(rc *RawConn, in []byte) int {
	n := w.lineEcho.OnData(rc, in)
	rc.Wake()
	return n
}

// TestTakeoverWritable: Flush(wake) calls OnWritable once the client has read the backlog
// down to wake; without a way to watch the socket (withoutDrainWatch) it reports false and
// a writer that polls with Wait's timeout keeps at most one registration.
func TestTakeoverWritable(t *testing.T) {
	for _, watch := range []bool{true, false} {
		t.Run(map[bool]string{true: "watched", false: "polled"}[watch], func(t *testing.T) {
			e := newLineEcho(t)
			var mu sync.Mutex
			var waits atomic.Int32
			most, flushed := 0, make(chan bool, 1)
			done := make(chan error, 1)
			_, addr := startServer(t, Config{}, func(s *Server) {
				e.l = s.Loop(0)
				if !watch {
					withoutDrainWatch(s)
				}
				s.Handle("GET /echo", func(c *Ctx) {
					rc, err := c.Takeover(e, []byte(lineEchoHead))
					require.NoError(t, err)
					require.NoError(t, unix.SetsockoptInt(rc.Fd(), unix.SOL_SOCKET, unix.SO_SNDBUF, 16<<10))
					chunk := bytes.Repeat([]byte("x"), 63)
					for rc.Queued() < 1<<20 { // far more than the socket takes
						_, _ = rc.Write(append(chunk, '\n'))
					}
					ok := rc.Flush(4 << 10)
					flushed <- ok
					for rc.Queued() > 4<<10 {
						if err := rc.Wait(time.Millisecond); err != nil && !errors.Is(err, ErrTimeout) {
							done <- err
							return
						}
						waits.Add(1)
						mu.Lock()
						most = max(most, len(rc.waiters))
						mu.Unlock()
					}
					done <- nil
				})
			})
			c, br := dialLineEcho(t, addr, "")
			require.Equal(t, watch, <-flushed)
			if !watch { // the writer polls a while before the client reads
				require.Eventually(t, func() bool { return waits.Load() >= 10 }, 10*time.Second, time.Millisecond)
			}
			go func() { _, _ = io.Copy(io.Discard, br) }()
			require.NoError(t, <-done)
			want := map[string]bool{"return panicked=false": true}
			if watch {
				want["writable"] = true // in either order with the handler's return
			}
			for len(want) > 0 {
				select {
				case ev := <-e.events:
					require.True(t, want[ev], "unexpected %q", ev)
					delete(want, ev)
				case <-time.After(10 * time.Second):
					t.Fatalf("missing %v", want)
				}
			}
			mu.Lock()
			assert.Zero(t, most, "a Wait that timed out left its registration")
			mu.Unlock()
			_ = c.Close()
		})
	}
}

// TestTakeoverReleasesIdleOutput: the sweep gives back a taken connection's empty output
// buffer, so that an idle connection keeps none.
func TestTakeoverReleasesIdleOutput(t *testing.T) {
	e := newLineEcho(t)
	s, addr := lineEchoServer(t, Config{}, e, nil)
	c, br := dialLineEcho(t, addr, "")
	_, err := io.WriteString(c, strings.Repeat("y", 4000)+"\n")
	require.NoError(t, err)
	assert.Len(t, readLine(t, br), 4006)
	held := func() (n int) {
		inLoop(t, s, func() {
			for _, cs := range s.conns.all {
				if cs.raw != nil {
					n = cap(cs.out)
				}
			}
		})
		return n
	}
	require.Eventually(t, func() bool { return held() == 0 }, 10*time.Second, 5*time.Millisecond)
}

// TestTakeoverKeepsOutputWhileWritten: a taken connection the server writes to between
// sweeps (a room's state every tick) keeps its output buffer across the sweeps instead of
// making it again after each; once the writes stop, the sweep gives it back.
func TestTakeoverKeepsOutputWhileWritten(t *testing.T) {
	e := newLineEcho(t)
	// Sweeps every 10 ms (a quarter of the shortest timeout, at least 10 ms).
	s, addr := lineEchoServer(t, Config{ReadHeaderTimeout: 40 * time.Millisecond}, e, nil)
	c, br := dialLineEcho(t, addr, "")
	var rc *RawConn
	inLoop(t, s, func() {
		for _, cs := range s.conns.all {
			if cs.raw != nil {
				rc = cs.raw
			}
		}
	})
	require.NotNil(t, rc)
	go func() { _, _ = io.Copy(io.Discard, br) }() // reads the pushes
	bufs := map[*byte]bool{}                       // the output buffers the writes went into
	wroteIn := map[int]bool{}                      // the sweep intervals (by e.sweeps) with a write
	first := -1
	push := s.Loop(0).Every("push", time.Millisecond, func(*Task) {
		if first < 0 {
			first = e.sweeps
		}
		_, _ = rc.Write([]byte("state\n"))
		bufs[unsafe.SliceData(rc.cs.out)] = true
		wroteIn[e.sweeps] = true
	})
	require.Eventually(t, func() (done bool) {
		inLoop(t, s, func() { done = first >= 0 && e.sweeps >= first+10 })
		return done
	}, 10*time.Second, 5*time.Millisecond, "ten sweeps while pushing")
	push.Stop()
	inLoop(t, s, func() {
		// A sweep interval without a write (the pusher starved by a loaded machine) lets
		// the sweep give the buffer back: each such gap may cost one buffer more.
		gaps := 0
		for k := first + 1; k < e.sweeps; k++ {
			if !wroteIn[k] {
				gaps++
			}
		}
		assert.LessOrEqual(t, len(bufs), 1+gaps, "one output buffer through ten sweeps (%d without a write)", gaps)
		assert.Less(t, gaps, 5, "the pusher wrote in most sweep intervals")
	})
	require.Eventually(t, func() (released bool) {
		inLoop(t, s, func() { released = rc.cs.out == nil })
		return released
	}, 10*time.Second, 5*time.Millisecond, "given back once the pushes stopped")
	_ = c.Close()
}
