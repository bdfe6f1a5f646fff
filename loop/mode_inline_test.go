package loop

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDispatchInlinesLoopModeStart binds dispatch's hand-inlined first-slice block to its
// original in loopMode.start: the two must read the same, statement for statement.
func TestDispatchInlinesLoopModeStart(t *testing.T) {
	fset := token.NewFileSet()
	block := func(file, fn, cond string) string {
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		require.NoError(t, err)
		var out string
		ast.Inspect(f, func(n ast.Node) bool {
			d, ok := n.(*ast.FuncDecl)
			if !ok || d.Name.Name != fn {
				return true
			}
			ast.Inspect(d.Body, func(n ast.Node) bool {
				st, ok := n.(*ast.IfStmt)
				if !ok || out != "" {
					return true
				}
				var c bytes.Buffer
				require.NoError(t, printer.Fprint(&c, fset, st.Cond))
				if c.String() != cond {
					return true
				}
				var b bytes.Buffer
				for _, s := range st.Body.List {
					require.NoError(t, printer.Fprint(&b, fset, s))
					b.WriteByte('\n')
				}
				out = b.String()
				return false
			})
			return false
		})
		require.NotEmpty(t, out, "%s: no `if %s` block in %s", file, cond, fn)
		return out
	}
	orig := block("mode.go", "start", "first")
	copied := block("dispatch.go", "dispatch", "s.handlersOnLoop && !s.chaining.picking")
	require.Equal(t, orig, copied, "dispatch's first-slice block has drifted from loopMode.start's")
}
