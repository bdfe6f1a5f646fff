package nethttp

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
)

// dialStream opens a raw connection to addr, closed when the test ends.
func dialStream(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	return c, bufio.NewReader(c)
}

// TestHTTPBodyStreamsBeforeComplete proves the body streams: the handler reads the first
// part and answers it while the client has not sent the second part yet.
func TestHTTPBodyStreamsBeforeComplete(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		part1, part2 := []byte("hello, "), []byte("streaming world")
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			first := make([]byte, len(part1))
			if _, err := io.ReadFull(r.Body, first); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			_, _ = w.Write(first) // echo part 1 before part 2 exists
			w.(http.Flusher).Flush()
			rest, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			_, _ = w.Write(rest)
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "POST /echo", h) })
		c, br := dialStream(t, addr)
		_, err := fmt.Fprintf(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(part1)+len(part2), part1)
		require.NoError(t, err)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		got := make([]byte, len(part1))
		_, err = io.ReadFull(resp.Body, got)
		require.NoError(t, err)
		require.Equal(t, part1, got, "the echo of part 1 arrives before part 2 is sent")
		_, err = c.Write(part2)
		require.NoError(t, err)
		rest, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, part2, rest)
	})
}

// TestHTTPBodyStreamChunked sends a chunked body in pieces, each piece only after the
// handler has read the previous one.
func TestHTTPBodyStreamChunked(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		got := make(chan string, 8)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := make([]byte, 64)
			var all []byte
			for {
				n, err := r.Body.Read(buf)
				if n > 0 {
					all = append(all, buf[:n]...)
					got <- string(buf[:n])
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
			}
			fmt.Fprintf(w, "%d %v %s", r.ContentLength, r.TransferEncoding, all)
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "POST /up", h) })
		c, br := dialStream(t, addr)
		_, err := io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
		require.NoError(t, err)
		for _, piece := range []string{"alpha", "beta", "gamma"} {
			_, err = fmt.Fprintf(c, "%x\r\n%s\r\n", len(piece), piece)
			require.NoError(t, err)
			assert.Equal(t, piece, <-got, "the handler reads each chunk as it arrives")
		}
		_, err = io.WriteString(c, "0\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "-1 [chunked] alphabetagamma", string(b))
	})
}

// TestHTTPBodyStreamContinue checks that "Expect: 100-continue" is answered when the
// handler first reads the body, and not at all when it answers without reading.
func TestHTTPBodyStreamContinue(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("read") == "" {
				http.Error(w, "no thanks", http.StatusForbidden)
				return
			}
			b, _ := io.ReadAll(r.Body)
			_, _ = w.Write(b)
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "PUT /x", h) })

		c, br := dialStream(t, addr)
		_, err := io.WriteString(c, "PUT /x?read=1 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
		require.NoError(t, err)
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "HTTP/1.1 100 Continue\r\n", line)
		line, err = br.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "\r\n", line)
		_, err = io.WriteString(c, "body")
		require.NoError(t, err)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, "body", string(b))

		c2, br2 := dialStream(t, addr)
		_, err = io.WriteString(c2, "PUT /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
		require.NoError(t, err)
		resp, err = http.ReadResponse(br2, nil)
		require.NoError(t, err)
		assert.Equal(t, 403, resp.StatusCode, "no 100 Continue before a response that did not read")
	})
}

// TestHTTPBodyStreamBounded uploads 64 MiB to a net/http handler that reads it in 32 KiB
// pieces through the streamed body (the loop's bound on the bytes held is
// loop's TestStreamBodyBounded).
func TestHTTPBodyStreamBounded(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		const size = 64 << 20
		const maxIn = 16 << 20 // room for the race detector's slower handler
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sum := sha256.New()
			n, err := io.CopyBuffer(sum, struct{ io.Reader }{r.Body}, make([]byte, 32<<10))
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			fmt.Fprintf(w, "%d %x", n, sum.Sum(nil))
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi, MaxBufferedInput: maxIn,
			Limits: httpcodec.Config{MaxBodyBytes: size}}, func(s *loop.Server) { handle(t, s, "POST /big", h) })
		payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
		want := sha256.Sum256(payload)
		resp, err := httpClient(t).Post("http://"+addr+"/big", "application/octet-stream", bytes.NewReader(payload))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(b))
		assert.Equal(t, fmt.Sprintf("%d %x", size, want), string(b))
	})
}

