package loop

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordedLatencies collects what the server records per request (Config.OnRequestDone),
// by path, for comparison with what the client measured. Safe for concurrent use.
type recordedLatencies struct {
	mu  sync.Mutex
	got map[string]time.Duration
}

func (r *recordedLatencies) hook(rec *accounting.RequestRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[rec.Path] = rec.Latency
}

// wait returns the latency recorded for path, waiting for the record: it is made at the
// end of the handler's slice, which may follow the response on the wire.
func (r *recordedLatencies) wait(t *testing.T, path string) time.Duration {
	t.Helper()
	var d time.Duration
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		var ok bool
		d, ok = r.got[path]
		return ok
	}, 10*time.Second, time.Millisecond, "no record for %s", path)
	return d
}

// timedGet sends one GET for path on br/conn and returns the response status and the
// time the client waited for it, from the write to the body's end.
func timedGet(t *testing.T, conn net.Conn, br *bufio.Reader, path string) time.Duration {
	t.Helper()
	start := time.Now()
	_, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	var body [64]byte
	_, _ = resp.Body.Read(body[:])
	_ = resp.Body.Close()
	took := time.Since(start)
	require.Equal(t, 200, resp.StatusCode)
	return took
}

// notAbove reports whether the server's recorded latency is at most 2 ms or 20% above
// what the client measured (the bar). Only this side is held here: the client's
// own scheduling on a loaded machine adds to its figure what no server can see
// (TestArrivalLatencyUnderHog holds the other side, that a hold shows on the route).
func notAbove(recorded, client time.Duration) bool {
	return recorded <= client+max(client/5, 2*time.Millisecond)
}

// TestLatencyAfterLongNiceHold (issue 27, item 1): a handler holds the loop for a second
// in 10 ms slices with a Yield between them (examples/utilization's nice /block); once it
// has finished, requests on fresh connections, 150 ms apart, must not be recorded more
// than 2 ms or 20% above the latency their client saw. Before the fix they were recorded from the start of the hold's
// run of long callbacks: 1.1 s and more against a client's few milliseconds.
func TestLatencyAfterLongNiceHold(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			rec := &recordedLatencies{got: map[string]time.Duration{}}
			_, addr := startServer(t, Config{MultiThread: mt, StallThreshold: -1, OnRequestDone: rec.hook}, func(s *Server) {
				s.Handle("GET /block", func(c *Ctx) {
					for i := range 100 { // 1 s in 10 ms slices
						if i > 0 {
							_ = c.Sleep(0)
						}
						spinFor(10 * time.Millisecond)
					}
					c.String(200, "held")
				})
				for i := range 4 {
					s.Handle(fmt.Sprintf("GET /probe%d", i), func(c *Ctx) { c.String(200, "ok") })
				}
			})
			resp, err := http.Get("http://" + addr + "/block")
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)

			for i := range 4 {
				time.Sleep(150 * time.Millisecond) // pacing after the hold, as in the report; nothing is ordered by it
				conn, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				client := timedGet(t, conn, bufio.NewReader(conn), fmt.Sprintf("/probe%d", i))
				_ = conn.Close()
				recorded := rec.wait(t, fmt.Sprintf("/probe%d", i))
				t.Logf("request %d after the hold: client %v, recorded %v", i, client, recorded)
				assert.True(t, notAbove(recorded, client), "request %d: recorded %v, client saw %v", i, recorded, client)
			}
		})
	}
}

// keepAliveAttempts bounds the measurements TestKeepAliveLatencyExcludesIdleGap makes: on
// a machine whose cores are taken by other work the loop's thread is descheduled inside
// callbacks, which makes them long, and a request read just after one is bounded by its
// start (the bound's documented error, a long callback above the truth); an attempt that
// met too many is repeated. With the idle gap carried, every request of every attempt is
// off by the whole gap.
const keepAliveAttempts = 3

