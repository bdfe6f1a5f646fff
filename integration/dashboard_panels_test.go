package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/loop/ws"
)

// The dashboard's panels and charts in a real browser, 1280 px wide: the history the
// server kept before the page opened, the charts' latest values, the WebSocket panel
// (one connection, its messages counted), the rooms panel with words for headers and
// formatted numbers, the routes without requests folded into one row, and nothing wider
// than the window.
func TestDashboardPanelsInChromium(t *testing.T) {
	exe := chromium(t)
	dir := screenshotDir(t)

	srv := loop.New(looptest.Config(t, loop.Config{}))
	srv.Handle("GET /api/players/{id}", func(c *loop.Ctx) { c.String(200, `{"id":"`+c.PathValue("id")+`"}`) })
	srv.Handle("GET /api/fail", func(c *loop.Ctx) { c.String(500, "no") })
	srv.Handle("GET /api/unused", func(c *loop.Ctx) { c.Bytes(204, "", nil) })
	srv.Handle("GET /ws", func(c *loop.Ctx) {
		conn, err := ws.Upgrade(c, ws.Config{})
		if err != nil {
			return
		}
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil || conn.WriteText(msg) != nil {
				return
			}
		}
	})
	srv.OnStart(func(l *loop.Loop) error {
		// A heavy room overruns its 1 ms budget on every tick; a light one does not.
		if _, err := room.New(l, room.Config[struct{}]{Name: "arena-1", Period: 20 * time.Millisecond, Budget: time.Millisecond,
			Tick: func(*room.Room[struct{}], *room.Tick[struct{}]) { burn(1500 * time.Microsecond) }}); err != nil {
			return err
		}
		_, err := room.New(l, room.Config[struct{}]{Name: "lobby", Period: 100 * time.Millisecond,
			Tick: func(*room.Room[struct{}], *room.Tick[struct{}]) {}})
		return err
	})
	base := looptest.Start(t, srv)
	admin := httptest.NewServer(stats.Handler(srv))
	defer admin.Close()
	cl := &http.Client{Timeout: 10 * time.Second}

	// One WebSocket connection, 50 messages echoed.
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	wsc, _, err := d.Dial("ws"+strings.TrimPrefix(base, "http")+"/ws", nil)
	require.NoError(t, err)
	defer wsc.Close()
	for i := range 50 {
		require.NoError(t, wsc.WriteMessage(websocket.TextMessage, []byte(fmt.Sprint(i))))
		_, _, err := wsc.ReadMessage()
		require.NoError(t, err)
	}
	for i := range 100 {
		resp, err := cl.Get(fmt.Sprintf("%s/api/players/%d", base, i))
		require.NoError(t, err)
		resp.Body.Close()
	}
	for range 5 {
		resp, err := cl.Get(base + "/api/fail")
		require.NoError(t, err)
		resp.Body.Close()
	}
	// Light traffic while the page is open, so that the charts' latest points move.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if resp, err := cl.Get(fmt.Sprintf("%s/api/players/%d", base, i)); err == nil {
				resp.Body.Close()
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// Three frames pass with no page open: the server keeps their points.
	ctx0, cancel0 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel0()
	req, err := http.NewRequestWithContext(ctx0, "GET", admin.URL+"/events", nil)
	require.NoError(t, err)
	resp, err := cl.Do(req)
	require.NoError(t, err)
	br := bufio.NewReader(resp.Body)
	for frames := 0; frames < 3; {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "data: {") {
			frames++
		}
	}
	resp.Body.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 2400))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer tcancel()
	poll := func(expr string) chromedp.Action {
		return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
	}
	var histAtFirst int
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(admin.URL+"/"),
		poll(`Number(document.getElementById("frames").textContent) >= 1`),
		chromedp.Evaluate(`hist.length`, &histAtFirst),
	))
	assert.GreaterOrEqual(t, histAtFirst, 3, "the history from before the page opened")

	seriesValue := func(chart, label string) string {
		return fmt.Sprintf(`(document.querySelector('#%s-legend [data-series=%q]') || {}).textContent`, chart, label)
	}
	require.NoError(t, chromedp.Run(ctx,
		// The WebSocket panel: one connection, its 50 messages each way.
		poll(`!document.getElementById("ws-section").hidden`),
		poll(`document.getElementById("ws-open").textContent === "1"`),
		poll(`(document.querySelector('#ws-routes tr[data-name="GET /ws"]') || {}).textContent !== undefined`),
		// The charts' latest values.
		poll(`parseFloat(`+seriesValue("chart-rate", "GET /api/players/{id}")+`) > 0`),
		poll(seriesValue("chart-ws-open", "open")+` === "1"`),
		poll(`!document.getElementById("rooms-charts").hidden`),
		poll(`parseFloat(`+seriesValue("chart-overruns", "overruns")+`) > 0`),
		// Each chart's y axis is scaled to its largest value (a number, not "-").
		poll(`parseFloat(document.getElementById("chart-overruns").dataset.top) > 0`),
		poll(`parseFloat(document.getElementById("chart-ws-msgs").dataset.top) > 0`),
		poll(`parseFloat(document.getElementById("chart-rate").dataset.top) > 0`),
		// The rooms panel.
		poll(`document.querySelector('#rooms-table tr[data-name="arena-1"]') !== null`),
		poll(`document.getElementById("routes-folded") !== null`),
	), "the panels did not render")

	var got struct {
		WSRow       []string `json:"ws_row"`
		RoomHeaders []string `json:"room_headers"`
		Folded      string   `json:"folded"`
		FoldedTitle string   `json:"folded_title"`
		LongNumbers []string `json:"long_numbers"`
		PageWidth   int      `json:"page_width"`
		WindowWidth int      `json:"window_width"`
		CutOff      []string `json:"cut_off"`
		ErrorsRate  string   `json:"errors_rate"`
	}
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`({
		ws_row: [...document.querySelectorAll('#ws-routes tr[data-name="GET /ws"] td')].map((td) => td.textContent),
		room_headers: [...document.querySelectorAll('#rooms-table th')].map((th) => th.textContent),
		folded: document.getElementById("routes-folded").textContent,
		folded_title: document.getElementById("routes-folded").title,
		long_numbers: document.querySelector("main").innerText.match(/\d\.\d{4,}/g) || [],
		page_width: document.documentElement.scrollWidth,
		window_width: window.innerWidth,
		cut_off: [...document.querySelectorAll("section:not([hidden])")].filter((s) => s.scrollWidth > s.clientWidth + 1).map((s) => s.id),
		errors_rate: (document.querySelector('#routes tr[data-name="GET /api/fail"] td:nth-child(4)') || {}).textContent,
	})`, &got)))
	t.Logf("rendered: %+v", got)
	require.Len(t, got.WSRow, 9)
	assert.Equal(t, []string{"GET /ws", "1", "1", "50", "50"}, got.WSRow[:5], "route, open, upgrades, messages in, out")
	for _, h := range got.RoomHeaders {
		assert.NotContains(t, h, "_", "a header in words: %q", h)
	}
	assert.Contains(t, got.RoomHeaders, "loop share 10 s")
	assert.Equal(t, "1 route without requests", got.Folded)
	assert.Equal(t, "GET /api/unused", got.FoldedTitle)
	assert.Empty(t, got.LongNumbers, "numbers formatted like the other panels")
	assert.Equal(t, "5", got.ErrorsRate, "the 5xx column")
	assert.LessOrEqual(t, got.PageWidth, got.WindowWidth, "nothing wider than a 1280 px window")
	assert.Empty(t, got.CutOff, "sections whose content is cut off at 1280 px")

	var shot []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&shot, 100)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard-panels.png"), shot, 0o644))
}
