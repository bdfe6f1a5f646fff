package loop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mode is one of the two threading modes; the HTTP suite runs in both.
type mode struct {
	name  string
	multi bool
}

var modes = []mode{{"single-thread", false}, {"multi-thread", true}}

// cfg returns c in this mode.
func (m mode) cfg(c Config) Config {
	c.MultiThread = m.multi
	return c
}

// TestHTTPSuite runs the HTTP behaviour suite in single-thread and multi-thread mode.
func TestHTTPSuite(t *testing.T) {
	suite := []struct {
		name string
		fn   func(*testing.T, mode)
	}{
		{"BasicRoutes", testBasicRoutes},
		{"PipelinedInOrderWithParkedHandlers", testPipelinedInOrderWithParkedHandlers},
		{"ThousandConnectionsPipelining", testThousandConnectionsPipelining},
		{"ParkedTasksDoNotBlockOthers", testParkedTasksDoNotBlockOthers},
		{"HandlerPanicBecomes500", testHandlerPanicBecomes500},
		{"ClientDisconnectCancelsParkedTask", testClientDisconnectCancelsParkedTask},
		{"LateWriteNeverReachesAnotherClient", testLateWriteNeverReachesAnotherClient},
		{"SlowlorisIsClosedOthersServed", testSlowlorisIsClosedOthersServed},
		{"IdleTimeoutClosesConnection", testIdleTimeoutClosesConnection},
		{"MalformedRequestGets400AndOthersUnharmed", testMalformedRequestGets400AndOthersUnharmed},
		{"ConnectionSemantics", testConnectionSemantics},
		{"StreamChunked", testStreamChunked},
		{"BackgroundTasksAndPost", testBackgroundTasksAndPost},
		{"FutureBetweenTasks", testFutureBetweenTasks},
		{"GracefulShutdownAnswersInFlight", testGracefulShutdownAnswersInFlight},
		{"ShutdownDeadlineUnwindsParkedTasks", testShutdownDeadlineUnwindsParkedTasks},
		{"StreamBackpressure", testStreamBackpressure},
		{"AdmissionLimitAndQueue", testAdmissionLimitAndQueue},
		{"AdmissionQueuedClientLeaves", testAdmissionQueuedClientLeaves},
		{"HandlerTimeoutAnswers503", testHandlerTimeoutAnswers503},
		{"ClientNeverReads", testClientNeverReads},
		{"ManySlowloris", testManySlowloris},
		{"TenThousandPipelined", testTenThousandPipelined},
		{"AbruptCloseAndHugeClaims", testAbruptCloseAndHugeClaims},
		{"OffloadFromHandler", testOffloadFromHandler},
		{"GateAnswersBusy", testGateAnswersBusy},
		{"GracefulShutdownUnderLoad", testGracefulShutdownUnderLoad},
		{"ServerTimingHeader", testServerTimingHeader},
		{"QueueTimeIsRecorded", testQueueTimeIsRecorded},
		{"OffloadCopyStreams", testOffloadCopyStreams},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			for _, tc := range suite {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, m) })
			}
		})
	}
}

