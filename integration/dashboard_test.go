package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/offload"
)

// chromium returns the path of a Chromium binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("integration: no Chromium on PATH (chromium, chromium-browser, google-chrome or headless-shell); " +
		"on Debian: apt-get install chromium (.ci/run installs it)")
	return ""
}

// screenshotDir is where the screenshots go: docs/img when BATON_UPDATE_SCREENSHOTS=1
// (to refresh the ones docs/observability.md shows), a temporary directory otherwise.
func screenshotDir(t *testing.T) string {
	if os.Getenv("BATON_UPDATE_SCREENSHOTS") == "1" {
		dir := filepath.Join("..", "docs", "img")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	return t.TempDir()
}

func burn(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// The dashboard in a real browser: headless Chromium loads /debug/baton/ from an admin
// listener, waits for live frames, sees the figures change after traffic, names a task
// that stalls the loop while it stalls and lists it afterwards, and takes the screenshots
// of docs/observability.md.
func TestDashboardInChromium(t *testing.T) {
	exe := chromium(t)
	dir := screenshotDir(t)

	release := make(chan struct{})
	var stalling atomic.Bool
	srv := loop.New(looptest.Config(t, loop.Config{StallThreshold: 100 * time.Millisecond}))
	srv.Handle("GET /api/players/{id}", func(c *loop.Ctx) {
		burn(200 * time.Microsecond)
		c.String(200, `{"id":"`+c.PathValue("id")+`"}`)
	})
	srv.Handle("GET /api/slow", func(c *loop.Ctx) {
		_ = c.Sleep(15 * time.Millisecond)
		c.Bytes(204, "", nil)
	})
	srv.Handle("POST /api/save", func(c *loop.Ctx) {
		_, _ = offload.Do(c, func(context.Context) (int, error) { time.Sleep(2 * time.Millisecond); return 0, nil })
		c.Bytes(204, "", nil)
	})
	srv.Handle("GET /api/missing", func(c *loop.Ctx) { c.String(404, "no") })
	srv.Handle("GET /admin/rebuild-index", func(c *loop.Ctx) {
		stalling.Store(true)
		select { // holds the loop on purpose (bounded): the stall the dashboard must name
		case <-release:
		case <-time.After(30 * time.Second):
		}
		c.Bytes(204, "", nil)
	})
	ticker := srv.Loop(0).Go("matchmaker", func(task *loop.Task) {
		for task.Sleep(20*time.Millisecond) == nil {
			burn(500 * time.Microsecond)
		}
	})
	defer ticker.Stop()
	base := looptest.Start(t, srv)

	// The admin-address pattern: stats and dashboard on a separate loopback listener.
	mux := http.NewServeMux()
	mux.Handle("/debug/baton/", stats.Handler(srv))
	admin := httptest.NewServer(mux)
	defer admin.Close()

	cl := &http.Client{Timeout: 10 * time.Second}
	traffic := func(n int) {
		for i := range n {
			var resp *http.Response
			var err error
			switch i % 8 {
			case 0:
				resp, err = cl.Get(base + "/api/slow")
			case 1:
				resp, err = cl.Post(base+"/api/save", "application/json", nil)
			case 2:
				resp, err = cl.Get(base + "/api/missing")
			default:
				resp, err = cl.Get(fmt.Sprintf("%s/api/players/%d", base, i))
			}
			require.NoError(t, err)
			resp.Body.Close()
		}
	}
	traffic(80)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1500))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer tcancel()

	poll := func(expr string) chromedp.Action {
		return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
	}
	text := func(id string) string {
		return fmt.Sprintf(`document.getElementById(%q).textContent`, id)
	}

	// Live data arrives: frames count up and the routes table has the traffic.
	var parsed0 string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(admin.URL+"/debug/baton/"),
		poll(`Number(`+text("frames")+`) >= 2 && document.getElementById("status").className === "live"`),
		poll(`document.querySelector('#routes tr[data-name="GET /api/players/{id}"]') !== null`),
		chromedp.Text("#adm-parsed", &parsed0, chromedp.ByID),
	), "the dashboard shows no live data")
	// A server without WebSockets and rooms shows neither panel's figures.
	var hiddenWS, hiddenRooms bool
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Evaluate(`getComputedStyle(document.getElementById("ws-section")).display === "none"`, &hiddenWS),
		chromedp.Evaluate(`getComputedStyle(document.getElementById("rooms-charts")).display === "none"`, &hiddenRooms),
	))
	require.True(t, hiddenWS, "the WebSocket panel shows on a server that upgraded nothing")
	require.True(t, hiddenRooms, "the rooms charts show on a server without rooms")

	// The numbers change after traffic.
	var before int
	_, err := fmt.Sscan(parsed0, &before)
	require.NoError(t, err, "requests parsed %q", parsed0)
	traffic(120)
	require.NoError(t, chromedp.Run(ctx,
		poll(fmt.Sprintf(`Number(%s) >= %d`, text("adm-parsed"), before+120)),
		poll(`document.querySelector('#tasks tr[data-name="matchmaker"]') !== null`),
		poll(`(JSON.parse(document.getElementById("frames").textContent) >= 4)`),
	), "the figures did not follow the traffic")
	var shot []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&shot, 100)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.png"), shot, 0o644))

	// A task that stalls the loop shows by name while it stalls...
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := cl.Get(base + "/admin/rebuild-index"); err == nil {
			resp.Body.Close()
		}
	}()
	defer func() {
		if stalling.Load() {
			select {
			case <-release:
			default:
				close(release)
			}
		}
		<-done
	}()
	require.NoError(t, chromedp.Run(ctx,
		poll(`document.getElementById("stall").textContent.includes("GET /admin/rebuild-index")`),
		poll(`document.getElementById("status").className === "stalled"`),
		chromedp.CaptureScreenshot(&shot),
	), "the stalled task was not named")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard-stall.png"), shot, 0o644))
	close(release)
	<-done

	// ...and among the busiest finished tasks once it is over.
	require.NoError(t, chromedp.Run(ctx,
		poll(`document.getElementById("status").className === "live"`),
		poll(`document.querySelector('#finished tr[data-name="GET /admin/rebuild-index"]') !== null`),
		poll(`document.getElementById("stalls").textContent !== "0"`),
	), "the stalled task is not listed after the stall")
}
