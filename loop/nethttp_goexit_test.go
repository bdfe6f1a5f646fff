package loop

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHTTPAdapterGoexit: runtime.Goexit in a net/http-adapter handler is answered like a
// panic, as native handlers are: 500 before the head was written, a response cut short
// (the connection closed) after it; the server serves on. Both modes.
func TestHTTPAdapterGoexit(t *testing.T) {
	for _, multi := range []bool{false, true} {
		name := map[bool]string{false: "loop", true: "multithread"}[multi]
		t.Run(name, func(t *testing.T) {
			_, addr := startServer(t, Config{MultiThread: multi}, func(s *Server) {
				s.HandleHTTP("GET /exit", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runtime.Goexit()
				}))
				s.HandleHTTP("GET /exit-after-head", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Length", "100")
					_, _ = io.WriteString(w, "part")
					w.(http.Flusher).Flush()
					runtime.Goexit()
				}))
				s.HandleHTTP("GET /ok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
