package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// TestBrowserPlays opens / in headless Chromium, which joins a match over WebSocket, and
// checks that the canvas is redrawn from the states and that the score changes. It speaks
// the DevTools protocol over gorilla's WebSocket client, which is already a test
// dependency (a chromedp version belongs outside the root module). Skipped where no
// Chromium is installed (Debian: apt-get install chromium).
func TestBrowserPlays(t *testing.T) {
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("no Chromium on PATH (chromium, chromium-browser or google-chrome): the browser test needs one (Debian: apt-get install chromium)")
	}
	opts := testOptions(t.TempDir())
	opts.Size, opts.Wait, opts.Match = 2, 200*time.Millisecond, 20*time.Second
	s := start(t, opts)

	cmd := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--remote-debugging-port=0", "--user-data-dir="+t.TempDir(), "--window-size=1200,800", "about:blank")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	devtools := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "DevTools listening on "); ok {
				devtools <- u
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var browserURL string
	select {
	case browserURL = <-devtools:
	case <-time.After(30 * time.Second):
		t.Fatal("Chromium did not print its DevTools address within 30 s")
	}
	host := strings.TrimPrefix(browserURL, "ws://")
	host, _, _ = strings.Cut(host, "/")

	var pageURL string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + host + "/json/list")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var targets []struct {
			Type string `json:"type"`
			URL  string `json:"webSocketDebuggerUrl"`
		}
		if json.NewDecoder(resp.Body).Decode(&targets) != nil {
			return false
		}
		for _, tg := range targets {
			if tg.Type == "page" {
				pageURL = tg.URL
				return true
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "a page target")
	cdp, _, err := websocket.DefaultDialer.Dial(pageURL, nil)
	require.NoError(t, err)
	defer cdp.Close()
	id := 0
	call := func(method string, params map[string]any) json.RawMessage {
		id++
		require.NoError(t, cdp.WriteJSON(map[string]any{"id": id, "method": method, "params": params}))
		for {
			_ = cdp.SetReadDeadline(time.Now().Add(20 * time.Second))
			var m struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			require.NoError(t, cdp.ReadJSON(&m), method)
			if m.ID == id {
				require.Empty(t, m.Error, "%s failed", method)
				return m.Result
			}
		}
	}
	eval := func(expr string, v any) {
		var r struct {
			Result struct {
				Value json.RawMessage `json:"value"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal(call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}), &r))
		require.NoError(t, json.Unmarshal(r.Result.Value, v), "%s -> %s", expr, r.Result.Value)
	}

	call("Page.navigate", map[string]any{"url": "http://" + s.addr + "/?autoplay"})
	type view struct {
		Frames int    `json:"frames"`
		Status string `json:"status"`
		Total  int    `json:"total"`
		Canvas string `json:"canvas"`
	}
	const probe = `JSON.stringify(window.batonFrames ? {frames: batonFrames(), status: document.getElementById("status").textContent,
		total: (batonState() ? batonState().players.reduce((a, p) => a + p.score, 0) : 0),
		canvas: document.getElementById("arena").toDataURL()} : {frames: 0})`
	var first, v view
	var raw string
	require.Eventually(t, func() bool {
		eval(probe, &raw)
		require.NoError(t, json.Unmarshal([]byte(raw), &first))
		return first.Frames >= 5
	}, 20*time.Second, 100*time.Millisecond, "the page receives states over WebSocket")
	require.Eventually(t, func() bool {
		eval(probe, &raw)
		require.NoError(t, json.Unmarshal([]byte(raw), &v))
		return v.Frames > first.Frames+20 && v.Total > first.Total && v.Canvas != first.Canvas
	}, 20*time.Second, 100*time.Millisecond, "the canvas is redrawn and the score changes")
	require.Equal(t, "playing", v.Status, fmt.Sprintf("status line: %q", v.Status))
}
