package scheduler

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunInlinesStartSlice binds run's hand-inlined copy of startSlice to the original: the
// statements run makes before it switches into a task (t.resume()) must read as
// startSlice's body, statement for statement.
func TestRunInlinesStartSlice(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "scheduler.go", nil, 0)
	require.NoError(t, err)
	print := func(stmts []ast.Stmt) string {
		var b bytes.Buffer
		for _, s := range stmts {
			require.NoError(t, printer.Fprint(&b, fset, s))
			b.WriteByte('\n')
		}
		return b.String()
	}
	var orig, copied string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		switch fn.Name.Name {
		case "startSlice":
			orig = print(fn.Body.List)
		case "run":
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				loop, ok := n.(*ast.ForStmt)
				if !ok || copied != "" {
					return true
				}
				list := loop.Body.List
				start, end := -1, -1
				for i, s := range list {
					src := print([]ast.Stmt{s})
					if start < 0 && strings.HasPrefix(src, "if t.resume == nil") {
						start = i
					}
					if start >= 0 && strings.TrimSpace(src) == "t.resume()" {
						end = i
						break
					}
				}
				if start >= 0 && end > start {
					copied = print(list[start:end])
				}
				return true
			})
		}
	}
	require.NotEmpty(t, orig, "no startSlice in scheduler.go")
	require.NotEmpty(t, copied, "no copy of startSlice before t.resume() in run's loop")
	require.Equal(t, orig, copied, "run's inlined copy of startSlice has drifted from the original")
}
