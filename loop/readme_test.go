package loop

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeSnippetCompiles builds the README's first Go snippet as the body of a main
// function, with the names it leaves to the reader (Profile, db and Move) declared, so the
// README cannot drift from the API.
func TestReadmeSnippetCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not available")
	}
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	text := string(readme)
	start := strings.Index(text, "```go\n")
	require.GreaterOrEqual(t, start, 0, "README has no Go snippet")
	text = text[start+len("```go\n"):]
	end := strings.Index(text, "```")
	require.Greater(t, end, 0)
	snippet := text[:end]
	prog := `package main

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/offload"
)

type Profile struct{ Name string }

type Move struct{ DX, DY int }

var db struct {
	Load func(ctx context.Context, id string) (Profile, error)
}

func main() {
` + snippet + `}
`
	dir, err := os.MkdirTemp("..", ".readme-snippet-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o644))
	cmd := exec.Command(goBin, "vet", "./"+filepath.Base(dir))
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the README snippet does not compile:\n%s\n%s", out, prog)
}

// TestReadmeSnippetKeepsStatsOffThePublicPort: the first snippet serves the stats pages
// (goroutine stacks with ?stacks=1) on a loopback admin listener, not on the server's own
// port, as the README's Observability section says.
func TestReadmeSnippetKeepsStatsOffThePublicPort(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	text := string(readme)
	start := strings.Index(text, "```go\n")
	require.GreaterOrEqual(t, start, 0, "README has no Go snippet")
	text = text[start:]
	snippet := text[:strings.Index(text[3:], "```")+3]
	require.NotContains(t, snippet, "HandleStats", "the stats pages are on the public port")
	require.Regexp(t, `http\.ListenAndServe\("127\.0\.0\.1:\d+", srv\.StatsHandler\(\)\)`, snippet)
}
