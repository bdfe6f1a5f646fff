package loop

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unroutedClient sends raw on a fresh connection, in pieces of split bytes (0: one write),
// and reads responses to GET requests until the server closes; it returns their statuses
// and bodies, and whether the server closed the connection after them.
func unroutedClient(t *testing.T, addr, raw string, split int) (statuses []int, bodies []string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	go func() {
		if split <= 0 {
			_, _ = io.WriteString(conn, raw)
			return
		}
		for i := 0; i < len(raw); i += split {
			if _, err := io.WriteString(conn, raw[i:min(len(raw), i+split)]); err != nil {
				return // the server closed: the rest is not wanted
			}
		}
	}()
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return statuses, bodies
		}
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		statuses, bodies = append(statuses, resp.StatusCode), append(bodies, string(b))
	}
}

// TestUnroutedBodyIsDiscarded (issue 27, item 11): a request with a framed body to a route
// that does not exist (404) or does not take its method (405) closed the connection, so the
// requests pipelined behind it were lost; four cases of the llhttp request suite
// (connection-05, pipelining-01, whole and split) failed on it. The body is now read and
// dropped, up to 256 KiB as net/http does, and the connection stays open.
func TestUnroutedBodyIsDiscarded(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			_, addr := startServer(t, Config{MultiThread: mt}, func(s *Server) {
				s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
			})
			next := "GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
			cases := []struct {
				name, req string
				want      int
			}{
				{"404 content-length", "POST /missing HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world", 404},
				{"405 content-length", "POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 405},
				{"404 chunked", "POST /missing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 404},
				{"405 chunked with trailer", "PUT /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n", 405},
				{"404 body at the limit", "POST /missing HTTP/1.1\r\nHost: x\r\nContent-Length: 262144\r\n\r\n" + strings.Repeat("b", 256<<10), 404},
			}
			for _, tc := range cases {
				for _, split := range []int{0, 1, 7} {
					if split == 1 && len(tc.req) > 4096 {
						continue // byte by byte is for the short ones
					}
					statuses, bodies := unroutedClient(t, addr, tc.req+next, split)
					require.Len(t, statuses, 3, "%s, split %d: the pipelined requests were not answered (%v)", tc.name, split, statuses)
					assert.Equal(t, []int{tc.want, 200, 200}, statuses, "%s, split %d", tc.name, split)
					assert.Equal(t, "ok", bodies[1], "%s, split %d", tc.name, split)
				}
			}
		})
	}
}

// TestUnroutedBodyStillCloses: where the body cannot be framed safely or is too large to
// read for nothing, the connection still closes after the refusal, and what was pipelined
// behind it is not answered.
func TestUnroutedBodyStillCloses(t *testing.T) {
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	next := "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"
	big := strings.Repeat("b", 300<<10)
	cases := []struct{ name, req string }{
		{"content-length over 256 KiB", "POST /missing HTTP/1.1\r\nHost: x\r\nContent-Length: 307200\r\n\r\n" + big},
		{"chunked over 256 KiB", fmt.Sprintf("POST /missing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(big), big)},
		{"malformed chunk size", "POST /missing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
		{"expect 100-continue", "POST /missing HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello"},
	}
	for _, tc := range cases {
		statuses, _ := unroutedClient(t, addr, tc.req+next, 0)
		assert.Equal(t, []int{404}, statuses, tc.name)
	}
}

// "Expect: 100-continue" on a route that will 404 gets the 404 at once, never
// "100 Continue" first.
func TestExpectContinueOn404AnswersAtOnce(t *testing.T) {
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