// TestHTTPBodyStreamSlowHandler uploads 64 MiB to a net/http handler that stops reading:
// the body is cut (the loop's bound on the bytes held is loop's
// TestStreamBodySlowReader): the handler's Read fails and the connection closes after
// the response.
func TestHTTPBodyStreamSlowHandler(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		const size = 64 << 20
		const maxIn = 1 << 20
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			one := make([]byte, 1)
			_, _ = r.Body.Read(one)
			<-release
			_, err := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "cut=%v", err != nil && strings.Contains(err.Error(), "MaxBufferedInput"))
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi, MaxBufferedInput: maxIn,
			Limits: httpcodec.Config{MaxBodyBytes: size}}, func(s *loop.Server) { handle(t, s, "POST /slow", h) })
		c, br := dialStream(t, addr)
		_, err := fmt.Fprintf(c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
		require.NoError(t, err)
		_, _ = c.Write(make([]byte, size)) // the server drops the input past the cut
		close(release)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, "cut=true", string(b), "the handler's Read fails: the body was cut")
		_, err = br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "the connection closes after the response")
	})
}

// TestHTTPBodyStreamDisconnect checks that a client leaving mid-body makes the handler's
// Read fail and cancels its context.
func TestHTTPBodyStreamDisconnect(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		started := make(chan struct{})
		result := make(chan string, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := make([]byte, 5)
			_, err := io.ReadFull(r.Body, buf)
			if err != nil {
				result <- "first read: " + err.Error()
				return
			}
			close(started)
			_, err = io.ReadAll(r.Body)
			<-r.Context().Done()
			result <- fmt.Sprintf("read error: %v, context: %v", err != nil, r.Context().Err())
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "POST /d", h) })
		c, _ := dialStream(t, addr)
		_, err := io.WriteString(c, "POST /d HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nfirst")
		require.NoError(t, err)
		<-started
		require.NoError(t, c.Close())
		assert.Equal(t, "read error: true, context: context canceled", <-result)
	})
}

// TestHTTPBodyStreamTooLarge checks Config.Limits.MaxBodyBytes on a streamed body: a
// declared Content-Length over it is answered 413 before the handler runs; a chunked body
// going past it makes the handler's Read fail with *http.MaxBytesError, and a handler that
// wrote nothing is answered 413.
func TestHTTPBodyStreamTooLarge(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		readErr := make(chan error, 4)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			readErr <- err
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi, Limits: httpcodec.Config{MaxBodyBytes: 1000}},
			func(s *loop.Server) { handle(t, s, "POST /lim", h) })
		for _, chunked := range []bool{false, true} {
			c, br := dialStream(t, addr)
			body := strings.Repeat("z", 1500)
			if chunked {
				_, err := fmt.Fprintf(c, "POST /lim HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
				require.NoError(t, err)
			} else {
				_, err := fmt.Fprintf(c, "POST /lim HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				require.NoError(t, err)
			}
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			assert.Equal(t, 413, resp.StatusCode, "chunked=%v", chunked)
			if !chunked {
				continue // a declared length over the limit is refused before the handler runs
			}
			err = <-readErr
			var mbe *http.MaxBytesError
			require.True(t, errors.As(err, &mbe), "chunked=%v: %v", chunked, err)
			assert.Equal(t, int64(1000), mbe.Limit)
		}
		// A declared length over the limit: 413 at once, without 100 Continue.
		c, br := dialStream(t, addr)
		_, err := io.WriteString(c, "POST /lim HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
		require.NoError(t, err)
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "HTTP/1.1 413 Content Too Large\r\n", line)
		assert.Empty(t, readErr, "the handler did not run")
	})
}
