package loop

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEnvSmallHeaderLimitStarts (issue 27, item 18): BATON_MAX_HEADER_BYTES below 8192 made
// FromEnv fail (the default request-line limit exceeded it, and no variable sets that
// one). It now starts, and the server holds heads to the smaller limit.
func TestEnvSmallHeaderLimitStarts(t *testing.T) {
	env := map[string]string{"BATON_MAX_HEADER_BYTES": "4096"}
	cfg, err := fromLookup(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Equal(t, 4096, cfg.Limits.MaxHeaderBytes)

	_, addr := startServer(t, cfg, func(s *Server) {
		s.Handle("GET /{name}", func(c *Ctx) { c.String(200, "ok") })
	})
	resp, body := dial(t, addr).get("/" + strings.Repeat("a", 3000))
	mustStatus(t, resp, 200)
	require.Equal(t, "ok", body)
	resp, _ = dial(t, addr).get("/" + strings.Repeat("a", 5000))
	require.Contains(t, []int{414, 431}, resp.StatusCode)
}
