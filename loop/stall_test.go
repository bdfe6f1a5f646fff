package loop

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The stall detector reports a stall's true length when the slice ends (the loop
// reports long slices to it), not the last poll's value, and names the task's route.
func TestStallLengthIsExact(t *testing.T) {
	var logs syncBuffer
	cfg := Config{StallThreshold: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	_, addr := startServer(t, cfg, func(s *Server) {
		s.Handle("GET /hog", func(c *Ctx) {
			end := time.Now().Add(150 * time.Millisecond)
			for time.Now().Before(end) { // holds the loop: a stall
			}
			c.String(200, "done")
		})
	})
	resp, _ := dial(t, addr).get("/hog")
	require.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "gave the loop back") }, 10*time.Second, 10*time.Millisecond)
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "gave the loop back") {
			line = l
		}
	}
	require.Contains(t, line, "exact=true", line)
	i := strings.Index(line, "length=")
	require.GreaterOrEqual(t, i, 0, line)
	length, err := time.ParseDuration(strings.Fields(line[i+len("length="):])[0])
	require.NoError(t, err, line)
	require.GreaterOrEqual(t, length, 150*time.Millisecond, line)
	require.Less(t, length, 2*time.Second, line)
}
