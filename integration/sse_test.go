package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/sse"
)

// ssePage follows /events with the browser's own EventSource and keeps what it received.
const ssePage = `<!doctype html><meta charset="utf-8"><title>sse</title><body><script>
window.got = []; window.opens = 0; window.ended = false;
const es = new EventSource("/events");
es.onopen = () => { window.opens++; };
window.errs = 0; es.onerror = () => { window.errs++; };
es.addEventListener("goal", (e) => window.got.push(e.lastEventId + ":" + e.data));
es.addEventListener("close", (e) => { window.ended = true; es.close(); });
</script>`

// Server-Sent Events in a real browser: headless Chromium's EventSource receives the
// events of a loop/sse broker; when the server closes the connection under it, the
// browser reconnects by itself with Last-Event-ID, and the events published meanwhile
// arrive once, in order; a drain ends the stream with the final event.
func TestSSEInChromium(t *testing.T) {
	exe := chromium(t)
	srv := loop.New(looptest.Config(t, loop.Config{}))
	b, err := sse.New(srv, sse.Config{Name: "goals", Retry: 100 * time.Millisecond})
	require.NoError(t, err)
	dropped := make(chan struct{})
	srv.Handle("GET /", func(c *loop.Ctx) { c.Bytes(200, "text/html; charset=utf-8", []byte(ssePage)) })
	first := true
	srv.Handle("GET /events", func(c *loop.Ctx) {
		if first { // the first stream ends after one event: the browser must reconnect
			first = false
			st := c.Stream(200, "text/event-stream")
			_, _ = st.Write([]byte("retry: 100\n\nid: 1\nevent: goal\ndata: alice\n\n"))
			close(dropped)
			return
		}
		b.Serve(c)
	})
	b.Publish(sse.Event{Type: "goal", Data: "alice"}) // id 1: what the first stream sent
	base := looptest.Start(t, srv)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe),
		chromedp.NoSandbox, chromedp.DisableGPU)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer tcancel()
	poll := func(expr string) chromedp.Action {
		return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(20*time.Millisecond))
	}

	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"/"), poll(`window.got.length >= 1`)))
	<-dropped
	// Published while the browser is between connections: it must get them on resume.
	b.Publish(sse.Event{Type: "goal", Data: "bob"})
	b.Publish(sse.Event{Type: "goal", Data: "carol"})
	require.NoError(t, chromedp.Run(ctx, poll(`window.opens >= 2 && window.got.length >= 3`)),
		"the browser did not reconnect and resume")
	b.Publish(sse.Event{Type: "goal", Data: "dave"})
	var got []string
	require.NoError(t, chromedp.Run(ctx, poll(`window.got.length >= 4`), chromedp.Evaluate(`window.got`, &got)))
	assert.Equal(t, []string{"1:alice", "2:bob", "3:carol", "4:dave"}, got, "each event once, in order, with its id")

	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	require.NoError(t, srv.Shutdown(sctx))
	var closed bool
	if err := chromedp.Run(ctx, poll(`window.ended`)); err != nil {
		var dbg string
		_ = chromedp.Run(ctx, chromedp.Evaluate(`JSON.stringify({got: window.got, opens: window.opens, errs: window.errs, rs: es.readyState})`, &dbg))
		t.Fatalf("no final event: %v; page state %s", err, dbg)
	}
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`window.ended`, &closed)))
	assert.True(t, closed, "the drain's final event reached the page")
	var opens int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`window.opens`, &opens)))
	assert.Equal(t, 2, opens, fmt.Sprintf("one reconnection, got %d opens", opens))
}
