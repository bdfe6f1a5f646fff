package loop

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
)

// Tests of streamed request bodies (StreamBody) with native handlers: in single-thread
// mode the handler's task reads on the loop and parks while the pipe is empty; in
// multi-thread mode its goroutine blocks. loop/nethttp's body tests cover a reader on a
// goroutine the handler handed the body to.

func heldOf(p *bodyPipe) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxHeld
}

func dialBody(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	return c, bufio.NewReader(c)
}

// TestStreamBodyBounded uploads 64 MiB to a handler that reads it in 32 KiB pieces and
// checks the bytes held for the connection (gnet's input plus the pipe) stay under
// Config.MaxBufferedInput + the pipe + one gnet read.
func TestStreamBodyBounded(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		const size = 64 << 20
		const maxIn = 16 << 20 // room for the race detector's slower handler
		const bound = maxIn + bodyPipeBytes + 64<<10
		h := func(c *Ctx) {
			p, ok := c.BodyReader().(*bodyPipe)
			if !ok {
				c.String(500, "body not streamed")
				return
			}
			sum := sha256.New()
			n, err := io.CopyBuffer(sum, struct{ io.Reader }{p}, make([]byte, 32<<10))
			if err != nil {
				c.String(500, err.Error())
				return
			}
			c.String(200, fmt.Sprintf("%d %x %d", n, sum.Sum(nil), heldOf(p)))
		}
		_, addr := startServer(t, Config{MultiThread: multi, MaxBufferedInput: maxIn,
			Limits: httpcodec.Config{MaxBodyBytes: size}}, func(s *Server) { s.Handle("POST /big", h, StreamBody()) })
		payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
		want := sha256.Sum256(payload)
		resp, err := http.Post("http://"+addr+"/big", "application/octet-stream", bytes.NewReader(payload))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(b))
		f := strings.Fields(string(b))
		require.Len(t, f, 3)
		assert.Equal(t, strconv.Itoa(size), f[0])
		assert.Equal(t, fmt.Sprintf("%x", want), f[1])
		held, _ := strconv.Atoi(f[2])
		assert.LessOrEqual(t, held, bound, "bytes held for the connection")
		t.Logf("most bytes held while streaming 64 MiB: %d (bound %d)", held, bound)
	})
}

// TestStreamBodySlowReader uploads 64 MiB to a handler that stops reading: the bytes held
// for the connection stay under Config.MaxBufferedInput + the pipe + one gnet read (gnet
// v2.10 cannot pause reading a socket), then the body is cut: the handler's Read fails
// with errBodyCut and the connection closes after the response.
func TestStreamBodySlowReader(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		const size = 64 << 20
		const maxIn = 1 << 20
		const bound = maxIn + bodyPipeBytes + 64<<10
		release := make(chan *Future[struct{}], 1)
		h := func(c *Ctx) {
			ev := NewFuture[struct{}](c.Loop())
			release <- ev
			body := c.BodyReader()
			one := make([]byte, 1)
			_, _ = body.Read(one)
			_, _ = ev.Await(c, 0) // parks (single-thread) or blocks (multi-thread) until the test says
			_, err := io.Copy(io.Discard, body)
			c.String(200, fmt.Sprintf("%v %d", errors.Is(err, errBodyCut), heldOf(body.(*bodyPipe))))
		}
		_, addr := startServer(t, Config{MultiThread: multi, MaxBufferedInput: maxIn,
			Limits: httpcodec.Config{MaxBodyBytes: size}}, func(s *Server) { s.Handle("POST /slow", h, StreamBody()) })
		c, br := dialBody(t, addr)
		_, err := fmt.Fprintf(c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
		require.NoError(t, err)
		_, _ = c.Write(make([]byte, size)) // the server drops the input past the cut
		select {
		case ev := <-release:
			ev.Resolve(struct{}{}, nil)
		case <-time.After(20 * time.Second):
			t.Fatal("the handler did not start")
		}
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		f := strings.Fields(string(b))
		require.Len(t, f, 2, string(b))
		assert.Equal(t, "true", f[0], "the handler's Read fails with errBodyCut")
		held, _ := strconv.Atoi(f[1])
		assert.LessOrEqual(t, held, bound, "bytes held for the connection")
		_, err = br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "the connection closes after the response")
		t.Logf("most bytes held for a handler that stopped reading: %d (bound %d)", held, bound)
	})
}

// TestStreamBodyOnLoopArrivesInPieces: a handler on a StreamBody route reads a chunked
// body that the client sends in three pieces, waiting for the handler's echo of each
// before it sends the next; so each Read must return before the body is complete (on the
// loop, the task parks between pieces while the loop serves on). An empty Read never
// waits, and reports the body's end once it is read.
func TestStreamBodyOnLoopArrivesInPieces(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		_, addr := startServer(t, Config{MultiThread: multi}, func(s *Server) {
			s.Handle("POST /echo", func(c *Ctx) {
				body := c.BodyReader()
				if n, err := body.Read(nil); n != 0 || err != nil {
					c.String(500, fmt.Sprintf("empty read before the body: %d %v", n, err))
					return
				}
				st := c.Stream(200, "text/plain")
				_, _ = st.Write(nil) // the head goes out before the body is read
				buf := make([]byte, 64)
				for {
					n, err := body.Read(buf)
					if n > 0 {
						_, _ = st.Write([]byte("got " + string(buf[:n]) + "\n"))
					}
					if err != nil {
						_, end := body.Read(nil)
						_, _ = st.Write([]byte(fmt.Sprintf("end %v %v\n", err, end)))
						return
					}
				}
			}, StreamBody())
			s.Handle("GET /ping", func(c *Ctx) { c.String(200, "pong") })
		})
		c, br := dialBody(t, addr)
		_, err := io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		rb := bufio.NewReader(resp.Body)
		for _, piece := range []string{"one", "two", "three"} {
			_, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(piece), piece)
			require.NoError(t, err)
			line, err := rb.ReadString('\n')
			require.NoError(t, err)
			assert.Equal(t, "got "+piece+"\n", line)
			// Another connection is served while the handler waits for the next piece.
			other, obr := dialBody(t, addr)
			_, err = io.WriteString(other, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
			require.NoError(t, err)
			presp, err := http.ReadResponse(obr, nil)
			require.NoError(t, err)
			require.Equal(t, 200, presp.StatusCode)
		}
		_, err = io.WriteString(c, "0\r\n\r\n")
		require.NoError(t, err)
		line, err := rb.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "end EOF EOF\n", line)
	})
}
