package nethttp

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/stretchr/testify/require"
)

// TestHTTPAdapterGoexit: runtime.Goexit in a net/http-adapter handler is answered like a
// panic, as native handlers are: 500 before the head was written, a response cut short
// (the connection closed) after it; the server serves on. Both modes.
func TestHTTPAdapterGoexit(t *testing.T) {
	for _, multi := range []bool{false, true} {
		name := map[bool]string{false: "loop", true: "multithread"}[multi]
		t.Run(name, func(t *testing.T) {
			_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) {
				handle(t, s, "GET /exit", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runtime.Goexit()
				}))
				handle(t, s, "GET /exit-after-head", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Length", "100")
					_, _ = io.WriteString(w, "part")
					w.(http.Flusher).Flush()
					runtime.Goexit()
				}))
				handle(t, s, "GET /ok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.WriteString(w, "ok\n")
				}))
			})
			get := func(path string) (*http.Response, []byte, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
				resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
				if err != nil {
					return nil, nil, err
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				return resp, body, err
			}
			resp, _, err := get("/exit")
			require.NoError(t, err, "no answer to a handler that called runtime.Goexit")
			require.Equal(t, 500, resp.StatusCode)

			resp, body, err := get("/exit-after-head")
			require.NotNil(t, resp, "no head for a handler that flushed and then called runtime.Goexit: %v", err)
			require.Equal(t, 200, resp.StatusCode)
			require.Error(t, err, "the response is cut short")
			require.Equal(t, "part", string(body))

			resp, body, err = get("/ok")
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "ok\n", string(body))
		})
	}
}

// TestWriteHeader101Refused: a net/http handler's WriteHeader(101) panics (the adapter has
// no http.Hijacker, so no protocol switch could follow): the client gets 500 and the
// pipelined request behind it is answered. Both modes.
func TestWriteHeader101Refused(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) {
			handle(t, s, "GET /http101", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(101)
				_, _ = w.Write([]byte("x"))
			}))
			s.Handle("GET /next", func(c *loop.Ctx) { c.String(200, "next") })
		})
		c := dial(t, addr)
		c.send("GET /http101 HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, _ := c.read("GET")
		require.Equal(t, 500, resp.StatusCode)
		resp, body := c.read("GET")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "next", body)
	})
}
