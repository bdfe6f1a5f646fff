package loop

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChunkedBodySplitAcrossReads: a chunked body whose next chunk-size line arrives
// alone is read whole, in both modes and for a streamed body too. A guard beside
// TestWSFrameSplitAcrossReads (loop/ws): the engine must not hand gnet a Discard(0), which
// discards every buffered byte; the body decoder takes a partial size line in (it consumed
// the "1" before the fix too), so this test passed before it, and keeps the body paths
// honest should the decoder ever leave such bytes buffered. The pauses make the pieces
// arrive in separate reads; were two coalesced, the test would still pass.
func TestChunkedBodySplitAcrossReads(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		_, addr := startServer(t, Config{MultiThread: multi}, func(s *Server) {
			s.Handle("POST /echo", func(c *Ctx) { c.Bytes(200, "text/plain", c.Body()) })
			s.Handle("POST /stream", func(c *Ctx) {
				b, err := io.ReadAll(c.BodyReader())
				if err != nil {
					c.String(500, err.Error())
					return
				}
				c.Bytes(200, "text/plain", b)
			}, StreamBody())
		})
		for _, path := range []string{"/echo", "/stream"} {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			require.NoError(t, err)
			defer conn.Close()
			for _, piece := range []string{
				"POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
				"1", // a chunk-size line's first digit, alone
				"0\r\n0123456789abcdef\r\n0\r\n\r\n",
			} {
				_, err := io.WriteString(conn, piece)
				require.NoError(t, err)
				time.Sleep(20 * time.Millisecond)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err, path)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode, "%s: %s", path, body)
			require.Equal(t, "hello0123456789abcdef", string(body), path)
		}
	})
}
