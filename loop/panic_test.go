package loop

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runtime.Goexit in a handler is contained like a panic: 500, and the server keeps
// serving, in both modes.
func TestGoexitInHandlerIsContained(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var deferred atomic.Int32
			_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				s.Handle("GET /exit", func(c *Ctx) {
					defer deferred.Add(1)
					runtime.Goexit()
				})
				s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
			})
			c := dial(t, addr)
			resp, _ := c.get("/exit")
			require.Equal(t, 500, resp.StatusCode)
			require.EqualValues(t, 1, deferred.Load())
			for i := 0; i < 3; i++ { // the loop lives
				resp, body := dial(t, addr).get("/ok")
				require.Equal(t, 200, resp.StatusCode)
				require.Equal(t, "ok", body)
			}
		})
	}
}

// Handler panics are rate-limited in the log: every one is counted, a sample is
// logged, and the next line says how many were suppressed.
func TestPanicLogsAreRateLimited(t *testing.T) {
	var logs syncBuffer
	const panics = 300
	_, addr := startServer(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(s *Server) {
		s.Handle("GET /boom", func(c *Ctx) { panic("boom") })
		s.HandleStats("/debug/baton")
	})
	c := dial(t, addr)
	var sb strings.Builder
	for i := 0; i < panics; i++ {
		sb.WriteString("GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	c.send(sb.String())
	for i := 0; i < panics; i++ {
		resp, _ := c.read("GET")
		require.Equal(t, 500, resp.StatusCode)
	}
	lines := strings.Count(logs.String(), "handler panicked")
	assert.Positive(t, lines)
	assert.LessOrEqual(t, lines, 20, "a panic storm must not write one stack per panic")
	_, body := dial(t, addr).get("/debug/baton/admission")
	assert.Contains(t, body, fmt.Sprintf(`"panics_total": %d`, panics))
}
