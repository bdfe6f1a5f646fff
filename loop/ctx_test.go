package loop

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PathValue unescapes like net/http's Request.PathValue.
func TestPathValueIsUnescaped(t *testing.T) {
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /p/{name}", func(c *Ctx) { c.String(200, c.PathValue("name")) })
		s.Handle("GET /f/{rest...}", func(c *Ctx) { c.String(200, c.PathValue("rest")) })
	})
	c := dial(t, addr)
	for path, want := range map[string]string{
		"/p/caf%C3%A9":     "café",
		"/p/a%20b":         "a b",
		"/p/plain":         "plain",
		"/f/dir/x%2Fy.txt": "dir/x/y.txt",
	} {
		resp, body := c.get(path)
		require.Equal(t, 200, resp.StatusCode, path)
		assert.Equal(t, want, body, path)
	}
	// net/http agrees on the same input.
	r, _ := http.NewRequest("GET", "http://x/p/caf%C3%A9", nil)
	mux := http.NewServeMux()
	var got string
	mux.HandleFunc("GET /p/{name}", func(_ http.ResponseWriter, r *http.Request) { got = r.PathValue("name") })
	mux.ServeHTTP(nopWriter{}, r)
	assert.Equal(t, "café", got)
	assert.True(t, strings.HasPrefix(got, "caf"))
}

type nopWriter struct{}

func (nopWriter) Header() http.Header { return http.Header{} }

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

func (nopWriter) WriteHeader(int) {}
