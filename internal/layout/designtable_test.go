package layout

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDesignFileTable keeps docs/design.md's file tables in step with the tree: every Go
// file of package loop and of its feature packages (test files aside) is named in a table
// row of the section "## loop" (loop's own files as `name.go`, a feature package's as
// `pkg/name.go`), and every file a row names exists.
func TestDesignFileTable(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	require.NoError(t, err)
	sec := string(doc)
	start := strings.Index(sec, "\n## loop")
	require.GreaterOrEqual(t, start, 0, "docs/design.md has no section \"## loop\"")
	sec = sec[start+1:]
	if end := strings.Index(sec[3:], "\n## "); end >= 0 {
		sec = sec[:end+3]
	}
	named := map[string]bool{}
	cell := regexp.MustCompile("`([a-z0-9_/]+\\.(?:go|html))`")
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		first := strings.SplitN(strings.TrimPrefix(line, "|"), "|", 2)[0]
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			named[m[1]] = true
		}
	}
	var files []string
	loopDir := filepath.Join(root, "loop")
	require.NoError(t, filepath.WalkDir(loopDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if strings.HasSuffix(name, "_test.go") || !(strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".html")) {
			return nil
		}
		rel, _ := filepath.Rel(loopDir, path)
		files = append(files, filepath.ToSlash(rel))
		return nil
	}))
	sort.Strings(files)
	for _, f := range files {
		assert.True(t, named[f], "loop/%s is in no row of docs/design.md's file tables (section \"## loop\")", f)
	}
	for f := range named {
		_, err := os.Stat(filepath.Join(loopDir, filepath.FromSlash(f)))
		assert.NoError(t, err, "docs/design.md names %s, which is not in loop/", f)
	}
}
