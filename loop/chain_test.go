package loop

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recConn is a fakeConn (bench_test.go) that keeps what the server writes and, once
// closed, panics when the server touches its input (a closed gnet.Conn must not be).
type recConn struct {
	fakeConn
	out    bytes.Buffer
	closed bool
}

func (r *recConn) Write(p []byte) (int, error) { r.out.Write(p); return len(p), nil }

func (r *recConn) InboundBuffered() int {
	if r.closed {
		panic("InboundBuffered on a closed connection")
	}
	return r.fakeConn.InboundBuffered()
}

func (r *recConn) Peek(n int) ([]byte, error) {
	if r.closed {
		panic("Peek on a closed connection")
	}
	return r.fakeConn.Peek(n)
}

// chainRig is a server without its gnet engine, fed by one recConn; the test's goroutine
// is its loop. Posted functions queue on the door (no engine to kick) until pumped.
type chainRig struct {
	s    *Server
	fc   *recConn
	recs []accounting.RequestRecord
}

func newChainRig(t *testing.T, cfg Config, routes func(s *Server)) *chainRig {
	t.Helper()
	r := &chainRig{}
	cfg.Logger = quietLogger(t)
	cfg.OnRequestDone = func(rec *accounting.RequestRecord) { r.recs = append(r.recs, *rec) }
	r.s = New(cfg)
	routes(r.s)
	t.Cleanup(r.s.sched.Close)
	r.fc = &recConn{}
	r.fc.SetContext(r.s.newConn(r.fc))
	return r
}

// read hands the server one read of in.
func (r *chainRig) read(in string) {
	r.fc.in, r.fc.off = []byte(in), 0
	(*events)(r.s).OnTraffic(r.fc)
}

// pumpUntil runs the door's batches (wakes, pumps) until n responses were written, or
// fails after a while.
func (r *chainRig) pumpUntil(t *testing.T, n int) []*http.Response {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if resps := r.responses(t); len(resps) >= n {
			return resps
		}
		require.False(t, time.Now().After(deadline), "timed out waiting for %d responses; got %q", n, r.fc.out.String())
		_ = r.s.runDoor()
		time.Sleep(time.Millisecond) // a goroutine's work (a multi-thread handler) finishes meanwhile
	}
}

// responses parses every complete response written so far.
func (r *chainRig) responses(t *testing.T) []*http.Response {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(r.fc.out.Bytes()))
	var out []*http.Response
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return out
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		out = append(out, resp)
	}
}

func bodyOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }

func echoRoutes(s *Server) {
	for _, p := range []string{"a", "b", "c", "d"} {
		s.Handle("GET /"+p, func(c *Ctx) { c.String(200, p) })
	}
}

// TestChainServesPipelinedBatchOnOneCoroutine: sixteen pipelined requests in one read are
// answered in order, each as a task of its own with one round, and all but the first ran
// from a chain (no switch back to serve in between).
func TestChainServesPipelinedBatchOnOneCoroutine(t *testing.T) {
	for _, acct := range []bool{true, false} {
		t.Run(map[bool]string{true: "acct=on", false: "acct=off"}[acct], func(t *testing.T) {
			r := newChainRig(t, Config{NoAccounting: !acct}, echoRoutes)
			paths := []string{"a", "b", "c", "d"}
			var in strings.Builder
			for i := range 16 {
				in.WriteString(get("/" + paths[i%4]))
			}
			r.read(in.String())
			resps := r.responses(t)
			require.Len(t, resps, 16)
			for i, resp := range resps {
				assert.Equal(t, 200, resp.StatusCode)
				assert.Equal(t, paths[i%4], bodyOf(t, resp), "response %d out of order", i)
			}
			assert.Equal(t, uint64(15), r.s.chaining.runs)
			require.Len(t, r.recs, 16)
			ids := map[uint64]bool{}
			for i, rec := range r.recs {
				assert.Equal(t, uint64(1), rec.Rounds, "request %d", i)
				assert.Equal(t, "GET /"+paths[i%4], rec.Route)
				assert.False(t, ids[rec.TaskID], "request %d reuses task id %d", i, rec.TaskID)
				ids[rec.TaskID] = true
				if acct {
					assert.Positive(t, rec.OnLoop, "request %d", i)
					assert.GreaterOrEqual(t, rec.Queue, time.Duration(0))
				}
			}
			assert.Equal(t, uint64(16), r.s.sched.Counters().Switches, "one slice per request")
			assert.Equal(t, 0, r.s.sched.Counters().Live)
			if acct {
				var count uint64
				for _, rs := range r.s.acct.routes.Snapshot(time.Now()) {
					count += rs.Count
				}
				assert.Equal(t, uint64(16), count, "every request in the route figures")
			}
		})
	}
}

