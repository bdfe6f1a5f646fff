package layout

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	module   = "github.com/batonrt/baton"
	gnet     = "github.com/panjf2000/gnet"
	recorder = module + "/internal/recorder"  // the loop's recorders: imported by loop only
	codec    = module + "/internal/httpcodec" // HTTP/1.1 and RFC 6455 codec: imported by loop and packages under loop/ only
	views    = module + "/internal/render"    // the stats pages' views of the figures: imported by loop, packages under loop/ and the recorders only
)

// TestDependencyDirection checks the layout rules of docs/design.md with go list -deps.
func TestDependencyDirection(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not available")
	}
	rules := []struct {
		pkg       string
		forbidden []string // import path prefixes that must not appear in pkg's deps
		allowed   []string // exceptions to forbidden and stdOnly: import paths, or prefixes ending in "/"
		stdOnly   bool     // only the standard library (and pkg itself, and allowed)
	}{
		{pkg: "internal/httpcodec", stdOnly: true},
		{pkg: "internal/router", stdOnly: true},
		{pkg: "internal/clock", stdOnly: true},
		{pkg: "internal/publish", stdOnly: true},
		{pkg: "internal/invariants", stdOnly: true},
		{pkg: "internal/alarm", forbidden: []string{gnet, module + "/"}}, // x/sys only: scheduler's tests use it
		// accounting is a leaf for its importers: the standard library only. The histograms
		// are baton's own, over the standard library and accounting's Summary
		// (hdrhistogram-go's go.mod would put gonum in every importer's module graph).
		{pkg: "accounting", stdOnly: true},
		{pkg: "internal/hdr", stdOnly: true, allowed: []string{module + "/accounting"}},
		// The recorders: the standard library, x/sys, their data types and histograms.
		{pkg: "internal/recorder", stdOnly: true, allowed: []string{module + "/accounting", module + "/internal/hdr", views, "golang.org/x/sys/"}},
		// The views of the figures: the standard library and the figures' types.
		{pkg: "internal/render", stdOnly: true, allowed: []string{module + "/accounting", module + "/internal/hdr"}},
		{pkg: "offload", forbidden: []string{gnet, module + "/loop"}},
		{pkg: "internal/scheduler", forbidden: []string{gnet, codec, module + "/loop", module + "/offload"}},
		// The room directory's interface and embedded backend: the standard library only
		// (and the lease clock it shares with the etcd backend), so that loop (and its room
		// package) can use it; the etcd backend is a module of its own (directory/etcd).
		{pkg: "directory", stdOnly: true, allowed: []string{module + "/internal/leaseclock"}},
		{pkg: "internal/leaseclock", stdOnly: true},
		{pkg: "directory/directorytest", forbidden: []string{gnet, module + "/loop", module + "/internal/scheduler", module + "/offload", codec, etcdModules, grpcModules}},
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
			assert.False(t, r.stdOnly && isNonStd(d) && !allowedDep(r.allowed, d), "%s must use the standard library only, but depends on %s", r.pkg, d)
			for _, f := range r.forbidden {
				assert.False(t, strings.HasPrefix(d, f) && !allowedDep(r.allowed, d), "%s must not depend on %s (found %s)", r.pkg, f, d)
			}
		}
	}
	// Only loop may import gnet among baton's packages.
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	require.NoError(t, err, "go list: %s", stderrOf(err))
	// The same with the packages' tests' imports, for the recorders' rule.
	withTests, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", module+"/...").Output()
	require.NoError(t, err, "go list: %s", stderrOf(err))
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		for _, imp := range fields[1:] {
			assert.False(t, strings.HasPrefix(imp, gnet) && fields[0] != module+"/loop", "%s imports %s: only loop may import gnet", fields[0], imp)
		}
	}
	// The loop's recorders are the loop's: no other package imports them (their own
	// external tests aside).
	for _, line := range strings.Split(strings.TrimSpace(string(withTests)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == module+"/loop" || fields[0] == recorder {
			continue
		}
		assert.False(t, slices.Contains(fields[1:], recorder), "%s imports %s: only loop may", fields[0], recorder)
	}
	// The codec and the views are the engine's: loop and the feature packages under loop/
	// (WebSocket, the net/http adapter, the stats pages) import them, nothing else does
	// (the recorders aside, for the views: they count over the window the views name).
	for _, line := range strings.Split(strings.TrimSpace(string(withTests)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == module+"/loop" || strings.HasPrefix(fields[0], module+"/loop/") {
			continue
		}
		assert.False(t, fields[0] != codec && slices.Contains(fields[1:], codec), "%s imports %s: only loop and the packages under loop/ may", fields[0], codec)
		assert.False(t, fields[0] != views && fields[0] != recorder && slices.Contains(fields[1:], views), "%s imports %s: only loop, the packages under loop/ and %s may", fields[0], views, recorder)
	}
	// examples use public packages only.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module+"/examples") {
			continue
		}
		for _, imp := range fields[1:] {
			assert.False(t, strings.HasPrefix(imp, module+"/internal") || strings.HasPrefix(imp, gnet), "%s imports %s: examples use public APIs only", fields[0], imp)
		}
	}
}

