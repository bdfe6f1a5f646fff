package loop

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
)

// readReused hands the server one read of in the way gnet does: from a read buffer that
// the next read overwrites. What the server leaves unparsed is moved aside first (gnet
// moves it into its ring buffer), then the read buffer is clobbered.
func (r *chainRig) readReused(fc *recConn, in string) {
	buf := make([]byte, len(in))
	copy(buf, in)
	fc.in, fc.off = buf, 0
	(*events)(r.s).OnTraffic(fc)
	if !fc.closed {
		fc.in, fc.off = append([]byte(nil), fc.in[fc.off:]...), 0
	}
	for i := range buf {
		buf[i] = '#'
	}
}

// seenHead is what a handler read of its request.
type seenHead struct {
	inBuf                            bool // the head was in the read buffer in the first slice
	method, path, query, id, hdr, ua string
	headers                          int
}

func readHead(c *Ctx) seenHead {
	n := 0
	for range c.Headers() {
		n++
	}
	return seenHead{inBuf: c.headInBuf, method: c.Method(), path: c.Path(), query: c.Query("q"),
		id: c.PathValue("id"), hdr: c.Header("X-K"), ua: c.Header("User-Agent"), headers: n}
}

// TestHeadInBufParkedRequestKeepsItsHead: requests of a pipelined read that finish in their
// first slice read their head where it was parsed; one that yields has its head copied
// before the read buffer is reused, and reads it whole afterwards, its path parameter too.
func TestHeadInBufParkedRequestKeepsItsHead(t *testing.T) {
	for _, acct := range []bool{true, false} {
		t.Run(map[bool]string{true: "acct=on", false: "acct=off"}[acct], func(t *testing.T) {
			var first, after []seenHead
			r := newChainRig(t, Config{NoAccounting: !acct}, func(s *Server) {
				s.Handle("GET /p/{id}", func(c *Ctx) {
					first = append(first, readHead(c))
					if c.Query("park") == "1" {
						_ = c.Sleep(0)
						after = append(after, readHead(c))
					}
					c.String(200, c.PathValue("id"))
				})
			})
			req := func(target, k string) string {
				return "GET " + target + " HTTP/1.1\r\nHost: x\r\nX-K: " + k + "\r\nUser-Agent: ua-" + k + "\r\n\r\n"
			}
			r.readReused(r.fc, req("/p/1?q=a", "one")+req("/p/caf%C3%A9?q=b&park=1", "two")+req("/p/3?q=c", "three"))
			require.Len(t, r.responses(t), 1, "the request before the parked one is answered")
			resps := r.pumpUntil(t, 3)
			for i, want := range []string{"1", "café", "3"} {
				assert.Equal(t, 200, resps[i].StatusCode)
				assert.Equal(t, want, bodyOf(t, resps[i]))
			}
			require.Len(t, first, 3)
			want := []seenHead{
				{true, "GET", "/p/1", "a", "1", "one", "ua-one", 3},
				{true, "GET", "/p/caf%C3%A9", "b", "café", "two", "ua-two", 3},
				{false, "GET", "/p/3", "c", "3", "three", "ua-three", 3}, // parsed by the pump's serve: copied
			}
			assert.Equal(t, want, first)
			require.Len(t, after, 1)
			parked := want[1]
			parked.inBuf = false
			assert.Equal(t, parked, after[0], "the parked request's head, after the read buffer was reused")
			require.Len(t, r.recs, 3)
		})
	}
}

// TestHeadInBufQueuedRequestKeepsItsHead: a request queued for admission (another
// connection's request holds the only slot) has its head copied before its read buffer
// is reused, and runs with it once the slot frees.
func TestHeadInBufQueuedRequestKeepsItsHead(t *testing.T) {
	var ev *Future[struct{}]
	var seen []seenHead
	r := newChainRig(t, Config{RequestConcurrency: 1, MaxQueueLength: 4}, func(s *Server) {
		ev = NewFuture[struct{}](s.loopRef)
		s.Handle("GET /hold", func(c *Ctx) {
			_, _ = ev.Await(c, 0)
			c.String(200, "held")
		})
		s.Handle("GET /p/{id}", func(c *Ctx) {
			seen = append(seen, readHead(c))
			c.String(200, c.PathValue("id"))
		})
	})
	other := &recConn{}
	other.SetContext(r.s.newConn(other))
	r.readReused(r.fc, get("/hold"))
	r.readReused(other, "GET /p/42?q=z HTTP/1.1\r\nHost: x\r\nX-K: k\r\nUser-Agent: u\r\n\r\n")
	assert.Empty(t, seen, "queued behind /hold")
	assert.False(t, other.Context().(*conn).ctx.headInBuf, "copied when it was queued")
	ev.Resolve(struct{}{}, nil)
	deadline := 0
	for other.out.Len() == 0 {
		_ = r.s.runDoor()
		deadline++
		require.Less(t, deadline, 100000, "the queued request never ran")
	}
	require.Len(t, seen, 1)
	assert.Equal(t, seenHead{false, "GET", "/p/42", "z", "42", "k", "u", 3}, seen[0])
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(other.out.String())), nil)
	require.NoError(t, err)
	assert.Equal(t, "42", bodyOf(t, resp))
}