// TestChainMiddleHandlerParks: the second request of a batch parks; the ones after it wait
// for it and are answered in order once it finishes; rounds stay per request.
func TestChainMiddleHandlerParks(t *testing.T) {
	var ev *Future[struct{}]
	r := newChainRig(t, Config{}, func(s *Server) {
		echoRoutes(s)
		ev = NewFuture[struct{}](s.loopRef)
		s.Handle("GET /wait", func(c *Ctx) {
			if _, err := ev.Await(c, 0); err != nil {
				c.String(500, err.Error())
				return
			}
			c.String(200, "waited")
		})
	})
	r.read(get("/a") + get("/wait") + get("/b") + get("/c"))
	resps := r.responses(t)
	require.Len(t, resps, 1, "only the request before the parked one is answered")
	assert.Equal(t, uint64(1), r.s.chaining.runs, "/a chained to /wait")
	live, _ := r.s.sched.Len()
	assert.Equal(t, 1, live)

	ev.Resolve(struct{}{}, nil)
	resps = r.pumpUntil(t, 4)
	require.Len(t, resps, 4)
	for i, want := range []string{"a", "waited", "b", "c"} {
		assert.Equal(t, 200, resps[i].StatusCode)
		assert.Equal(t, want, bodyOf(t, resps[i]))
	}
	// /wait finished in the pump's Run, not inside serve: it does not chain; serve then
	// dispatches /b, which chains to /c.
	assert.Equal(t, uint64(2), r.s.chaining.runs)
	require.Len(t, r.recs, 4)
	for i, want := range []uint64{1, 2, 1, 1} {
		assert.Equal(t, want, r.recs[i].Rounds, "request %d (%s)", i, r.recs[i].Path)
	}
	assert.Positive(t, r.recs[1].Parked, "the parked time is the parked request's")
	for _, i := range []int{0, 2, 3} {
		assert.Zero(t, r.recs[i].Parked, "request %d", i)
	}
}

// TestChainHandlerPanicsMidBatch: a handler in the middle of a chained batch panics: it
// is answered with 500, and the requests after it are still served, in order.
func TestChainHandlerPanicsMidBatch(t *testing.T) {
	r := newChainRig(t, Config{}, func(s *Server) {
		echoRoutes(s)
		s.Handle("GET /panic", func(*Ctx) { panic("boom") })
	})
	r.read(get("/a") + get("/panic") + get("/b") + get("/c") + get("/panic") + get("/d"))
	resps := r.responses(t)
	require.Len(t, resps, 6)
	for i, want := range []int{200, 500, 200, 200, 500, 200} {
		assert.Equal(t, want, resps[i].StatusCode, "response %d", i)
	}
	assert.Equal(t, "a", bodyOf(t, resps[0]))
	assert.Equal(t, "b", bodyOf(t, resps[2]))
	assert.Equal(t, "c", bodyOf(t, resps[3]))
	assert.Equal(t, "d", bodyOf(t, resps[5]))
	// a->panic, b->c->panic: a panicking task chains nothing; serve dispatches the next.
	assert.Equal(t, uint64(3), r.s.chaining.runs)
	assert.Equal(t, uint64(2), r.s.panics)
	require.Len(t, r.recs, 6)
	for i, rec := range r.recs {
		assert.Equal(t, uint64(1), rec.Rounds, "request %d", i)
	}
	assert.Equal(t, 0, r.s.sched.Counters().Live)
}

// TestChainStopsAtWhatNeedsServe: inline answers (404) are given inside a chain, and a
// request with a body, a head split across reads and a StreamBody route (whose task a
// chain queues rather than runs) stop it; everything is answered in order.
func TestChainStopsAtWhatNeedsServe(t *testing.T) {
	r := newChainRig(t, Config{}, func(s *Server) {
		echoRoutes(s)
		s.Handle("POST /echo", func(c *Ctx) { c.String(200, "echo:"+string(c.Body())) })
		s.Handle("POST /http", func(c *Ctx) {
			b, _ := io.ReadAll(c.BodyReader())
			c.String(200, "http:"+string(b))
		}, StreamBody())
	})
	post := func(path, body string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	r.read(get("/a") + get("/missing") + get("/b") + post("/echo", "hi") + get("/c") + post("/http", "yo") + get("/d"))
	resps := r.pumpUntil(t, 7)
	require.Len(t, resps, 7)
	want := []struct {
		code int
		body string
	}{{200, "a"}, {404, ""}, {200, "b"}, {200, "echo:hi"}, {200, "c"}, {200, "http:yo"}, {200, "d"}}
	for i, w := range want {
		assert.Equal(t, w.code, resps[i].StatusCode, "response %d", i)
		if w.body != "" {
			assert.Equal(t, w.body, bodyOf(t, resps[i]), "response %d", i)
		}
	}
	assert.Positive(t, r.s.chaining.runs)
	assert.Equal(t, 0, r.s.sched.Counters().Live)
}

// TestChainNotOnClosedConnection: the connection closes while a chained handler runs (gnet
// reported it): the chain stops without touching the connection (recConn panics if it
// is), the rest of the batch is dropped and so is the output gathered for the read.
func TestChainNotOnClosedConnection(t *testing.T) {
	var r *chainRig
	r = newChainRig(t, Config{}, func(s *Server) {
		echoRoutes(s)
		s.Handle("GET /close", func(c *Ctx) {
			r.fc.closed = true
			s.connClosed(c.conn)
			c.String(200, "closed")
		})
	})
	r.read(get("/a") + get("/close") + get("/b"))
	assert.Empty(t, r.responses(t), "nothing is written to a closed connection")
	assert.Equal(t, uint64(1), r.s.chaining.runs, "/a chained to /close, /close to nothing")
	require.Len(t, r.recs, 2, "/b was never parsed")
	assert.Zero(t, r.s.panics, "recConn panicked: the closed connection was touched")
	assert.Equal(t, 0, r.s.sched.Counters().Live)
}