// TestNestedModulesUsePublicPackages checks that the nested modules that hold programs
// or backends (bench/, the harness; examples/gameserver/, the flagship example;
// examples/newcomer/, the small app and its net/http twin;
// directory/etcd/, the directory's etcd backend: modules of their own so that their
// dependencies, plotting, SQLite, the etcd client and gRPC, stay out of loop's importers'
// module graphs) import only baton's public packages, in their code and in their tests: no
// internal/ package and no gnet. Go's internal rule goes by import path, not by module, so
// the compiler would let them. The one exemption is nestedInternal.
func TestNestedModulesUsePublicPackages(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not available")
	}
	for _, sub := range []string{"bench", "examples/gameserver", "examples/newcomer", "directory/etcd"} {
		t.Run(sub, func(t *testing.T) {
			dir := filepath.Join(repoRoot(t), filepath.FromSlash(sub))
			_, err := os.Stat(filepath.Join(dir, "go.mod"))
			require.NoError(t, err, "%s must be a module of its own (%s/go.mod)", sub, sub)
			cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./...")
			cmd.Dir = dir
			out, err := cmd.Output()
			require.NoError(t, err, "go list ./... in %s/: %s", sub, stderrOf(err))
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			require.NotEmpty(t, lines)
			for _, line := range lines {
				fields := strings.Fields(line)
				if len(fields) == 0 {
					continue
				}
				assert.True(t, fields[0] == module+"/"+sub || strings.HasPrefix(fields[0], module+"/"+sub+"/"),
					"package %s of %s/go.mod is outside %s/%s", fields[0], sub, module, sub)
				for _, imp := range fields[1:] {
					if nestedInternal[fields[0]] == imp {
						continue
					}
					assert.False(t, strings.HasPrefix(imp, module+"/internal") || strings.HasPrefix(imp, gnet), "%s imports %s: %s uses public APIs only", fields[0], imp, sub)
				}
			}
		})
	}
}

// nestedInternal maps the packages of nested modules that may import one baton internal
// package to that package. bench/internal/hdrdiff's tests check baton's own HDR histogram
// against hdrhistogram-go value for value: the internal histogram is their subject, and
// hdrhistogram-go (which requires gonum) may not enter the root module to do it there.
// directory/etcd keeps its lease with internal/leaseclock, as directory's embedded backend
// does: one lease clock for the two backends of this repository, not part of the API.
var nestedInternal = map[string]string{
	module + "/bench/internal/hdrdiff": module + "/internal/hdr",
	module + "/directory/etcd":         module + "/internal/leaseclock",
}

// TestRootModuleHoldsNoExamplePrograms checks that examples/gameserver is not part of the
// root module (its SQLite driver would then be a requirement of every importer of loop).
func TestRootModuleHoldsNoExamplePrograms(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not available")
	}
	out := run(t, repoRoot(t), "go", "list", "./examples/...")
	for _, p := range strings.Fields(out) {
		assert.False(t, strings.HasPrefix(p, module+"/examples/gameserver"), "%s is in the root module; examples/gameserver has its own go.mod", p)
	}
	reqs := run(t, repoRoot(t), "go", "list", "-m", "all")
	assert.NotContains(t, reqs, sqliteModules, "the root module's graph holds SQLite; it belongs to examples/gameserver/go.mod")
}

// TestRootModuleHoldsNoEtcdClient checks that the directory's etcd backend is not part of
// the root module and that the root module's graph holds neither the etcd client nor gRPC:
// directory/etcd has its own go.mod, so that importers of loop and directory get neither.
func TestRootModuleHoldsNoEtcdClient(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not available")
	}
	root := repoRoot(t)
	_, err := os.Stat(filepath.Join(root, "directory", "etcd", "go.mod"))
	require.NoError(t, err, "directory/etcd must be a module of its own (directory/etcd/go.mod)")
	for _, p := range strings.Fields(run(t, root, "go", "list", "./...")) {
		assert.False(t, strings.HasPrefix(p, module+"/directory/etcd"), "%s is in the root module; directory/etcd has its own go.mod", p)
	}
	reqs := run(t, root, "go", "list", "-m", "all")
	for _, bad := range []string{etcdModules, grpcModules, clientGolang, otelModules} {
		assert.NotContains(t, reqs, bad, "the root module's graph holds %s; it belongs to a nested module (directory/etcd, promexport, otelbaton)", bad)
	}
}

// etcdModules and grpcModules are the path prefixes of the etcd client's modules and of
// gRPC, which directory/etcd requires and the root module must not; clientGolang is
// Prometheus's client, promexport's; otelModules is OpenTelemetry, otelbaton's.
const (
	etcdModules  = "go.etcd.io/"
	grpcModules  = "google.golang.org/grpc"
	clientGolang = "github.com/prometheus/client_golang"
	otelModules  = "go.opentelemetry.io/"
)

// plottingModules are path fragments of the bench harness's plotting modules (gonum/plot, the
// gonum numeric module under it, its fonts, LaTeX and PDF writers), which must stay out of the
// module graph of loop's importers.
var plottingModules = []string{"gonum", "go-fonts", "go-latex", "go-pdf"}

