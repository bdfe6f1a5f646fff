package accounting

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestLeafImports checks that the package stays a leaf: the standard library, x/sys/unix
// and internal/hdr (its histograms, standard library only) only: never gnet, loop, the
// scheduler, the recorders, offload or httpcodec, nor hdrhistogram-go, whose go.mod would
// put gonum in the module graph of every program importing accounting.
func TestLeafImports(t *testing.T) {
	allowed := map[string]bool{
		"golang.org/x/sys/unix":                 true,
		"github.com/batonrt/baton/internal/hdr": true,
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && !allowed[path] {
				t.Errorf("%s imports %s: accounting is a leaf", name, path)
			}
		}
	}
}
