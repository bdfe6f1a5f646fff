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
	"github.com/batonrt/baton/loop/stats"
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
	require.NotContains(t, snippet, "stats.Mount", "the stats pages are on the public port")
	require.Regexp(t, `http\.ListenAndServe\("127\.0\.0\.1:\d+", stats\.Handler\(srv\)\)`, snippet)
}

// TestReadmeInstallFromCheckout runs the README's Install recipes on a new module against
// this checkout: the go mod edit (replace) commands, then go build of a program importing
// loop and the nested module promexport; and the go work variant. The module is not
// published, so a plain go get cannot work; these must.
func TestReadmeInstallFromCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not available")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	text := string(readme)
	start := strings.Index(text, "\n## Install\n")
	require.GreaterOrEqual(t, start, 0, "README has no Install section")
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var edits []string
	var workInit string
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		block = block[:strings.Index(block, "```")]
		for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
			switch {
			case strings.HasPrefix(line, "go mod edit ") || line == "go mod tidy":
				edits = append(edits, line)
			case strings.HasPrefix(line, "go work init "):
				workInit = line
			}
		}
	}
	require.Len(t, edits, 3, "the root's and promexport's go mod edit, then go mod tidy: %q", edits)
	require.NotEmpty(t, workInit, "the go work recipe")
	require.NotContains(t, section, "@latest", "go get @latest cannot fetch an unpublished module")

	const prog = `package main

import (
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/promexport"
)

func main() {
	srv := loop.New(loop.Config{})
	_ = promexport.Registry(srv)
}
`
	run := func(t *testing.T, dir string, env []string, line string) {
		t.Helper()
		args := strings.Fields(strings.ReplaceAll(line, "../baton", root))
		require.Equal(t, "go", args[0])
		cmd := exec.Command(goBin, args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s:\n%s", line, out)
	}
	newModule := func() string {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/app\n\ngo 1.26.0\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o644))
		return dir
	}

	t.Run("replace", func(t *testing.T) {
		dir := newModule()
		noWork := []string{"GOWORK=off", "GOFLAGS=-mod=mod"}
		for _, line := range edits {
			run(t, dir, noWork, line)
		}
		run(t, dir, noWork, "go build ./...")
	})
	t.Run("workspace", func(t *testing.T) {
		dir := newModule()
		run(t, dir, nil, workInit)
		run(t, dir, []string{"GOWORK=" + filepath.Join(dir, "go.work")}, "go build ./...")
	})
}
