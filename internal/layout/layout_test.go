package layout

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	// examples use public packages only.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module+"/examples") {
			continue
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module+"/internal") || strings.HasPrefix(imp, gnet) {
				t.Errorf("%s imports %s: examples use public APIs only", fields[0], imp)
			}
		}
	}
}

// TestBenchUsesPublicPackages checks that the bench harness, a module of its own (bench/go.mod)
// so that its plotting dependencies stay out of loop's importers' module graphs, imports
// only baton's public packages: no internal/ package and no gnet.
func TestBenchUsesPublicPackages(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not available")
	}
	benchDir := filepath.Join(repoRoot(t), "bench")
	if _, err := os.Stat(filepath.Join(benchDir, "go.mod")); err != nil {
		t.Fatalf("bench must be a module of its own (bench/go.mod): %v", err)
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./...")
	cmd.Dir = benchDir
	out, err := cmd.Output()
	require.NoError(t, err, "go list ./... in bench/: %s", stderrOf(err))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.NotEmpty(t, lines)
	for _, line := range lines {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		assert.True(t, strings.HasPrefix(fields[0], module+"/bench/"), "bench package %s is outside %s/bench", fields[0], module)
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module+"/internal") || strings.HasPrefix(imp, gnet) {
				t.Errorf("%s imports %s: bench uses public APIs only", fields[0], imp)
			}
		}
	}
}

// TestLoopConsumerModuleGraph builds a throwaway module that imports only loop, as a user's
// game backend would, and checks that its module graph carries none of the bench harness's
// plotting dependencies (gonum/plot and the fonts, LaTeX and PDF modules under it). Only the
// local module cache is used (GOPROXY=off).
func TestLoopConsumerModuleGraph(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not available")
	}
	root := repoRoot(t)
	goVersion := run(t, root, "go", "mod", "edit", "-print")
	var directive string
	for _, line := range strings.Split(goVersion, "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			directive = strings.TrimSpace(v)
		}
	}
	require.NotEmpty(t, directive, "no go directive in %s/go.mod", root)

	dir := t.TempDir()
	goMod := fmt.Sprintf("module example.com/consumer\n\ngo %s\n\nrequire %s v0.0.0\n\nreplace %s => %s\n", directive, module, module, root)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644))
	main := "package main\n\nimport _ \"" + module + "/loop\"\n\nfunc main() {}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644))
	// baton's go.sum holds every checksum the consumer needs, so no checksum database is asked.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir = dir
	tidy.Env = offlineEnv()
	if out, err := tidy.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "GOPROXY=off") {
			t.Skipf("a module is missing from the local module cache; run `go mod download` in the repository root first:\n%s", out)
		}
		t.Fatalf("go mod tidy in the consumer module: %v\n%s", err, out)
	}
	list := exec.Command("go", "list", "-m", "all")
	list.Dir = dir
	list.Env = offlineEnv()
	out, err := list.CombinedOutput()
	if err != nil && strings.Contains(string(out), "GOPROXY=off") {
		t.Skipf("a module is missing from the local module cache; run `go mod download` in the repository root first:\n%s", out)
	}
	require.NoError(t, err, "go list -m all in the consumer module:\n%s", out)
	mods := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Contains(t, strings.Join(mods, "\n"), module+" v0.0.0 => "+root, "the consumer must see baton through its replace")
	for _, m := range mods {
		for _, bad := range []string{"gonum", "go-fonts", "go-latex", "go-pdf"} {
			assert.NotContains(t, m, bad, "a module importing only loop gets %q in its module graph; it belongs to the bench module", m)
		}
	}
}

// offlineEnv is the environment for go commands that must use only the local module cache.
func offlineEnv() []string {
	return append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
}

// repoRoot is the absolute path of the repository root (this package is internal/layout).
func repoRoot(t *testing.T) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return root
}

// run runs a command in dir and returns its standard output; it fails the test on error.
func run(t *testing.T, dir string, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	require.NoError(t, err, "%s %v: %s", name, args, stderrOf(err))
	return string(out)
}

// stderrOf returns the standard error captured in an *exec.ExitError, if any.
func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
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
