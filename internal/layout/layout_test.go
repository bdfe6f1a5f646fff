package layout

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const (
	module = "github.com/batonrt/baton"
	gnet   = "github.com/panjf2000/gnet"
)

// TestDependencyDirection checks the layout rules of docs/design.md with go list -deps.
func TestDependencyDirection(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not available")
	}
	rules := []struct {
		pkg       string
		forbidden []string // import path prefixes that must not appear in pkg's deps
		stdOnly   bool     // only the standard library (and pkg itself)
	}{
		{pkg: "httpcodec", stdOnly: true},
		{pkg: "internal/router", stdOnly: true},
		{pkg: "internal/clock", stdOnly: true},
		{pkg: "internal/publish", stdOnly: true},
		{pkg: "accounting", forbidden: []string{gnet, module + "/loop", module + "/scheduler", module + "/offload", module + "/httpcodec"}},
		{pkg: "offload", forbidden: []string{gnet, module + "/loop"}},
		{pkg: "scheduler", forbidden: []string{gnet, module + "/httpcodec", module + "/loop", module + "/offload"}},
	}
	for _, r := range rules {
		deps, ok := listDeps(t, module+"/"+r.pkg)
		if !ok {
			continue // the package does not exist yet
		}
		for _, d := range deps {
			if d == module+"/"+r.pkg {
				continue
			}
			if r.stdOnly && isNonStd(d) {
				t.Errorf("%s must use the standard library only, but depends on %s", r.pkg, d)
			}
			for _, f := range r.forbidden {
				if strings.HasPrefix(d, f) {
					t.Errorf("%s must not depend on %s (found %s)", r.pkg, f, d)
				}
			}
		}
	}
	// Only loop may import gnet among baton's packages.
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, gnet) && fields[0] != module+"/loop" {
				t.Errorf("%s imports %s: only loop may import gnet", fields[0], imp)
			}
		}
	}
	// examples and bench use public packages only.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !(strings.HasPrefix(fields[0], module+"/examples") || strings.HasPrefix(fields[0], module+"/bench")) {
			continue
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module+"/internal") || strings.HasPrefix(imp, gnet) {
				t.Errorf("%s imports %s: examples and bench use public APIs only", fields[0], imp)
			}
		}
	}
}

// listDeps lists pkg's dependencies; ok is false when the package does not exist yet.
func listDeps(t *testing.T, pkg string) (deps []string, ok bool) {
	dir := "../../" + strings.TrimPrefix(pkg, module+"/")
	if _, err := os.Stat(dir); err != nil {
		return nil, false
	}
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Errorf("go list -deps %s: %v", pkg, err)
		return nil, false
	}
	return strings.Fields(string(out)), true
}

func isNonStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return strings.Contains(first, ".")
}
