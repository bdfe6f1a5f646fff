//go:build !race

package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium returns the path of a Chromium binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("gameserver: no Chromium on PATH (chromium, chromium-browser, google-chrome or headless-shell): " +
		"the browser test needs one; on Debian: apt-get install chromium (.ci/run installs it)")
	return ""
}

// TestBrowserPlays opens / in headless Chromium (chromedp, the version integration/ pins),
// which joins a match over WebSocket, and checks that the canvas is redrawn from the states,
// that the score changes, that the page's dashboard link points at the admin address, and
// that the page keeps the player key it was issued (and only that key queues as its player).
// It is built without -race only (browser_race_test.go says why); `make test` runs it in a
// line of its own. Skipped where no Chromium is installed.
func TestBrowserPlays(t *testing.T) {
	exe := chromium(t)
	opts := testOptions(t.TempDir())
	opts.Size, opts.Wait, opts.Match = 2, 200*time.Millisecond, 20*time.Second
	s := start(t, opts)

	copts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1200, 800))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), copts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	defer tcancel()

	type view struct {
		Frames    int    `json:"frames"`
		Status    string `json:"status"`
		Total     int    `json:"total"`
		Canvas    string `json:"canvas"`
		Dashboard string `json:"dashboard"`
	}
	const probe = `JSON.stringify({frames: batonFrames(), status: document.getElementById("status").textContent,
		total: (batonState() ? batonState().players.reduce((a, p) => a + p.score, 0) : 0),
		canvas: document.getElementById("arena").toDataURL(), dashboard: document.getElementById("dashboard").href})`
	read := func() view {
		var raw string
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(probe, &raw)))
		var v view
		require.NoError(t, json.Unmarshal([]byte(raw), &v))
		return v
	}
	poll := func(expr string) chromedp.Action {
		return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
	}
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(s.url("/?autoplay")),
		poll(`window.batonFrames && batonFrames() >= 5`),
	), "the page receives states over WebSocket")
	first := read()
	require.Equal(t, "http://"+s.admin+"/debug/baton/", first.Dashboard, "the dashboard link points at the admin address")

	var v view
	require.Eventually(t, func() bool {
		v = read()
		return v.Frames > first.Frames+20 && v.Total > first.Total && v.Canvas != first.Canvas
	}, 30*time.Second, 100*time.Millisecond, "the canvas is redrawn and the score changes")
	require.Equal(t, "playing", v.Status, "status line")

	// The page keeps the player key it was issued: the id is this browser's.
	var ids []string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`[localStorage.getItem("baton-player"), localStorage.getItem("baton-key") || ""]`, &ids)))
	require.Len(t, ids, 2)
	require.NotEmpty(t, ids[1], "the page stored its player key")
	code, _ := newTicketAs(t, s, ids[0], "someone else", "")
	assert.Equal(t, 401, code, "another client cannot queue as the page's player")
	code, _ = newTicketAs(t, s, ids[0], "again", ids[1])
	assert.Equal(t, 201, code, "the page's key can")
}
