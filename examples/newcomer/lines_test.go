package main

import (
	"go/scanner"
	"go/token"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// codeLines counts the lines of the Go file at path that hold code: not blank, not only
// a comment.
func codeLines(t *testing.T, path string) int {
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	fset := token.NewFileSet()
	file := fset.AddFile(path, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, func(pos token.Position, msg string) { t.Errorf("%s: %s", pos, msg) }, 0) // comments skipped
	lines := map[int]bool{}
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue // inserted at a line's end: not code of its own
		}
		lines[fset.Position(pos).Line] = true
	}
	return len(lines)
}

// TestLineCounts counts the code lines of the app on baton (main.go) and of its twin on
// net/http + chi + gorilla/websocket + client_golang + otelhttp (stdlib/main.go): the same
// features, held to the same test (internal/apptest). The figures are in README.md beside this file.
func TestLineCounts(t *testing.T) {
	baton, std := codeLines(t, "main.go"), codeLines(t, "stdlib/main.go")
	t.Logf("code lines (not blank, not comments): baton %d, net/http+chi+gorilla %d", baton, std)
	assert.Greater(t, baton, 50, "the counter missed code")
	assert.Less(t, baton, std, "the app on baton is not shorter than its twin")
}
