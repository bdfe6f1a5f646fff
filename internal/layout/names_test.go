package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nameCount is what a public package exports: names (types, functions, methods of exported
// types, constants, variables) and, apart, the exported fields of its exported structs.
type nameCount struct {
	names, fields int
}

// Budgets of exported names (issue 26): no public package above perPackageBudget, loop at most
// loopBudget, all public packages of the root module together under totalBudget. Fields are
// counted apart and have no budget.
const (
	perPackageBudget = 120
	loopBudget       = 120
	totalBudget      = 450
)

// TestExportedNameBudget counts the exported names of every public package of the root
// module (not internal/, not examples/, not test files) with go/ast, logs the table, and
// fails when a package passes its budget or the packages together pass the total's.
func TestExportedNameBudget(t *testing.T) {
	counts := exportedNames(t, repoRoot(t))
	require.NotEmpty(t, counts)
	pkgs := make([]string, 0, len(counts))
	total := nameCount{}
	for p, c := range counts {
		pkgs = append(pkgs, p)
		total.names += c.names
		total.fields += c.fields
	}
	sort.Strings(pkgs)
	var b strings.Builder
	for _, p := range pkgs {
		b.WriteString("\n  " + p + ": " + strconv.Itoa(counts[p].names) + " names, " + strconv.Itoa(counts[p].fields) + " fields")
	}
	t.Logf("exported names per public package:%s\n  total: %d names, %d fields", b.String(), total.names, total.fields)

	require.Contains(t, counts, "loop", "the counter must find package loop")
	for _, p := range pkgs {
		budget := perPackageBudget
		if p == "loop" {
			budget = loopBudget
		}
		assert.LessOrEqual(t, counts[p].names, budget, "package %s exports %d names, over its budget of %d", p, counts[p].names, budget)
	}
	assert.Less(t, total.names, totalBudget, "the public packages export %d names together, over the budget of %d", total.names, totalBudget)
}

// TestExportedNameCounter checks the counter on a package written for it.
func TestExportedNameCounter(t *testing.T) {
	dir := t.TempDir()
	src := `package p
type T struct{ A, B int; c int }
type u struct{ D int }
func F() {}
func (T) M() {}
func (*T) N() {}
func (u) O() {}
const C, c2 = 1, 2
var V = 3
type I interface{ X() }
`
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "p"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p", "p.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p", "p_test.go"), []byte("package p\nfunc TestX() {}\n"), 0o644))
	counts := exportedNames(t, dir)
	// T, F, T.M, T.N, C, V, I: 7 names; T.A, T.B: 2 fields (u is unexported, its method
	// and field do not count).
	assert.Equal(t, map[string]nameCount{"p": {names: 7, fields: 2}}, counts)
}

// exportedNames walks root for the public packages of its module and counts their exported
// names. Nested modules (a go.mod below root), internal/, examples/, testdata and hidden
// folders are skipped.
func exportedNames(t *testing.T, root string) map[string]nameCount {
	t.Helper()
	counts := map[string]nameCount{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		base := d.Name()
		if rel != "." {
			if strings.HasPrefix(base, ".") || base == "testdata" || base == "internal" || base == "examples" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		var files []*ast.File
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(path, e.Name()), nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			if f.Name.Name != "main" {
				files = append(files, f)
			}
		}
		if c := countFiles(files); c.names > 0 || c.fields > 0 {
			counts[rel] = c
		}
		return nil
	})
	require.NoError(t, err)
	return counts
}

// countFiles counts the exported names of one package's files.
func countFiles(files []*ast.File) nameCount {
	var c nameCount
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil || receiverExported(d.Recv) {
					c.names++
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						c.names++
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									if n.IsExported() {
										c.fields++
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								c.names++
							}
						}
					}
				}
			}
		}
	}
	return c
}

// receiverExported reports whether a method's receiver type is exported (methods of
// unexported types are not part of the API).
func receiverExported(recv *ast.FieldList) bool {
	if recv == nil || len(recv.List) == 0 {
		return false
	}
	e := recv.List[0].Type
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
