package layout

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// featurePackages are the feature packages under loop/ the split has made so far (issue
// 26): each must exist, and is held to the rules below with any other package under loop/.
var featurePackages = []string{"accesslog", "compress", "cors", "health", "nethttp", "ratelimit", "requestid", "room", "sse", "stats", "ws"}

// engineOnly are the packages that only loop (the engine) may import: the scheduler and
// the accounting recorders are the engine's own parts, not an API.
var engineOnly = []string{module + "/internal/scheduler", module + "/internal/recorder"}

// TestFeaturePackagesUseTheEngineAPI checks the split of loop (docs/design.md, "loop and its
// feature packages"): a feature package under loop/ is a client of loop's exported API and
// reaches no other feature package except through loop; loop (the engine) imports no
// feature package; the engine's own parts are imported by loop alone (other packages'
// tests may drive the scheduler, as offload's do). A feature's test files are held to the
// same rule, except that they may use loop/looptest and loop/stats (the pages, snapshot
// and dashboard through which a feature's stats section is seen).
func TestFeaturePackagesUseTheEngineAPI(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not available")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}} | {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", module+"/...").Output()
	require.NoError(t, err, "go list: %s", stderrOf(err))
	features := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, imps := fields[0], fields[1:]
		inTests := false // past the "|": the imports of the package's tests
		feature := strings.HasPrefix(pkg, module+"/loop/") && pkg != module+"/loop/looptest"
		if feature {
			features[strings.TrimPrefix(pkg, module+"/loop/")] = true
		}
		for _, imp := range imps {
			if imp == "|" {
				inTests = true
				continue
			}
			switch {
			case pkg == module+"/loop" && strings.HasPrefix(imp, module+"/loop/"):
				t.Errorf("the engine (loop) imports %s: a feature is a client of loop, never the other way", imp)
			case feature && strings.HasPrefix(imp, module+"/loop/") && imp != pkg && imp != module+"/loop/looptest" &&
				!(inTests && imp == module+"/loop/stats"):
				t.Errorf("feature package %s imports feature package %s: features meet only through loop", pkg, imp)
			}
			for _, e := range engineOnly {
				if imp == e && !inTests && pkg != module+"/loop" && !strings.HasPrefix(pkg, e) {
					t.Errorf("%s imports %s: only loop may", pkg, e)
				}
			}
		}
	}
	for _, f := range featurePackages {
		assert.True(t, features[f], "the feature package loop/%s was not found", f)
	}
}
