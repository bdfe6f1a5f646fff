package integration

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/cors"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/requestid"
)

// corsPage fetches the API (API_BASE) from the page's own origin, the way a browser game
// on a CDN calls its backend: a simple GET, a credentialed PUT with a custom header (a
// preflight first) that reads an exposed header, and a DELETE the API does not allow.
const corsPage = `<!doctype html><meta charset="utf-8"><title>cors</title><script>
const api = "API_BASE";
window.results = {};
async function run(name, url, init) {
  try {
    const r = await fetch(url, init);
    window.results[name] = {status: r.status, body: await r.text(), id: r.headers.get("X-Request-Id") || ""};
  } catch (e) {
    window.results[name] = {error: String(e)};
  }
}
(async () => {
  await run("get", api + "/api/score");
  await run("put", api + "/api/profile", {method: "PUT", credentials: "include",
    headers: {"X-Token": "t1", "Content-Type": "application/json"}, body: "{}"});
  await run("delete", api + "/api/profile", {method: "DELETE", credentials: "include"});
  window.done = true;
})();
</script>`

// TestCORSInChromium: headless Chromium on a page of one origin calls an API on another
// (another loopback port) through loop/cors. The simple GET and the preflighted,
// credentialed PUT succeed and the page reads the exposed X-Request-Id; the DELETE's
// preflight is refused, so the browser fails the fetch and the handler never runs. The
// same page served from an origin the API does not list gets no answer it may read.
func TestCORSInChromium(t *testing.T) {
	exe := chromium(t)

	var preflights, deletes atomic.Int64
	rid, err := requestid.New(requestid.Config{})
	require.NoError(t, err)
	api := loop.New(looptest.Config(t, loop.Config{}))
	allowedPage := loop.New(looptest.Config(t, loop.Config{}))
	otherPage := loop.New(looptest.Config(t, loop.Config{}))
	var apiBase string // set before the pages are loaded
	for _, p := range []*loop.Server{allowedPage, otherPage} {
		p.Handle("GET /", func(c *loop.Ctx) {
			c.Bytes(200, "text/html; charset=utf-8", []byte(strings.Replace(corsPage, "API_BASE", apiBase, 1)))
		})
	}
	pageBase := looptest.Start(t, allowedPage)
	otherBase := looptest.Start(t, otherPage)

	mw, err := cors.New(cors.Config{
		AllowedOrigins:   []string{pageBase},
		AllowedMethods:   []string{"PUT"},
		AllowedHeaders:   []string{"X-Token"},
		ExposedHeaders:   []string{"X-Request-Id"},
		AllowCredentials: true,
	})
	require.NoError(t, err)
	api.Use(func(next loop.HandlerFunc) loop.HandlerFunc { // counts what reaches the API
		return func(c *loop.Ctx) {
			if c.Method() == "OPTIONS" {
				preflights.Add(1)
			}
			next(c)
		}
	}, rid, mw)
	api.Handle("GET /api/score", func(c *loop.Ctx) { c.String(200, "42") })
	api.Handle("PUT /api/profile", func(c *loop.Ctx) { c.String(200, "saved "+c.Header("X-Token")) })
	api.Handle("DELETE /api/profile", func(c *loop.Ctx) { deletes.Add(1); c.String(200, "deleted") })
	api.Handle("OPTIONS /{path...}", func(c *loop.Ctx) { c.Bytes(204, "", nil) })
	apiBase = looptest.Start(t, api)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe),
		chromedp.NoSandbox, chromedp.DisableGPU)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	type result struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
		ID     string `json:"id"`
		Error  string `json:"error"`
	}
	load := func(base string) map[string]result {
		ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
		defer cancel()
		ctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer tcancel()
		var got map[string]result
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"/"),
			chromedp.Poll(`window.done === true`, nil, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(20*time.Millisecond)),
			chromedp.Evaluate(`window.results`, &got)))
		return got
	}

	got := load(pageBase)
	assert.Equal(t, result{Status: 200, Body: "42", ID: got["get"].ID}, got["get"])
	assert.NotEmpty(t, got["get"].ID, "X-Request-Id is exposed to the page")
	assert.Equal(t, result{Status: 200, Body: "saved t1", ID: got["put"].ID}, got["put"])
	assert.NotEmpty(t, got["put"].ID)
	assert.NotEqual(t, got["get"].ID, got["put"].ID)
	assert.Contains(t, got["delete"].Error, "TypeError", "the refused preflight fails the fetch: %+v", got["delete"])
	assert.Zero(t, deletes.Load(), "the browser did not send the DELETE")
	assert.EqualValues(t, 2, preflights.Load(), "the PUT's and the DELETE's preflights")

	got = load(otherBase)
	for _, name := range []string{"get", "put", "delete"} {
		assert.Contains(t, got[name].Error, "TypeError", "%s from an origin not listed: %+v", name, got[name])
	}
	assert.Zero(t, deletes.Load())
}
