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
// and hdrhistogram-go only (never gnet, loop, scheduler, offload or httpcodec).
func TestLeafImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/HdrHistogram/hdrhistogram-go": true,
		"golang.org/x/sys/unix":                   true,
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