// TestHeadInBufNotInMultiThread: a handler on its own goroutine never reads the loop's
// read buffer.
func TestHeadInBufNotInMultiThread(t *testing.T) {
	var seen []seenHead
	r := newChainRig(t, Config{MultiThread: true}, func(s *Server) {
		s.Handle("GET /p/{id}", func(c *Ctx) {
			h := readHead(c)
			require.NoError(t, s.Loop(0).Post(func() { seen = append(seen, h) }))
			c.String(200, c.PathValue("id"))
		})
	})
	r.readReused(r.fc, "GET /p/5?q=m HTTP/1.1\r\nHost: x\r\nX-K: k\r\nUser-Agent: u\r\n\r\n")
	r.pumpUntil(t, 1)
	require.Len(t, seen, 1)
	assert.Equal(t, seenHead{false, "GET", "/p/5", "m", "5", "k", "u", 3}, seen[0])
}

// TestHeadStartsMatchFullHead: a response head written from a cached start is byte for
// byte the head AppendResponseHead writes, across statuses, content types (more of them
// than the cache holds; the engine's literals as themselves and as copies), framings and a
// Date that changes.
func TestHeadStartsMatchFullHead(t *testing.T) {
	var hs headStarts
	d1 := []byte("Tue, 24 Nov 2026 05:00:00 GMT")
	d2 := []byte("Tue, 24 Nov 2026 05:00:01 GMT")
	var none []byte
	// The engine's literals (kept and compared by address when passed as themselves), and
	// a type of the same length as one of them that differs.
	types := []string{"text/plain; charset=utf-8", "", "application/json", "text/html", "image/png", "a/b", "text/plain; charset=UTF-8"}
	for round := range 3 {
		for _, date := range []*[]byte{&d1, &d2, &none} {
			for _, status := range []int{100, 200, 204, 304, 404, 503, 599} {
				for _, ct := range types {
					for _, cl := range []int64{-1, 0, 13} {
						for flags := range 8 {
							h := httpcodec.ResponseHead{Status: status, ContentLength: cl, Date: *date,
								Chunked: flags&1 != 0, Close: flags&2 != 0, KeepAlive10: flags&4 != 0}
							if ct != "" {
								h.Headers = []httpcodec.Header{{Name: []byte("Content-Type"), Value: []byte(ct)}}
							}
							want, err := httpcodec.AppendResponseHead(nil, &h)
							require.NoError(t, err)
							arg := strings.Clone(ct) // a caller's string: compared by its bytes
							if round == 1 {
								switch ct {
								case ctypeText:
									arg = ctypeText
								case ctypeJSON:
									arg = ctypeJSON
								}
							}
							start := hs.get(status, arg, date)
							require.NotNil(t, start)
							got := httpcodec.AppendResponseHeadEnd(append([]byte(nil), start...), h.Status, h.ContentLength, h.Chunked, h.Close, h.KeepAlive10)
							require.Equal(t, string(want), string(got), "round %d status %d type %q", round, status, ct)
						}
					}
				}
			}
		}
	}
	assert.Nil(t, hs.get(200, "text/plain\r\nX-Evil: 1", &d1), "a value the codec refuses is not cached")
	assert.NotNil(t, hs.get(200, "text/plain", &d1))
}

// TestWriteHeadCachedOnTheWire: responses written from a cached start and in full (a
// handler header) differ only by that header, and to an HTTP/1.0 client asking for keep-alive.
func TestWriteHeadCachedOnTheWire(t *testing.T) {
	r := newChainRig(t, Config{}, func(s *Server) {
		s.Handle("GET /plain", func(c *Ctx) { c.String(200, "hi") })
		s.Handle("GET /hdr", func(c *Ctx) { c.SetHeader("X-A", "1"); c.String(200, "hi") })
		s.Handle("GET /json", func(c *Ctx) { c.JSON(201, map[string]int{"a": 1}) })
		s.Handle("GET /none", func(c *Ctx) { c.Bytes(204, "", nil) })
	})
	r.read(get("/plain") + get("/hdr") + get("/json") + get("/none") +
		"GET /plain HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	out := r.fc.out.String()
	date := string(*r.s.dateBytes.Load())
	want := "HTTP/1.1 200 OK\r\nDate: " + date + "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nhi" +
		"HTTP/1.1 200 OK\r\nDate: " + date + "\r\nX-A: 1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nhi" +
		"HTTP/1.1 201 Created\r\nDate: " + date + "\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n{\"a\":1}\n" +
		"HTTP/1.1 204 No Content\r\nDate: " + date + "\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nDate: " + date + "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nhi"
	assert.Equal(t, want, out)
}
