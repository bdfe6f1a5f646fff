package loop_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEngineDefersAreOpenCoded asks the compiler how it compiled every defer of package
// loop (-d=defer) and requires each to be open-coded. A defer the compiler cannot
// open-code (a function whose returns times defers passes its limit, a defer in a loop)
// is recorded on the stack and run by the runtime's deferreturn: on the per-read path
// (OnTraffic) that is a cost on every request that no other test shows (docs/bench.md,
// "The split of loop").
func TestEngineDefersAreOpenCoded(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the package")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not available")
	}
	const pkg = "github.com/batonrt/baton/loop"
	cmd := exec.Command(goBin, "build", "-gcflags="+pkg+"=-d=defer", pkg)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	line := regexp.MustCompile(`^(\S+\.go):\d+:\d+: (.*defer)$`)
	var found, other []string
	for _, l := range strings.Split(string(out), "\n") {
		m := line.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		found = append(found, l)
		if m[2] != "open-coded defer" {
			other = append(other, l)
		}
	}
	require.NotEmpty(t, found, "the compiler reported no defers (did -d=defer change?):\n%s", out)
	require.Empty(t, other, "defers of package loop that are not open-coded")
}
