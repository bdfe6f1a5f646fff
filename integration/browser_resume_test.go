package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
)

// cutProxy forwards TCP connections from its own loopback address to a target, and can
// cut them all at once (a network drop: both sides see their connection end, neither
// sends a WebSocket close) and refuse new ones for a while.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	until time.Time // refuse (accept and close) new connections until then
}

func newCutProxy(t *testing.T) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut(0) })
	go p.serve()
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := time.Now().Before(p.until) || p.target == ""
		target := p.target
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close(); c.Close() }()
		go func() { _, _ = io.Copy(c, s); s.Close(); c.Close() }()
	}
}

// cut closes every forwarded connection and refuses new ones for d.
func (p *cutProxy) cut(d time.Duration) {
	p.mu.Lock()
	cs := p.conns
	p.conns = nil
	p.until = time.Now().Add(d)
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// resumePage is the page that drives examples/gameserver/baton.mjs: it joins room "den"
// as player "eve" and sends an input every 10 ms (its value counts from 1) until stopped.
const resumePage = `<!doctype html><meta charset="utf-8"><title>resume</title>
<script type="module">
import { RoomClient } from "/baton.mjs";
const c = new RoomClient({ room: "den", player: "eve", hold: 10000 });
window.client = c;
window.events = [];
for (const t of ["joined", "moved", "dropped", "closed", "refused"]) c.addEventListener(t, () => events.push(t));
window.statuses = [];
c.addEventListener("status", (e) => statuses.push(Math.round(performance.now()) + " " + e.detail));
let n = 0;
const timer = setInterval(() => { if (c.hello) c.send(++n); }, 10);
window.stopInputs = () => { clearInterval(timer); return n; };
c.start();
</script>`

// TestBrowserClientResumes: the browser client (examples/gameserver/baton.mjs) in headless
// Chromium, against two nodes whose players reach them through TCP proxies. The page joins
// through the directory and plays; the proxy in front of the owner cuts the connection and
// refuses new ones for 2 s (a drop): the page resumes its seat there, the room told of the
// leave and the return; then the room moves to the other node: the page gets 4001, resumes
// at the node its reason names, and resends what was refused. Every input the page sent is
// in the room's state on the new owner, once, in order.
func TestBrowserClientResumes(t *testing.T) {
	exe := chromium(t)
	module, err := os.ReadFile("../examples/gameserver/baton.mjs")
	require.NoError(t, err)
	emb := directory.NewEmbedded()
	seats := newSeatSigner(t)
	proxies := map[string]*cutProxy{"a": newCutProxy(t), "b": newCutProxy(t)}
	nodes := map[string]*resumeNode{}
	for _, id := range []string{"a", "b"} {
		nodes[id] = startResumeNode(t, id, emb, seats, 10*time.Second, func(s *loop.Server, nc *room.NodeConfig) {
			nc.Directory.PublicAddr = proxies[id].addr() // players come through the proxy
			s.Handle("GET /", func(c *loop.Ctx) {
				c.SetHeader("Content-Type", "text/html; charset=utf-8")
				c.String(200, resumePage)
			})
			s.Handle("GET /baton.mjs", func(c *loop.Ctx) {
				c.SetHeader("Content-Type", "text/javascript; charset=utf-8")
				c.String(200, string(module))
			})
		})
		proxies[id].mu.Lock()
		proxies[id].target = nodes[id].addr
		proxies[id].mu.Unlock()
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	defer tcancel()
	poll := func(expr string) chromedp.Action {
		return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(20*time.Millisecond))
	}
	var owner string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate("http://"+nodes["a"].addr+"/"),
		poll(`window.client && client.hello && client.acked >= 20`),
		chromedp.Evaluate(`client.hello.node`, &owner),
	))
	other := map[string]string{"a": "b", "b": "a"}[owner]
	t.Logf("seated on %s through its proxy", owner)

	// A drop: the connection cut, the node unreachable for 2 s.
	var acked int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`client.acked`, &acked)))
	cutAt := time.Now()
	proxies[owner].cut(2 * time.Second)
	nodes[owner].waitEvent(t, owner+":leave:eve", 10*time.Second)
	if err := chromedp.Run(ctx, poll(`client.stats.resumes >= 1 && client.hello.resumed && client.acked > `+strconv.Itoa(acked+20))); err != nil {
		var st []string
		_ = chromedp.Run(ctx, chromedp.Evaluate(`statuses`, &st))
		t.Fatalf("the page did not resume after the drop: %v; its statuses: %q", err, st)
	}
	t.Logf("resumed after the drop: %v after the cut", time.Since(cutAt).Round(time.Millisecond))
	nodes[owner].waitEvent(t, owner+":return:eve", 10*time.Second)

	// A move: the page follows the room to the other node, whose slow restore keeps the
	// room frozen (inputs answered "retry") for 50 ms.
	nodes[other].slowRestore.Store(int64(50 * time.Millisecond))
	movedAt := time.Now()
	resp, err := postStatus("http://" + nodes[owner].addr + "/handoff/den?to=" + other)
	require.NoError(t, err)
	require.Equal(t, 200, resp)
	var node string
	require.NoError(t, chromedp.Run(ctx,
		poll(`client.stats.moves === 1 && client.hello.node === "`+other+`" && client.pending.length < 5`),
		chromedp.Evaluate(`client.hello.node`, &node)))
	t.Logf("resumed at %s: %v after the move was asked", node, time.Since(movedAt).Round(time.Millisecond))

	var sent int
	var stats map[string]int
	var events []string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Evaluate(`stopInputs()`, &sent),
		poll(`client.pending.length === 0`),
		chromedp.Evaluate(`client.stats`, &stats),
		chromedp.Evaluate(`events`, &events)))
	require.Eventually(t, func() bool { return len(nodes[other].state(t, "den").Inputs["eve"]) >= sent }, 5*time.Second, 10*time.Millisecond)
	g := nodes[other].state(t, "den")
	assert.Equal(t, seqRange(1, uint64(sent)), g.Inputs["eve"], "every input the page sent, once, in order, across the drop and the move")
	assert.Equal(t, []string{"leave:eve", "return:eve"}, g.Events, "the room's own record travelled with it")
	assert.Equal(t, "joined", events[0])
	assert.Contains(t, events, "dropped")
	assert.Contains(t, events, "moved")
	assert.NotContains(t, events, "closed")
	assert.NotContains(t, events, "refused")
	assert.Positive(t, stats["retries"], "inputs sent during the freeze were answered retry, and resent")
	t.Logf("page: %d inputs sent, client stats %v, events %v", sent, stats, events)
}

// httpPost posts an empty body and returns the status.
func postStatus(u string) (int, error) {
	resp, err := http.Post(u, "", nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
