package loop

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResponseFraming: the framing a native handler may state, on the wire, in both modes:
// a Stream after SetHeader("Content-Length") sends a sized body: written in pieces it keeps
// the connection, a short one closes it, a write past the length is refused; a body
// written whole (String) keeps its own length; trailers follow a chunked body;
// SetHeader("Connection", "close") says Connection: close and closes, another Connection
// value panics (500); Proto, RequestURI and MayBlock report what they say.
func TestResponseFraming(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		_, addr := startServer(t, Config{MultiThread: multi}, func(s *Server) {
			s.Handle("GET /sized", func(c *Ctx) {
				c.SetHeader("Content-Length", "10")
				st := c.Stream(200, "text/plain")
				_, _ = st.Write([]byte("hello"))
				_, _ = st.Write([]byte("world"))
				_, err := st.Write([]byte("!"))
				if !errors.Is(err, http.ErrContentLength) {
					panic(fmt.Sprintf("a write past the length returned %v", err))
				}
			})
			s.Handle("GET /short", func(c *Ctx) {
				c.SetHeader("Content-Length", "10")
				_, _ = c.Stream(200, "text/plain").Write([]byte("hell"))
			})
			s.Handle("GET /whole", func(c *Ctx) {
				c.SetHeader("Content-Length", "99")
				c.String(200, "whole")
			})
			s.Handle("GET /keepalive", func(c *Ctx) {
				c.SetHeader("Connection", "keep-alive") // panics: only "close" states the framing
			})
			s.Handle("GET /trailer", func(c *Ctx) {
				c.SetHeader("Trailer", "X-Sum")
				st := c.Stream(200, "text/plain")
				_, _ = st.Write([]byte("body"))
				st.Trailer("X-Sum", "42")
			})
			s.Handle("GET /close", func(c *Ctx) {
				c.SetHeader("Connection", "close")
				c.String(200, "bye")
			})
			s.Handle("GET /facts", func(c *Ctx) {
				c.String(200, fmt.Sprintf("%s %s %v", c.Proto(), c.RequestURI(), c.MayBlock()))
			})
		})
		c := dial(t, addr)
		resp, body := c.get("/sized")
		assert.Equal(t, int64(10), resp.ContentLength)
		assert.Empty(t, resp.TransferEncoding)
		assert.Equal(t, "helloworld", body)
		resp, body = c.get("/facts?a=1") // the same connection: a complete sized body keeps it
		assert.Equal(t, fmt.Sprintf("HTTP/1.1 /facts?a=1 %v", multi), body)
		mustStatus(t, resp, 200)
		resp, body = c.get("/whole")
		assert.Equal(t, int64(5), resp.ContentLength, "a body written whole states its own length")
		assert.Equal(t, "whole", body)
		resp, _ = c.get("/keepalive")
		mustStatus(t, resp, 500)

		c.send("GET /trailer HTTP/1.1\r\nHost: t\r\n\r\n")
		resp, body = c.read("GET")
		assert.Equal(t, "body", body)
		assert.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		assert.Equal(t, "42", resp.Trailer.Get("X-Sum"))

		resp, body = c.get("/close")
		assert.True(t, resp.Close, "the head says Connection: close")
		assert.Equal(t, "bye", body)
		c.expectClosed(10 * time.Second)

		c = dial(t, addr)
		c.send("GET /short HTTP/1.1\r\nHost: t\r\n\r\n")
		resp, err := http.ReadResponse(c.br, nil)
		require.NoError(t, err)
		assert.Equal(t, int64(10), resp.ContentLength)
		b, err := io.ReadAll(resp.Body)
		assert.Equal(t, "hell", string(b))
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "a short body ends with the connection")

		c = dial(t, addr)
		c.send("GET http://example.test/facts HTTP/1.0\r\n\r\n")
		_, body = c.read("GET")
		assert.Equal(t, fmt.Sprintf("HTTP/1.0 http://example.test/facts %v", multi), body)
	})
}
