package promexport

import (
	"bytes"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
)

// promtool returns the path of Prometheus's promtool (Debian's package prometheus; .ci/run
// installs it), or skips the test saying so.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found (apt-get install prometheus): " + err.Error())
	}
	return p
}

// runPromtool runs promtool with args and stdin, and returns its exit code and output
// (stdout and stderr).
func runPromtool(t *testing.T, stdin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	require.NoError(t, err)
	return 0, out.String()
}

// The exposition of a server with traffic on every kind of route passes `promtool check
// metrics` (Prometheus's linter: names, suffixes, units, types, help), as promhttp serves
// it on an admin listener (the Go and process collectors included, admin routes included
// too, to lint every family) and as Handler serves it on the server itself.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool(t)
	f := newFlagship(t, func(s *loop.Server) {
		s.Handle("GET /metrics", Handler(Registry(s, IncludeAdminRoutes())), loop.Exempt())
	})
	f.play(t, 3)
	admin := adminScrape(t, Registry(f.srv, IncludeAdminRoutes()))
	cl := &http.Client{Timeout: 10 * time.Second}
	code, own := get(t, cl, f.base+"/metrics")
	require.Equal(t, 200, code, own)
	for name, text := range map[string]string{"promhttp on an admin listener": admin(), "Handler on the server": own} {
		mfs := parse(t, text)
		for _, fam := range []string{"baton_http_request_duration_seconds", "baton_websocket_session_seconds",
			"baton_rooms_tick_overruns_total", "baton_loop_stall_seconds", "baton_gate_wait_seconds", "baton_build_info"} {
			require.Contains(t, mfs, fam, "%s: the text to lint has every kind of family", name)
		}
		exit, out := runPromtool(t, text, "check", "metrics")
		require.Equal(t, 0, exit, "%s: promtool check metrics:\n%s", name, out)
		require.Empty(t, strings.TrimSpace(out), name)
		t.Logf("%s: %d families, promtool check metrics clean", name, len(mfs))
	}
}
