package loop

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wireExchange sends raw (pipelined requests, the last with Connection: close) and returns
// what the server wrote until it closed.
func wireExchange(t *testing.T, addr, raw string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(conn, raw)
	require.NoError(t, err)
	b, err := io.ReadAll(conn)
	require.NoError(t, err)
	return string(b)
}

// parseResponses parses every response in wire, in order, for the methods asked, and fails if
// anything is left over: a body the framing does not account for shows as garbage there.
func parseResponses(t *testing.T, wire string, methods ...string) []*http.Response {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(wire))
	var out []*http.Response
	for i, m := range methods {
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		require.NoError(t, err, "response %d of %q", i, wire)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err, "response %d of %q", i, wire)
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, resp)
	}
	rest, _ := io.ReadAll(br)
	require.Empty(t, string(rest), "bytes after the last response in %q", wire)
	return out
}

// TestStatusesWithoutBody (issue 27, item 8): Stream(204) and Stream(304) with writes
// sent a chunked body after a head that says none, which the client reads as the start of
// the next response; a HEAD request's stream or String must send no body either. Each
// response is followed by a pipelined request, whose answer must parse cleanly after it.
func TestStatusesWithoutBody(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			writeErrs := make(chan error, 8)
			_, addr := startServer(t, Config{MultiThread: mt}, func(s *Server) {
				for _, st := range []int{204, 304} {
					s.Handle(fmt.Sprintf("GET /stream%d", st), func(c *Ctx) {
						w := c.Stream(st, "text/plain")
						_, err := w.Write([]byte("must not be sent"))
						writeErrs <- err
					})
					s.Handle(fmt.Sprintf("GET /string%d", st), func(c *Ctx) { c.String(st, "must not be sent") })
				}
				s.Handle("GET /streamed", func(c *Ctx) {
					w := c.Stream(200, "text/plain")
					_, _ = w.Write([]byte("body"))
				})
				s.Handle("GET /plain", func(c *Ctx) { c.String(200, "plain") })
				s.Handle("GET /next", func(c *Ctx) { c.String(200, "next") })
			})
			for _, path := range []string{"/stream204", "/stream304", "/string204", "/string304"} {
				wire := wireExchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				rs := parseResponses(t, wire, "GET", "GET")
				want := 204
				if strings.HasSuffix(path, "304") {
					want = 304
				}
				assert.Equal(t, want, rs[0].StatusCode, path)
				assert.Empty(t, rs[0].Header.Get("Transfer-Encoding"), "%s: %q", path, wire)
				assert.Equal(t, 200, rs[1].StatusCode, path)
				assert.Equal(t, "next", bodyOf(t, rs[1]), path)
				assert.NotContains(t, wire, "must not be sent", path)
			}
			for range 2 {
				select {
				case err := <-writeErrs:
					assert.ErrorIs(t, err, http.ErrBodyNotAllowed, "a write to a 204/304 stream")
				case <-time.After(10 * time.Second):
					t.Fatal("the stream handlers did not report their writes")
				}
			}
			for _, path := range []string{"/streamed", "/plain"} {
				wire := wireExchange(t, addr, "HEAD "+path+" HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				rs := parseResponses(t, wire, "HEAD", "GET")
				assert.Equal(t, 200, rs[0].StatusCode, path)
				assert.Equal(t, "next", bodyOf(t, rs[1]), path)
				assert.NotContains(t, wire, "body\r\n", path)
				assert.NotContains(t, wire, "\r\n\r\nplain", path)
			}
		})
	}
}

// TestInterimStatusRefused (issue 27, item 8): String, JSON, Bytes and Stream with a 1xx
// status sent an interim head as the only response (the client waits for the final one,
// or takes the next pipelined response as this one's), and 101 went out without an
// upgrade. Each is refused: the handler panics with a message naming the status, the
// client gets 500, and the pipelined request behind it is answered (loop/nethttp's
// TestWriteHeader101Refused does the same for a net/http handler's WriteHeader(101)).
func TestInterimStatusRefused(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			var logs syncBuffer
			_, addr := startServer(t, Config{MultiThread: mt, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(s *Server) {
				s.Handle("GET /string103", func(c *Ctx) { c.String(103, "early hints") })
				s.Handle("GET /json100", func(c *Ctx) { c.JSON(100, map[string]int{"a": 1}) })
				s.Handle("GET /bytes199", func(c *Ctx) { c.Bytes(199, "text/plain", []byte("x")) })
				s.Handle("GET /stream102", func(c *Ctx) { _, _ = c.Stream(102, "text/plain").Write([]byte("x")) })
				s.Handle("GET /string101", func(c *Ctx) { c.String(101, "no upgrade") })
				s.Handle("GET /next", func(c *Ctx) { c.String(200, "next") })
			})
			for _, path := range []string{"/string103", "/json100", "/bytes199", "/stream102", "/string101"} {
				wire := wireExchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				require.True(t, strings.HasPrefix(wire, "HTTP/1.1 500 "), "%s: %q", path, wire)
				rs := parseResponses(t, wire, "GET", "GET")
				assert.Equal(t, 500, rs[0].StatusCode, path)
				assert.Equal(t, "next", bodyOf(t, rs[1]), path)
			}
			// The first panic is logged (later ones within the second are counted): it names
			// the status and what to do instead.
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "handler panicked") }, 10*time.Second, 5*time.Millisecond)
			assert.Contains(t, logs.String(), "status 103")
			assert.Contains(t, logs.String(), "101 only through Upgrade")
		})
	}
}