// hdrhistogram is the bench module's histogram module. Its go.mod requires gonum.org/v1/gonum
// for its own tests, so a root module requiring it puts gonum in the module graph of every
// program importing loop (a requirement nothing compiles, but one that go list -m all
// shows); baton has its own histogram (internal/hdr) instead, and the root module must not
// require hdrhistogram-go at all.
const hdrhistogram = "github.com/HdrHistogram/hdrhistogram-go"

// sqliteModules is the path fragment of the example game server's SQLite driver and the C
// library translation under it (modernc.org/sqlite, libc, mathutil, memory...), which must
// stay out of loop's importers' module graphs: examples/gameserver has its own go.mod.
const sqliteModules = "modernc.org/"

// TestLoopConsumerModuleGraph builds a throwaway module that imports only loop and
// directory, as a user's game backend would, runs go mod tidy in it and checks its module
// graph: neither go list -m all nor the requirement graph may hold hdrhistogram-go, any
// plotting module (plottingModules: gonum, gonum/plot and its fonts, LaTeX and PDF
// modules), SQLite, the etcd client, gRPC or Prometheus's client. Only the local
// module cache is used (GOPROXY=off); a module missing from it skips the test.
func TestLoopConsumerModuleGraph(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not available")
	}
	root := repoRoot(t)
	var directive string
	for _, line := range strings.Split(run(t, root, "go", "mod", "edit", "-print"), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			directive = strings.TrimSpace(v)
		}
	}
	require.NotEmpty(t, directive, "no go directive in %s/go.mod", root)

	dir := t.TempDir()
	const consumer = "example.com/consumer"
	goMod := fmt.Sprintf("module %s\n\ngo %s\n\nrequire %s v0.0.0\n\nreplace %s => %s\n", consumer, directive, module, module, root)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644))
	main := "package main\n\nimport (\n\t_ \"" + module + "/directory\"\n\t_ \"" + module + "/loop\"\n)\n\nfunc main() {}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644))
	// baton's go.sum holds every checksum the consumer needs, so no checksum database is asked.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	offline(t, dir, "mod", "tidy")
	// -e: modules whose .info file is not cached still list (only their dates are missing).
	all := strings.Fields(offline(t, dir, "list", "-m", "-e", "-f", "{{.Path}}", "all"))
	require.Contains(t, all, module)
	require.Contains(t, all, gnet+"/v2", "the consumer's module graph must hold loop's dependencies")
	forbidden := append([]string{hdrhistogram, sqliteModules, etcdModules, grpcModules, clientGolang, otelModules}, plottingModules...)
	for _, m := range all {
		for _, bad := range forbidden {
			assert.NotContains(t, m, bad, "a module importing only loop and directory has %s in its module graph; it belongs to a nested module (bench, examples/gameserver, directory/etcd, promexport)", m)
		}
	}

	// Walk the whole requirement graph from the consumer: no forbidden module may be
	// reachable, and a failure names the chain that reaches it.
	edges := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(offline(t, dir, "mod", "graph")), "\n") {
		from, to, ok := strings.Cut(line, " ")
		require.True(t, ok, "go mod graph line %q", line)
		edges[from] = append(edges[from], to)
	}
	via := map[string]string{consumer: ""}
	queue := []string{consumer}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, bad := range forbidden {
			if strings.Contains(n, bad) {
				chain := n
				for p := via[n]; p != ""; p = via[p] {
					chain = p + " -> " + chain
				}
				assert.Failf(t, "a module importing only loop and directory reaches a forbidden module", "%s: %s", n, chain)
			}
		}
		for _, m := range edges[n] {
			if _, seen := via[m]; !seen {
				via[m] = n
				queue = append(queue, m)
			}
		}
	}
	require.Contains(t, via, module+"@v0.0.0", "go mod graph must show the consumer requiring baton")
}

// offline runs "go args..." in dir with the local module cache only and returns its standard
// output. A module missing from the cache skips the test.
func offline(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && strings.Contains(stderr.String(), "GOPROXY=off") {
		t.Skipf("go %s: a module is missing from the local module cache; run `go mod download` and then `go mod tidy -diff` (which also fetches dependencies' test dependencies) in the repository root and in bench/, as .ci/run does:\n%s", strings.Join(args, " "), stderr.String())
	}
	require.NoError(t, err, "go %s in %s:\n%s", strings.Join(args, " "), dir, stderr.String())
	return string(out)
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
	if !assert.NoError(t, err, "go list -deps %s: %s", pkg, stderrOf(err)) {
		return nil, false
	}
	return strings.Fields(string(out)), true
}

func isNonStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return strings.Contains(first, ".")
}

// allowedDep reports whether dep is one of allowed: an import path, or under a prefix
// ending in "/".
func allowedDep(allowed []string, dep string) bool {
	for _, a := range allowed {
		if dep == a || strings.HasSuffix(a, "/") && strings.HasPrefix(dep, a) {
			return true
		}
	}
	return false
}