// TestKeepAliveLatencyExcludesIdleGap (issue 27, item 6): with a room-like task ticking
// (1 ms of CPU every 20 ms) after a nice hold, a keep-alive client sends a request every
// 60 ms; none may be recorded with the idle time since the connection's previous request.
// Before the fix every one was (about 40 ms against a client's 0.1-2 ms with a 40 ms gap):
// the ticks kept extending the hold's run of long callbacks, and the connection's previous
// read became the bound. A request read just after a long callback is bounded by its start
// (or the long callback's before it): at most two long callbacks above the truth. So the
// median must meet the bar (2 ms or 20% above the client's), and at most 2 of 20
// requests may be recorded more than half the gap above their client's figure.
func TestKeepAliveLatencyExcludesIdleGap(t *testing.T) {
	const tick, gap, n = time.Millisecond, 60 * time.Millisecond, 20
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			rec := &recordedLatencies{got: map[string]time.Duration{}}
			s, addr := startServer(t, Config{MultiThread: mt, StallThreshold: -1, OnRequestDone: rec.hook}, func(s *Server) {
				s.Handle("GET /block", func(c *Ctx) {
					for i := range 30 { // 300 ms in 10 ms slices
						if i > 0 {
							_ = c.Sleep(0)
						}
						spinFor(10 * time.Millisecond)
					}
					c.String(200, "held")
				})
				s.Handle("GET /ka/{n}", func(c *Ctx) { c.String(200, "ok") })
			})
			ticking := s.Loop(0).Every("room:ticking", 20*time.Millisecond, func(*Task) { spinFor(tick) })
			defer ticking.Stop()

			conn, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer func() { _ = conn.Close() }()
			br := bufio.NewReader(conn)
			ok := false
			for attempt := 0; attempt < keepAliveAttempts && !ok; attempt++ {
				timedGet(t, conn, br, "/block")
				var clients, records []time.Duration
				carried := 0
				for i := range n {
					time.Sleep(gap) // the keep-alive connection's idle gap
					path := fmt.Sprintf("/ka/%d-%d", attempt, i)
					client := timedGet(t, conn, br, path)
					recorded := rec.wait(t, path)
					clients, records = append(clients, client), append(records, recorded)
					if recorded >= client+gap/2 {
						carried++
						t.Logf("attempt %d, request %d: recorded %v, client saw %v", attempt, i, recorded, client)
					}
				}
				slices.Sort(clients)
				slices.Sort(records)
				t.Logf("attempt %d: median client %v, recorded %v; max client %v, recorded %v; %d of %d recorded over half the gap above the client",
					attempt, clients[n/2], records[n/2], clients[n-1], records[n-1], carried, n)
				ok = notAbove(records[n/2], clients[n/2]) && carried <= 2
			}
			assert.True(t, ok, "in %d attempts, the median was never within 2 ms or 20%% above the client's with at most 2 requests carrying the gap", keepAliveAttempts)
		})
	}
}

// TestArrivalBoundDoesNotChain walks the bound through a nice task's run of slices with
// made-up clock readings: a read during the run is bounded by the slice before the latest
// (gnet may have collected its bytes in that slice's batch), never by the run's first.
func TestArrivalBoundDoesNotChain(t *testing.T) {
	ms := int64(time.Millisecond)
	us := int64(time.Microsecond)
	s := &Server{}
	ended := func(start, end int64) {
		if end-start >= int64(arrivalLongCallback) || s.arr.end != 0 {
			s.arr.callbackEnded(start, end)
		}
	}
	for i := range int64(100) { // 1 s of 10 ms slices, 20 µs of I/O between them
		at := ms + i*(10*ms+20*us)
		ended(at, at+10*ms)
	}
	last := ms + 99*(10*ms+20*us)
	cs := &conn{}
	s.turnAt = last + 10*ms + 5*us
	s.noteRead(cs)
	assert.Equal(t, last-10*ms-20*us, cs.arrival, "bounded by the slice before the last")

	opened := &conn{}
	s.turnAt = last + 10*ms + 8*us // noteOpen takes the turn's clock reading
	s.noteOpen(opened)
	assert.Equal(t, last-10*ms-20*us, opened.readAt, "a connection registered just after the run may have sent during it")
	s.turnAt = last + 25*ms // lapsed: as long again as the last slice has passed
	s.noteRead(opened)
	assert.Equal(t, last+25*ms, opened.arrival)
}