func testBasicRoutes(t *testing.T, m mode) {
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /hello", func(c *Ctx) { c.String(200, "Hello, World!") })
		s.Handle("GET /users/{id}", func(c *Ctx) { c.String(200, "user "+c.PathValue("id")+" q="+c.Query("q")) })
		s.Handle("POST /echo", func(c *Ctx) {
			b, _ := io.ReadAll(c.BodyReader())
			c.SetHeader("X-Len", strconv.Itoa(len(c.Body())))
			c.Bytes(201, "application/octet-stream", b)
		})
		s.Handle("GET /json", func(c *Ctx) { c.JSON(200, map[string]int{"n": 7}) })
		s.Handle("GET /files/{rest...}", func(c *Ctx) { c.String(200, c.PathValue("rest")) })
		s.Handle("GET /nowrite", func(c *Ctx) {})
		s.Handle("GET /hdr", func(c *Ctx) { c.String(200, c.Header("x-test")+"|"+c.Method()+"|"+c.Path()+"|"+c.RawQuery()) })
	})
	c := dial(t, addr)

	resp, body := c.get("/hello")
	mustStatus(t, resp, 200)
	if body != "Hello, World!" || resp.ContentLength != 13 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("hello: %q %d %q", body, resp.ContentLength, resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("Date") == "" {
		t.Fatal("no Date header")
	}
	if _, err := time.Parse(time.RFC1123, resp.Header.Get("Date")); err != nil {
		t.Fatalf("bad Date %q: %v", resp.Header.Get("Date"), err)
	}

	resp, body = c.get("/users/42?q=x%20y")
	mustStatus(t, resp, 200)
	if body != "user 42 q=x y" {
		t.Fatalf("params: %q", body)
	}

	resp, body = c.get("/files/a/b/c.txt")
	mustStatus(t, resp, 200)
	if body != "a/b/c.txt" {
		t.Fatalf("wildcard: %q", body)
	}

	resp, _ = c.get("/nope")
	mustStatus(t, resp, 404)

	c.send("DELETE /hello HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _ = c.read("DELETE")
	mustStatus(t, resp, 405)
	if got := resp.Header.Get("Allow"); got != "GET, HEAD" {
		t.Fatalf("Allow %q", got)
	}

	c.send("HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body = c.read("HEAD")
	mustStatus(t, resp, 200)
	if body != "" || resp.ContentLength != 13 {
		t.Fatalf("HEAD: body %q len %d", body, resp.ContentLength)
	}

	c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	resp, body = c.read("POST")
	mustStatus(t, resp, 201)
	if body != "hello" || resp.Header.Get("X-Len") != "5" {
		t.Fatalf("echo: %q %q", body, resp.Header.Get("X-Len"))
	}

	c.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
	resp, body = c.read("POST")
	mustStatus(t, resp, 201)
	if body != "abcdefg" {
		t.Fatalf("chunked echo: %q", body)
	}

	resp, body = c.get("/json")
	mustStatus(t, resp, 200)
	if strings.TrimSpace(body) != `{"n":7}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("json: %q", body)
	}

	resp, body = c.get("/nowrite")
	mustStatus(t, resp, 200)
	if body != "" || resp.ContentLength != 0 {
		t.Fatalf("no-write default: %q %d", body, resp.ContentLength)
	}

	c.send("GET /hdr?a=1 HTTP/1.1\r\nHost: x\r\nX-Test: yes\r\n\r\n")
	_, body = c.read("GET")
	if body != "yes|GET|/hdr|a=1" {
		t.Fatalf("request accessors: %q", body)
	}
}

func testPipelinedInOrderWithParkedHandlers(t *testing.T, m mode) {
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /n/{i}", func(c *Ctx) {
			i, _ := strconv.Atoi(c.PathValue("i"))
			if i%3 == 0 {
				_ = c.Sleep(time.Duration(i%5) * time.Millisecond) // parks: later requests must wait
			}
			c.String(200, c.PathValue("i"))
		})
	})
	c := dial(t, addr)
	var sb strings.Builder
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&sb, "GET /n/%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	c.send(sb.String())
	for i := 0; i < 30; i++ {
		resp, body := c.read("GET")
		mustStatus(t, resp, 200)
		if body != strconv.Itoa(i) {
			t.Fatalf("response %d has body %q", i, body)
		}
	}
}

// 1,000 concurrent keep-alive connections, each pipelining 20 requests, all answered
// correctly and in order.
func testThousandConnectionsPipelining(t *testing.T, m mode) {
	const conns, perConn = 1000, 20
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /c/{conn}/{i}", func(c *Ctx) {
			c.String(200, c.PathValue("conn")+":"+c.PathValue("i"))
		})
	})
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for k := 0; k < conns; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			errs <- pipelineOnce(addr, k, perConn)
		}(k)
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			if failed < 5 {
				t.Error(err)
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d connections failed", failed, conns)
	}
}

func pipelineOnce(addr string, k, n int) error {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "GET /c/%d/%d HTTP/1.1\r\nHost: x\r\n\r\n", k, i)
	}
	if _, err := io.WriteString(nc, sb.String()); err != nil {
		return err
	}
	c := &client{c: nc, br: newReader(nc)}
	for i := 0; i < n; i++ {
		resp, body, err := c.tryRead("GET")
		if err != nil {
			return fmt.Errorf("conn %d response %d: %v", k, i, err)
		}
		if want := fmt.Sprintf("%d:%d", k, i); resp.StatusCode != 200 || body != want {
			return fmt.Errorf("conn %d response %d: %d %q, want %q", k, i, resp.StatusCode, body, want)
		}
	}
	return nil
}

// Handlers on many connections mutate one plain map and counter with parks in between:
// no lock, no race report, exact count.
func TestLockFreeSharedState(t *testing.T) {
	const conns, perConn = 50, 40
	counts := map[string]int{}
	total := 0
	_, addr := startServer(t, Config{}, func(s *Server) { // single-thread mode only: no lock
		s.Handle("POST /inc/{key}", func(c *Ctx) {
			k := c.PathValue("key")
			v := counts[k]
			if total%7 == 0 {
				_ = c.Sleep(0) // another task may run here; the read-modify-write still must not race
			}
			counts[k] = v + 1
			total++
			c.Bytes(204, "", nil)
		})
		s.Handle("GET /total", func(c *Ctx) {
			sum := 0
			for _, v := range counts {
				sum += v
			}
			c.String(200, fmt.Sprintf("%d %d %d", total, sum, len(counts)))
		})
	})
	var wg sync.WaitGroup
	for k := 0; k < conns; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			c := dial(t, addr)
			for i := 0; i < perConn; i++ {
				c.send(fmt.Sprintf("POST /inc/k%d HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", k))
				resp, _ := c.read("POST")
				if resp.StatusCode != 204 {
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}(k)
	}
	wg.Wait()
	_, body := dial(t, addr).get("/total")
	if want := fmt.Sprintf("%d %d %d", conns*perConn, conns*perConn, conns); body != want {
		t.Fatalf("got %q, want %q", body, want)
	}
}

// With 500 tasks parked (waiting for an event), a fast request on another connection is
// answered while they are all still parked; then the event releases them all.
func testParkedTasksDoNotBlockOthers(t *testing.T, m mode) {
	const sleepers = 500
	var parked, woke atomic.Int32 // atomics: the suite also runs in multi-thread mode
	var release *Future[struct{}]
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		release = NewFuture[struct{}](s.loopRef)
		s.Handle("GET /sleep", func(c *Ctx) {
			parked.Add(1)
			_, err := release.Await(c, time.Minute)
			parked.Add(-1)
			woke.Add(1)
			if err != nil {
				c.String(500, err.Error())
				return
			}
			c.String(200, "slept")
		})
		s.Handle("GET /parked", func(c *Ctx) { c.String(200, fmt.Sprintf("%d %d", parked.Load(), woke.Load())) })
		s.Handle("POST /release", func(c *Ctx) { release.Resolve(struct{}{}, nil); c.Bytes(204, "", nil) })
	})
	clients := make([]*client, sleepers)
	for i := range clients {
		clients[i] = dial(t, addr)
		clients[i].send("GET /sleep HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	fast := dial(t, addr)
	// Wait until every sleeper is parked: the fast requests are answered meanwhile.
	require.Eventually(t, func() bool {
		resp, body := fast.get("/parked")
		require.Equal(t, 200, resp.StatusCode)
		require.True(t, strings.HasSuffix(body, " 0"), "a sleeper woke before the release: %q", body)
		return body == fmt.Sprintf("%d 0", sleepers)
	}, 20*time.Second, time.Millisecond)
	fast.send("POST /release HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	resp, _ := fast.read("POST")
	require.Equal(t, 204, resp.StatusCode)
	for _, c := range clients {
		resp, body := c.read("GET")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "slept", body)
	}
	_, body := fast.get("/parked")
	require.Equal(t, fmt.Sprintf("0 %d", sleepers), body)
}

func testHandlerPanicBecomes500(t *testing.T, m mode) {
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /boom", func(c *Ctx) { panic("boom") })
		s.Handle("GET /boom-parked", func(c *Ctx) {
			_ = c.Sleep(time.Millisecond)
			var none []int
			_ = none[len(c.Path())] // runtime panic (index out of range) after a park
		})
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	c := dial(t, addr)
	for _, p := range []string{"/boom", "/boom-parked"} {
		resp, body := c.get(p)
		mustStatus(t, resp, 500)
		if !strings.Contains(body, "Internal Server Error") {
			t.Fatalf("body %q", body)
		}
		// The same connection and the loop keep working.
		resp, body = c.get("/ok")
		mustStatus(t, resp, 200)
		if body != "ok" {
			t.Fatalf("after panic: %q", body)
		}
	}
	resp, _ := dial(t, addr).get("/ok")
	mustStatus(t, resp, 200)
}

// A client that disconnects while its task is parked cancels the task's context, wakes the
// task with context.Canceled, and the task's later write goes nowhere.
func testClientDisconnectCancelsParkedTask(t *testing.T, m mode) {
	parkedc := make(chan struct{}, 1)
	result := make(chan string, 1)
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /wait", func(c *Ctx) {
			ctx := c.Context()
			parkedc <- struct{}{}
			err := c.Sleep(30 * time.Second)
			result <- fmt.Sprintf("%v|%v|%v", err, ctx.Err(), c.Err())
			c.String(200, "too late") // must go nowhere
		})
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	c := dial(t, addr)
	c.send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	<-parkedc
	_ = c.c.Close()
	select {
	case r := <-result:
		want := "context canceled|context canceled|context canceled"
		if r != want {
			t.Fatalf("got %q, want %q", r, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("parked task was not woken by the disconnect")
	}
	resp, body := dial(t, addr).get("/ok")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("server after disconnect: %d %q", resp.StatusCode, body)
	}
}

// A late write from a task whose client left must never reach a new client that got the
// same file descriptor.
func testLateWriteNeverReachesAnotherClient(t *testing.T, m mode) {
	parkedc := make(chan struct{}, 16)
	var bArrived atomic.Bool
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /late", func(c *Ctx) {
			bArrived.Store(false)
			parkedc <- struct{}{}
			for !bArrived.Load() { // ignores cancellation on purpose: keeps going until B is here
				_ = c.Sleep(0)
			}
			c.String(200, "SECRET-FOR-A")
		})
		s.Handle("GET /b", func(c *Ctx) {
			bArrived.Store(true)
			_ = c.Sleep(50 * time.Millisecond)
			c.String(200, "for-b")
		})
	})
	for round := 0; round < 5; round++ {
		a := dial(t, addr)
		a.send("GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
		<-parkedc
		_ = a.c.Close()
		time.Sleep(20 * time.Millisecond) // let the server see A go, so B may get its fd
		b := dial(t, addr)
		b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := b.read("GET")
		if resp.StatusCode != 200 || body != "for-b" {
			t.Fatalf("B got %d %q", resp.StatusCode, body)
		}
		_ = b.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		extra, _ := io.ReadAll(b.br)
		if len(extra) > 0 {
			t.Fatalf("B received bytes meant for A: %q", extra)
		}
		_ = b.c.Close()
	}
}

func testSlowlorisIsClosedOthersServed(t *testing.T, m mode) {
	_, addr := startServer(t, m.cfg(Config{ReadHeaderTimeout: 300 * time.Millisecond}), func(s *Server) {
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	slow := dial(t, addr)
	done := make(chan struct{})
	go func() { // trickle a header byte every 20 ms, forever
		defer close(done)
		req := "GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1000)
		for i := 0; i < len(req); i++ {
			if _, err := slow.c.Write([]byte{req[i]}); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	normal := dial(t, addr)
	for i := 0; i < 5; i++ {
		resp, body := normal.get("/ok")
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("normal client: %d %q", resp.StatusCode, body)
		}
	}
	resp, _, err := slow.tryRead("GET")
	if err == nil && resp.StatusCode != 408 {
		t.Fatalf("slowloris got %d, want 408 or a closed connection", resp.StatusCode)
	}
	slow.expectClosed(5 * time.Second)
	<-done
	resp, _ = normal.get("/ok")
	mustStatus(t, resp, 200)
}

func testIdleTimeoutClosesConnection(t *testing.T, m mode) {
	_, addr := startServer(t, m.cfg(Config{IdleTimeout: 200 * time.Millisecond}), func(s *Server) {
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	c := dial(t, addr)
	resp, _ := c.get("/ok")
	mustStatus(t, resp, 200)
	c.expectClosed(5 * time.Second)
}

func testMalformedRequestGets400AndOthersUnharmed(t *testing.T, m mode) {
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	other := dial(t, addr)
	other.send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	bad := dial(t, addr)
	// A good request, then garbage on the same connection: the first is answered, then 400.
	bad.send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /ok HTTP/1.1\r\nHost x\r\n\r\n")
	resp, body := bad.read("GET")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("first: %d %q", resp.StatusCode, body)
	}
	resp, _ = bad.read("GET")
	mustStatus(t, resp, 400)
	if !resp.Close {
		t.Fatal("400 without Connection: close")
	}
	bad.expectClosed(5 * time.Second)
	resp, body = other.read("GET")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("other: %d %q", resp.StatusCode, body)
	}
	resp, _ = other.get("/ok")
	mustStatus(t, resp, 200)

	c := dial(t, addr)
	c.send("GET /ok HTTP/1.1\r\n\r\n") // HTTP/1.1 without Host
	resp, _ = c.read("GET")
	mustStatus(t, resp, 400)
	c = dial(t, addr)
	c.send("GET /ok HTTP/2.0\r\nHost: x\r\n\r\n")
	resp, _ = c.read("GET")
	mustStatus(t, resp, 505)
}

func testConnectionSemantics(t *testing.T, m mode) {
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
		s.Handle("POST /up", func(c *Ctx) { c.String(200, strconv.Itoa(len(c.Body()))) })
	})
	// HTTP/1.0 without keep-alive: answered, then closed.
	c := dial(t, addr)
	c.send("GET /ok HTTP/1.0\r\n\r\n")
	resp, body := c.read("GET")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("1.0: %d %q", resp.StatusCode, body)
	}
	c.expectClosed(5 * time.Second)

	// HTTP/1.0 with keep-alive: stays open.
	c = dial(t, addr)
	for i := 0; i < 2; i++ {
		c.send("GET /ok HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
		resp, _ = c.read("GET")
		mustStatus(t, resp, 200)
		if resp.Header.Get("Connection") != "keep-alive" {
			t.Fatalf("1.0 keep-alive answer has Connection %q", resp.Header.Get("Connection"))
		}
	}

	// Connection: close on 1.1.
	c = dial(t, addr)
	c.send("GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, _ = c.read("GET")
	if !resp.Close {
		t.Fatal("no Connection: close in the answer")
	}
	c.expectClosed(5 * time.Second)

	// Expect: 100-continue: the interim answer comes before the body is sent.
	c = dial(t, addr)
	c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("interim: %q %v", line, err)
	}
	if l, _ := c.br.ReadString('\n'); l != "\r\n" {
		t.Fatalf("interim end: %q", l)
	}
	c.send("abcd")
	resp, body = c.read("POST")
	if resp.StatusCode != 200 || body != "4" {
		t.Fatalf("after continue: %d %q", resp.StatusCode, body)
	}

	// A declared body over the limit is refused before it is sent.
	s2, addr2 := startServer(t, m.cfg(Config{}), nil)
	_ = s2
	c = dial(t, addr2)
	c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n")
	resp, _ = c.read("POST")
	mustStatus(t, resp, 413)
}

func testStreamChunked(t *testing.T, m mode) {
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /stream", func(c *Ctx) {
			w := c.Stream(200, "text/plain")
			for i := 0; i < 5; i++ {
				fmt.Fprintf(w, "part%d;", i)
				_ = c.Sleep(time.Millisecond)
			}
			big := strings.Repeat("x", 100<<10)
			_, _ = w.Write([]byte(big))
		})
	})
	c := dial(t, addr)
	resp, body := c.get("/stream")
	mustStatus(t, resp, 200)
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("transfer encoding %v", resp.TransferEncoding)
	}
	if want := "part0;part1;part2;part3;part4;" + strings.Repeat("x", 100<<10); body != want {
		t.Fatalf("stream body: %d bytes, prefix %q", len(body), body[:min(40, len(body))])
	}
	resp, _ = c.get("/stream") // connection still usable
	mustStatus(t, resp, 200)
}

func testBackgroundTasksAndPost(t *testing.T, m mode) {
	var ticks atomic.Int32
	var fromGo atomic.Value
	fromGo.Store("")
	s, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Loop(0).Every("ticker", 5*time.Millisecond, func(t *Task) { ticks.Add(1) })
		s.Loop(0).Go("once", func(t *Task) {
			_ = t.Sleep(time.Millisecond)
			fromGo.Store("ran")
		})
		s.Handle("GET /state", func(c *Ctx) { c.String(200, fmt.Sprintf("%d %s", ticks.Load(), fromGo.Load())) })
	})
	// Post from another goroutine: the only door into the loop.
	var posted atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Loop(0).Post(func() { posted.Add(1) }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	c := dial(t, addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := c.get("/state")
		var n int
		var g string
		fmt.Sscanf(body, "%d %s", &n, &g)
		if n >= 3 && g == "ran" && posted.Load() == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %q, posted %d", body, posted.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testFutureBetweenTasks(t *testing.T, m mode) {
	var mu sync.Mutex // uncontended in single-thread mode; needed in multi-thread mode
	var waiting *Future[string]
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /match/wait", func(c *Ctx) {
			mu.Lock()
			if waiting == nil {
				waiting = NewFuture[string](c.Loop())
			}
			f := waiting
			mu.Unlock()
			v, err := f.Await(c, 0)
			if err != nil {
				c.String(499, err.Error())
				return
			}
			c.String(200, v)
		})
		s.Handle("GET /match/make", func(c *Ctx) {
			mu.Lock()
			f := waiting
			waiting = nil
			mu.Unlock()
			if f == nil {
				c.String(409, "nobody waiting")
				return
			}
			f.Resolve("matched", nil)
			c.String(200, "ok")
		})
	})
	w := dial(t, addr)
	w.send("GET /match/wait HTTP/1.1\r\nHost: x\r\n\r\n")
	mk := dial(t, addr)
	for {
		resp, _ := mk.get("/match/make")
		if resp.StatusCode == 200 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	resp, body := w.read("GET")
	if resp.StatusCode != 200 || body != "matched" {
		t.Fatalf("waiter got %d %q", resp.StatusCode, body)
	}
}

// Graceful shutdown with work in flight: every accepted request is answered, with
// Connection: close, ListenAndServe returns ErrServerClosed, no goroutine is left. The
// handlers stay parked until the test has seen the drain begin (the idle connection
// closed), so they are in flight when it begins however slowly the machine runs, and the
// drain must wait for them.
func testGracefulShutdownAnswersInFlight(t *testing.T, m mode) {
	const n = 50
	var parked atomic.Int32
	s := New(m.cfg(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)}))
	allParked := make(chan struct{})
	release := NewFuture[struct{}](s.loopRef) // set once the drain has begun
	s.Handle("GET /slow", func(c *Ctx) {
		if parked.Add(1) == n {
			close(allParked)
		}
		_, _ = release.Await(c, 0)
		c.String(200, "done")
	})
	s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	errc := serveInBackground(t, s)
	t.Cleanup(func() { // a failed test does not leave the server running
		release.Resolve(struct{}{}, nil)
		_ = s.Close()
	})
	addr := s.Addr().String()
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = dial(t, addr)
		clients[i].send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	idle := dial(t, addr)
	resp, _ := idle.get("/ok")
	mustStatus(t, resp, 200)
	<-allParked

	shutdownErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shutdownErr <- s.Shutdown(ctx)
	}()
	// The idle connection is closed by the shutdown: the drain has begun.
	idle.expectClosed(20 * time.Second)
	release.Resolve(struct{}{}, nil)
	for i, c := range clients {
		resp, body := c.read("GET")
		require.Equal(t, 200, resp.StatusCode, "in-flight %d", i)
		require.Equal(t, "done", body, "in-flight %d", i)
		require.True(t, resp.Close, "in-flight %d: answer during drain lacks Connection: close", i)
	}
	require.NoError(t, <-shutdownErr, "Shutdown")
	require.ErrorIs(t, <-errc, ErrServerClosed, "ListenAndServe")
	rep := s.DrainReport()
	require.Equal(t, n, rep.InFlight, "drain report %+v", rep)
	require.Equal(t, 1, rep.ClosedIdle, "drain report %+v", rep)
	require.False(t, rep.DeadlineReached, "drain report %+v", rep)
	require.Zero(t, rep.ForcedTasks, "drain report %+v", rep)
	require.ErrorIs(t, s.Loop(0).Post(func() {}), ErrServerClosed, "Post after stop")
}

func testShutdownDeadlineUnwindsParkedTasks(t *testing.T, m mode) {
	s := New(m.cfg(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)}))
	parked := make(chan struct{}, 1)
	unwound := make(chan struct{}, 1)
	s.Handle("GET /forever", func(c *Ctx) {
		defer func() { unwound <- struct{}{} }()
		parked <- struct{}{}
		if m.multi {
			// A goroutine cannot be unwound: a multi-thread handler must honour its context.
			for c.Sleep(time.Hour) == nil {
			}
			return
		}
		for {
			c.Task.t.Sleep(time.Hour) //nolint:errcheck // ignores cancellation on purpose
		}
	})
	errc := serveInBackground(t, s)
	c := dial(t, s.Addr().String())
	c.send("GET /forever HTTP/1.1\r\nHost: x\r\n\r\n")
	<-parked
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v", err)
	}
	<-unwound
	if err := <-errc; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("ListenAndServe: %v", err)
	}
	if rep := s.DrainReport(); !rep.DeadlineReached || rep.ForcedTasks != 1 {
		t.Fatalf("drain report %+v", rep)
	}
	c.expectClosed(5 * time.Second)
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	err := (Config{Addr: "nope"}).Validate()
	if err == nil || !strings.Contains(err.Error(), "Config.Addr") {
		t.Fatalf("bad addr: %v", err)
	}
	s := New(Config{})
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown of a never-started server: %v", err)
	}
	if err := s.ListenAndServe(); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("ListenAndServe after Shutdown: %v", err)
	}
}

// A client that stops reading makes a streaming handler park on write backpressure
// instead of buffering without bound; once the client reads, the whole body arrives. The
// client's receive buffer is small and the body large, so the backlog passes the high-water
// mark whatever the kernel's buffer autotuning does; the client reads only once the
// connection's output has backed up past it.
func testStreamBackpressure(t *testing.T, m mode) { streamBackpressure(t, m, nil) }

// streamBackpressure is testStreamBackpressure on a server that setup (if not nil) has
// prepared before the route is added; it returns the server for further checks.
func streamBackpressure(t *testing.T, m mode, setup func(*Server)) *Server {
	const total = 16 << 20
	var written atomic.Int64
	parkedWrite := make(chan time.Duration, 1)
	s, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		if setup != nil {
			setup(s)
		}
		s.Handle("GET /big", bigStream(total, &written, func(c *Ctx) {
			parkedWrite <- c.Stats().Parked.Write
		}))
	})
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
	}}
	nc, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	c := &client{t: t, c: nc, br: newReader(nc)}
	c.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	waitHeldBack(t, s) // read nothing until then
	require.Less(t, written.Load(), int64(total), "the whole body fit in the socket buffers")
	resp, body := c.read("GET")
	mustStatus(t, resp, 200)
	require.Equal(t, total, len(body))
	require.Equal(t, total, strings.Count(body, "z"))
	require.Positive(t, <-parkedWrite, "the handler never parked on write backpressure")
	return s
}

// bigStream streams total bytes of 'z' in 64 KiB writes, counting them in written, then
// calls done (on the handler's task).
func bigStream(total int64, written *atomic.Int64, done func(c *Ctx)) HandlerFunc {
	return func(c *Ctx) {
		w := c.Stream(200, "application/octet-stream")
		chunk := []byte(strings.Repeat("z", 64<<10))
		for sent := int64(0); sent < total; sent += int64(len(chunk)) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			written.Add(int64(len(chunk)))
		}
		done(c)
	}
}

// waitHeldBack waits until a bigStream handler of s is held back by a client that does not
// read: its connection's unsent output has passed the high-water mark, above which a
// streaming write parks until the socket drains (in both modes). It waits for that
// condition, not for a pause in the handler's progress: on a loaded machine the handler
// can pause long before the socket's buffers are full.
func waitHeldBack(t *testing.T, s *Server) {
	t.Helper()
	require.Eventually(t, func() bool { return maxBacklog(s) > streamHighWater },
		20*time.Second, 5*time.Millisecond, "no connection's output backed up past the high-water mark")
}

// maxBacklog returns the largest unsent output (gnet's buffer and the loop's gathered
// bytes) over the open connections of s, read on the loop; -1 once the loop has stopped.
func maxBacklog(s *Server) int {
	got := make(chan int, 1)
	if s.Loop(0).Post(func() {
		most := 0
		for _, cs := range s.conns.all {
			if cs.writable() {
				most = max(most, cs.gc.OutboundBuffered()+len(cs.out))
			}
		}
		got <- most
	}) != nil {
		return -1
	}
	select {
	case n := <-got:
		return n
	case <-s.door.gone:
		return -1
	}
}

// Graceful shutdown under a steady stream of requests from 200 connections: every request
// the server read got a complete response (200 or 503), and no connection was reset.
func testGracefulShutdownUnderLoad(t *testing.T, m mode) {
	const conns = 200
	s := New(m.cfg(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)}))
	s.Handle("GET /work", func(c *Ctx) {
		_ = c.Sleep(2 * time.Millisecond)
		c.String(200, "ok")
	})
	errc := serveInBackground(t, s)
	addr := s.Addr().String()
	var ok200, got503, eofBeforeAnswer, resets atomic.Int64
	var wg sync.WaitGroup
	started := make(chan struct{}, conns)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			c := &client{t: t, c: nc, br: newReader(nc)}
			first := true
			for {
				_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
				if _, err := io.WriteString(nc, "GET /work HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
					if isReset(err) {
						resets.Add(1)
					}
					return
				}
				resp, _, err := c.tryRead("GET")
				if err != nil {
					if isReset(err) {
						resets.Add(1)
					} else {
						eofBeforeAnswer.Add(1)
					}
					return
				}
				if first {
					started <- struct{}{}
					first = false
				}
				switch resp.StatusCode {
				case 200:
					ok200.Add(1)
					if resp.Close {
						return // the server announced the close: a well-behaved client stops
					}
				case 503:
					got503.Add(1)
					return // Connection: close
				default:
					t.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	for i := 0; i < conns; i++ {
		<-started
	}
	time.Sleep(100 * time.Millisecond) // steady state
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	wg.Wait()
	if err := <-errc; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("ListenAndServe: %v", err)
	}
	answered := ok200.Load() + got503.Load()
	t.Logf("200: %d, 503: %d, closed before an answer (request not read): %d, resets: %d, parsed by the server: %d",
		ok200.Load(), got503.Load(), eofBeforeAnswer.Load(), resets.Load(), s.parsed)
	if resets.Load() != 0 {
		t.Fatalf("%d connections were reset", resets.Load())
	}
	if uint64(answered) != s.parsed {
		t.Fatalf("the server read %d requests but %d got a complete response", s.parsed, answered)
	}
	if ok200.Load() == 0 {
		t.Fatal("no request succeeded before the shutdown")
	}
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// TestCloseWarnsOfAbandonedGoroutinesOnlyWhenThereAreSome: Close is a shutdown whose
// context has already ended, so handler goroutines still running are abandoned and
// logged. A server that has none logs nothing: the warning used to come whenever the
// goroutine that watches them had not been scheduled yet, i.e. on most Closes.
func TestCloseWarnsOfAbandonedGoroutinesOnlyWhenThereAreSome(t *testing.T) {
	start := func() (*Server, *syncBuffer, <-chan error) {
		logs := &syncBuffer{}
		s := New(Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		return s, logs, serveInBackground(t, s)
	}
	for range 20 {
		s, logs, errc := start()
		require.NoError(t, s.Close())
		require.Equal(t, ErrServerClosed, <-errc)
		require.NotContains(t, logs.String(), "abandoned", "no handler goroutine ran")
	}

	s, logs, errc := start()
	release := make(chan struct{})
	s.RunOffLoop(func() { <-release }) // ignores every context
	require.NoError(t, s.Close())
	require.Equal(t, ErrServerClosed, <-errc)
	assert.Contains(t, logs.String(), "abandoned", "a goroutine still running at the deadline")
	close(release)
}
