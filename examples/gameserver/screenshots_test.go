//go:build !race

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// TestDashboardScreenshots is a manual step, not part of the suite:
// GAMESERVER_SCREENSHOTS=DIR (docs/img to refresh docs/observability.md's) starts the real
// server as a child process on loopback with three bot arenas and one heavy arena, plays
// 40 WebSocket players in matches of 4 (one input per state received) and reads the
// leaderboard, the rooms list and profiles over HTTP (one client, a request every 10 ms at most), for 45 s so that the dashboard's
// charts have history; then headless Chromium, 1280 px wide, opens the admin address's
// dashboard and saves flagship-dashboard.png (the whole page) and flagship-dashboard-top.png
// (the first screen).
func TestDashboardScreenshots(t *testing.T) {
	dir := os.Getenv("GAMESERVER_SCREENSHOTS")
	if dir == "" {
		t.Skip("set GAMESERVER_SCREENSHOTS=DIR to take the flagship's dashboard screenshots")
	}
	exe := chromium(t)
	p := startProcess(t, "-addr 127.0.0.1:0 -admin 127.0.0.1:0 -addr-rate 1000000 -addr-burst 1000000 -bots=true -bot-rooms 3 -heavy-room -players 4 -wait 2s -match 30m -score-limit 0 -db "+t.TempDir()+"/shots.db")
	require.NotEmpty(t, p.admin, "the server printed its admin address")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws, _, err := websocket.DefaultDialer.Dial("ws://"+p.addr+"/ws?player=shot"+strconv.Itoa(i), nil)
			if err != nil {
				t.Logf("player %d: %v", i, err)
				return
			}
			defer ws.Close()
			go func() { <-stop; _ = ws.Close() }()
			var seq uint32
			for {
				var m struct {
					Type string `json:"type"`
				}
				if ws.ReadJSON(&m) != nil {
					return
				}
				if m.Type != "state" {
					continue
				}
				seq++
				if ws.WriteJSON(map[string]any{"dx": int(seq%3) - 1, "dy": int(seq/3%3) - 1, "seq": seq}) != nil {
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl := &http.Client{Timeout: 10 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			path := []string{"/leaderboard", "/rooms", "/players/shot" + strconv.Itoa(i%40), "/tickets/none"}[i%4]
			if resp, err := cl.Get("http://" + p.addr + path); err == nil {
				resp.Body.Close()
			}
		}
	}()
	time.Sleep(45 * time.Second) // the charts' history: a manual step, not a test of ordering

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer tcancel()
	poll := func(expr string) chromedp.Action {
		return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
	}
	var full, top []byte
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("http://%s/debug/baton/", p.admin)),
		poll(`Number(document.getElementById("frames").textContent) >= 3`),
		poll(`!document.getElementById("ws-section").hidden && document.querySelector("#rooms-table") !== null`),
		chromedp.CaptureScreenshot(&top),
		chromedp.FullScreenshot(&full, 100),
	))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "flagship-dashboard-top.png"), top, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "flagship-dashboard.png"), full, 0o644))
}
