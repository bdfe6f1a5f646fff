package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
)

// nginxBinary returns the path of nginx, or skips the test.
func nginxBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	t.Skip("integration: no nginx on PATH or at /usr/sbin/nginx; " +
		"on Debian: apt-get install nginx-light (.ci/run installs it)")
	return ""
}

// freePort returns a loopback TCP port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// nginxConf is the configuration of the test, and the recipe of docs/deployment.md: an
// upstream of baton processes chosen by a consistent hash of the room, HTTP/1.1 keep-alive
// to them, idempotent requests retried on another process after a connection error, a
// timeout, 502 or 503 (a draining process answers 503), WebSocket upgrades passed through.
// Everything nginx writes goes to the test's directory; it runs in the foreground as the
// current user.
const nginxConf = `daemon off;
worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
{{if .Root}}user root root;
{{end}}events { worker_connections 1024; }

http {
    client_body_temp_path {{.Dir}}/client_body;
    proxy_temp_path       {{.Dir}}/proxy;
    fastcgi_temp_path     {{.Dir}}/fastcgi;
    uwsgi_temp_path       {{.Dir}}/uwsgi;
    scgi_temp_path        {{.Dir}}/scgi;
    log_format upstreams '$status $request_method $upstream_addr "$upstream_status"';
    access_log {{.Dir}}/access.log upstreams;

    # The key nginx hashes: the room, or for a request without one a value of its own,
    # so that those spread over the processes.
    map $arg_room $baton_key { default $arg_room; "" $request_id; }

    upstream baton {
        hash $baton_key consistent;  # a room's requests and sockets go to one process
{{range .Ports}}        server 127.0.0.1:{{.}} max_fails=1 fail_timeout=1s;
{{end}}        keepalive 16;                # idle HTTP/1.1 connections kept to the processes
    }

    server {
        listen 127.0.0.1:{{.Port}};

        location /ws {
            proxy_pass http://baton;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_read_timeout 60s;  # above the server's WebSocket ping interval (30 s)
            proxy_next_upstream error timeout http_502 http_503;
        }
        location / {
            proxy_pass http://baton;
            proxy_http_version 1.1;
            proxy_set_header Connection "";  # keep-alive to the upstream
            proxy_connect_timeout 2s;
            proxy_read_timeout 10s;
            # A draining process answers 503 (Retry-After: 1): nginx sends a GET to the
            # next process; a POST (not idempotent) gets the 503 and its client retries.
            proxy_next_upstream error timeout http_502 http_503;
            proxy_next_upstream_tries 3;
        }
    }
}
`

// node is one baton process of the test.
type node struct {
	name   string
	cmd    *exec.Cmd
	stdout bytes.Buffer // read once the process has exited
	stderr string       // path of its standard error
	done   chan struct{}
	err    error // cmd.Wait's result, once done is closed
}

// cluster is nginx and the baton processes behind it.
type cluster struct {
	t       *testing.T
	dir     string
	ports   []int
	nodes   []*node
	gens    []int
	port    int // nginx's
	base    string
	nginx   *exec.Cmd
	ngxDone chan struct{}
	probe   *http.Client
}

func (c *cluster) ledger(name string) string { return filepath.Join(c.dir, "ledger-"+name) }

// start starts process i (a new generation) and waits until its /readyz answers 200.
func (c *cluster) start(ctx context.Context, i int) *node {
	t := c.t
	t.Helper()
	c.gens[i]++
	n := &node{name: fmt.Sprintf("n%d.g%d", i, c.gens[i]), done: make(chan struct{})}
	n.stderr = filepath.Join(c.dir, n.name+".stderr")
	errf, err := os.Create(n.stderr)
	require.NoError(t, err)
	n.cmd = exec.Command(os.Args[0], "-test.run=^$")
	n.cmd.Env = append(os.Environ(),
		nodeEnvAddr+"=127.0.0.1:"+strconv.Itoa(c.ports[i]),
		nodeEnvName+"="+n.name,
		nodeEnvLedger+"="+c.ledger(n.name))
	n.cmd.Stdout, n.cmd.Stderr = &n.stdout, errf
	require.NoError(t, n.cmd.Start())
	go func() { n.err = n.cmd.Wait(); _ = errf.Close(); close(n.done) }()
	t.Cleanup(func() { // a process the test did not stop (it failed)
		select {
		case <-n.done:
		default:
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	})
	c.nodes[i] = n
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", c.ports[i])
	for {
		if resp, err := c.probe.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				return n
			}
		}
		select {
		case <-n.done:
			t.Fatalf("%s exited before it was ready: %v\n%s", n.name, n.err, readTail(n.stderr))
		case <-ctx.Done():
			t.Fatalf("%s not ready: %v", n.name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sleeping returns the GETs and POSTs sleeping in process i's handlers now (0, 0 when it
// does not answer).
func (c *cluster) sleeping(i int) (gets, posts int) {
	resp, err := c.probe.Get(fmt.Sprintf("http://127.0.0.1:%d/inflight", c.ports[i]))
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_, _ = fmt.Sscanf(string(b), "%d %d", &gets, &posts)
	return gets, posts
}

// stop sends SIGTERM to process i, waits until it has exited and returns its DrainReport.
func (c *cluster) stop(ctx context.Context, i int) loop.DrainReport {
	t := c.t
	t.Helper()
	n := c.nodes[i]
	require.NoError(t, n.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-n.done:
	case <-ctx.Done():
		t.Fatalf("%s did not exit after SIGTERM: %v\n%s", n.name, ctx.Err(), readTail(n.stderr))
	}
	require.NoError(t, n.err, "%s exit\n%s", n.name, readTail(n.stderr))
	var rep loop.DrainReport
	found := false
	sc := bufio.NewScanner(&n.stdout)
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), drainReportPrefix); ok {
			require.NoError(t, json.Unmarshal([]byte(s), &rep))
			found = true
		}
	}
	require.True(t, found, "%s printed no drain report", n.name)
	return rep
}

// startNginx writes the configuration and starts nginx in the foreground, then waits
// until a request through it is answered by a baton process.
func (c *cluster) startNginx(ctx context.Context, exe string) {
	t := c.t
	t.Helper()
	var conf bytes.Buffer
	require.NoError(t, template.Must(template.New("nginx").Parse(nginxConf)).Execute(&conf, map[string]any{
		"Dir": c.dir, "Root": os.Geteuid() == 0, "Ports": c.ports, "Port": c.port,
	}))
	path := filepath.Join(c.dir, "nginx.conf")
	require.NoError(t, os.WriteFile(path, conf.Bytes(), 0o644))
	errLog := filepath.Join(c.dir, "error.log")
	if out, err := exec.Command(exe, "-t", "-p", c.dir, "-c", path, "-e", errLog).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s\n%s", err, out, conf.String())
	}
	c.nginx = exec.Command(exe, "-p", c.dir, "-c", path, "-e", errLog)
	out, err := os.Create(filepath.Join(c.dir, "nginx.out"))
	require.NoError(t, err)
	c.nginx.Stdout, c.nginx.Stderr = out, out
	require.NoError(t, c.nginx.Start())
	c.ngxDone = make(chan struct{})
	go func() { _ = c.nginx.Wait(); _ = out.Close(); close(c.ngxDone) }()
	t.Cleanup(func() {
		// Fast shutdown: the test is over, and a graceful one (SIGQUIT) sometimes waited
		// 10 s for connections it had already been told were closed.
		_ = c.nginx.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.ngxDone:
		case <-time.After(10 * time.Second):
			_ = c.nginx.Process.Kill()
			<-c.ngxDone
		}
	})
	c.base = fmt.Sprintf("http://127.0.0.1:%d", c.port)
	for {
		if resp, err := c.probe.Get(c.base + "/item?room=probe&id=probe"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-c.ngxDone:
			t.Fatalf("nginx exited: %s\n%s", readTail(filepath.Join(c.dir, "nginx.out")), readTail(errLog))
		case <-ctx.Done():
			t.Fatalf("nginx not answering: %v\n%s", ctx.Err(), readTail(errLog))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// load is what the clients did, counted in logical requests: a request retried after a
// 503 or 429 with Retry-After is one request, completed once.
type load struct {
	base string // nginx's URL of the item route: http://host:port/item

	sent, completed, retried, lost, gets, posts atomic.Int64

	mu      sync.Mutex
	lostWhy []string
	posted  map[string]string // POST id answered 200 -> the instance that answered
	served  map[string]int    // instance -> requests it answered 200
	roomOn  map[string]string // room -> the instance that answered its last request
}

// roomsOn returns the rooms whose last request the instance answered.
func (l *load) roomsOn(inst string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rooms []string
	for room, on := range l.roomOn {
		if on == inst {
			rooms = append(rooms, room)
		}
	}
	sort.Strings(rooms)
	return rooms
}

func (l *load) fail(why string) {
	l.lost.Add(1)
	l.mu.Lock()
	if len(l.lostWhy) < 20 {
		l.lostWhy = append(l.lostWhy, why)
	}
	l.mu.Unlock()
}

func (l *load) servedBy(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.served[name]
}

// do sends one logical request through nginx until it is answered: 200 completes it; 503
// or 429 with a Retry-After is retried after that many seconds (the server did not run
// it, so a POST may be resent too); anything else (a transport error, a 502, a 503 without
// Retry-After) loses it. The answer must be "<instance> <id>".
func (l *load) do(hc *http.Client, method, room, id string, sleepMS int) {
	url := fmt.Sprintf("%s?id=%s", l.base, id)
	if method == http.MethodPost {
		url = strings.Replace(url, "/item?", "/order?", 1)
	}
	if room != "" {
		url += "&room=" + room
	}
	if sleepMS > 0 {
		url += "&sleep=" + strconv.Itoa(sleepMS)
	}
	l.sent.Add(1)
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			l.fail(err.Error())
			return
		}
		resp, err := hc.Do(req)
		if err != nil {
			l.fail(fmt.Sprintf("%s %s: %v", method, url, err))
			return
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			l.fail(fmt.Sprintf("%s %s: body: %v", method, url, err))
			return
		}
		switch {
		case resp.StatusCode == 200:
			inst, got, _ := strings.Cut(string(body), " ")
			if got != id {
				l.fail(fmt.Sprintf("%s %s: answer %q", method, url, body))
				return
			}
			l.completed.Add(1)
			l.mu.Lock()
			l.served[inst]++
			if room != "" {
				l.roomOn[room] = inst
			}
			if method == http.MethodPost {
				if prev, dup := l.posted[id]; dup {
					l.lostWhy = append(l.lostWhy, fmt.Sprintf("POST %s answered twice (%s, %s)", id, prev, inst))
				}
				l.posted[id] = inst
			}
			l.mu.Unlock()
			return
		case (resp.StatusCode == 503 || resp.StatusCode == 429) && attempt < 10:
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || ra < 0 {
				l.fail(fmt.Sprintf("%s %s: %d without Retry-After", method, url, resp.StatusCode))
				return
			}
			l.retried.Add(1)
			time.Sleep(time.Duration(ra) * time.Second) // what the server asked for
		default:
			l.fail(fmt.Sprintf("%s %s: status %d %q", method, url, resp.StatusCode, body))
			return
		}
	}
}

// wsClients are WebSocket players: each sends a message every few milliseconds and waits
// for its echo; when its connection ends it must have been a 1001 close (its process
// restarted), and it reconnects through nginx.
type wsClients struct {
	closes, reconnects, echoes, dialRetries atomic.Int64

	mu      sync.Mutex
	bad     []string
	closeBy map[string]int // instance -> 1001 closes the clients received from it
	echoing []bool         // per client: echoed on its current connection
}

func (w *wsClients) problem(s string) {
	w.mu.Lock()
	if len(w.bad) < 20 {
		w.bad = append(w.bad, s)
	}
	w.mu.Unlock()
}

func (w *wsClients) setEchoing(k int, v bool) {
	w.mu.Lock()
	w.echoing[k] = v
	w.mu.Unlock()
}

func (w *wsClients) allEchoing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.echoing {
		if !e {
			return false
		}
	}
	return true
}

// run is client k's life until stop is closed.
func (w *wsClients) run(k int, url string, stop <-chan struct{}) {
	dial := func() (*websocket.Conn, string, bool) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			conn, _, err := websocket.DefaultDialer.Dial(url, nil)
			if err == nil {
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, hello, err := conn.ReadMessage()
				if inst, ok := strings.CutPrefix(string(hello), "hello "); err == nil && ok {
					return conn, inst, true
				}
				_ = conn.Close()
				w.problem(fmt.Sprintf("ws %d: no hello: %q %v", k, hello, err))
				return nil, "", false
			}
			if time.Now().After(deadline) {
				w.problem(fmt.Sprintf("ws %d: cannot reconnect: %v", k, err))
				return nil, "", false
			}
			w.dialRetries.Add(1)
			select {
			case <-stop:
				return nil, "", false
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	conn, inst, ok := dial()
	for seq := 0; ok; seq++ {
		select {
		case <-stop:
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseNormalClosure, "done"), time.Now().Add(time.Second))
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			for { // until the server's close answers ours
				if _, _, err := conn.ReadMessage(); err != nil {
					break
				}
			}
			_ = conn.Close()
			return
		case <-time.After(10 * time.Millisecond):
		}
		msg := "m" + strconv.Itoa(seq)
		_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		werr := conn.WriteMessage(websocket.TextMessage, []byte(msg))
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var got []byte
		var err error
		for { // the echo of msg; a message sent just before a close may get none
			_, got, err = conn.ReadMessage()
			if err != nil || werr != nil || string(got) == inst+" "+msg {
				break
			}
		}
		if err == nil && werr == nil {
			w.echoes.Add(1)
			w.setEchoing(k, true)
			continue
		}
		_ = conn.Close()
		w.setEchoing(k, false)
		var ce *websocket.CloseError
		if errors.As(err, &ce) && ce.Code == websocket.CloseGoingAway {
			w.closes.Add(1)
			w.mu.Lock()
			w.closeBy[inst]++
			w.mu.Unlock()
		} else {
			w.problem(fmt.Sprintf("ws %d on %s ended without a 1001 close: read %v, write %v", k, inst, err, werr))
			return
		}
		conn, inst, ok = dial()
		if ok {
			w.reconnects.Add(1)
		}
	}
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestNginxRollingRestart is issue 18's rolling restart behind nginx: nginx on loopback in
// front of 3 baton processes (this test binary, runNode), with the configuration of
// docs/deployment.md. Clients send GETs over 24 rooms and without a room (some sleeping
// 100 ms in the handler, so that work is in flight at SIGTERM), POSTs (not idempotent, each
// id once; a quarter sleep 100 ms before they run, and nginx never resends a POST it has
// sent, so a drain that dropped one would lose it), and 6 WebSocket clients echo a message
// every 10 ms. Each process in turn gets SIGTERM,
// drains, exits, and a new one starts on its port; the next restart waits until nginx sends
// the new process traffic again and every WebSocket echoes. Asserted: every request got a
// complete answer (200, possibly after 503 or 429 with Retry-After that the client
// retried), none was lost; each POST ran exactly once (the processes' ledgers) and was
// answered once; every WebSocket connection that ended got a 1001 close from its
// restarting process (as many as that process's DrainReport says it closed, none forced)
// and reconnected and echoed again; every drain finished before its deadline.
func TestNginxRollingRestart(t *testing.T) {
	exe := nginxBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	c := &cluster{t: t, dir: t.TempDir(), gens: make([]int, 3), nodes: make([]*node, 3),
		probe: &http.Client{Timeout: 2 * time.Second}}
	for range 3 {
		c.ports = append(c.ports, freePort(t))
	}
	c.port = freePort(t)
	for i := range 3 {
		c.start(ctx, i)
	}
	c.startNginx(ctx, exe)

	l := &load{base: c.base + "/item", posted: map[string]string{}, served: map[string]int{}, roomOn: map[string]string{}}
	const wsN = 6
	ws := &wsClients{closeBy: map[string]int{}, echoing: make([]bool, wsN)}
	hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const maxRequests = 20000 // per kind of client: bounds the load on a fast machine
	for g := range 4 {
		wg.Go(func() {
			for seq := 0; seq < maxRequests; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				room, sleep := fmt.Sprintf("r%d", (seq*7+g)%24), 0
				if seq%5 == 0 { // no room: nginx spreads these
					room = ""
				}
				if seq%8 == 0 {
					sleep = 100
				}
				l.gets.Add(1)
				l.do(hc, http.MethodGet, room, fmt.Sprintf("g%d-%d", g, seq), sleep)
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	for p := range 2 {
		wg.Go(func() {
			for seq := 0; seq < maxRequests; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				sleep := 0
				if seq%4 == 0 { // in flight at SIGTERM: nginx will not resend it if dropped
					sleep = 100
				}
				l.posts.Add(1)
				l.do(hc, http.MethodPost, fmt.Sprintf("r%d", (seq*5+p)%24), fmt.Sprintf("p%d-%d", p, seq), sleep)
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wsURL := strings.Replace(c.base, "http", "ws", 1)
	for k := range wsN {
		wg.Go(func() { ws.run(k, fmt.Sprintf("%s/ws?room=w%d", wsURL, k), stop) })
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	waitFor(ctx, t, "every process to serve through nginx and every WebSocket to echo", func() bool {
		for _, n := range c.nodes {
			if l.servedBy(n.name) == 0 {
				return false
			}
		}
		return ws.allEchoing()
	})
	start := time.Now()
	var reports []loop.DrainReport
	restarted := map[string]bool{}
	for i := range 3 {
		old := c.nodes[i].name
		restarted[old] = true
		// Work in flight at SIGTERM, whatever the random load does: a slow GET and a slow
		// POST through nginx for each room the process held lately (some may have moved
		// back to a process restarted before), and SIGTERM once the process has both
		// sleeping in their handlers.
		var rooms []string
		waitFor(ctx, t, "a room on "+old, func() bool { rooms = l.roomsOn(old); return len(rooms) > 0 })
		for k, room := range rooms {
			wg.Go(func() {
				l.gets.Add(1)
				l.do(hc, http.MethodGet, room, fmt.Sprintf("s%d-g%d", i, k), int(slowSleep/time.Millisecond))
			})
			wg.Go(func() {
				l.posts.Add(1)
				l.do(hc, http.MethodPost, room, fmt.Sprintf("s%d-p%d", i, k), int(slowSleep/time.Millisecond))
			})
		}
		waitFor(ctx, t, "a GET and a POST in flight on "+old, func() bool {
			gets, posts := c.sleeping(i)
			return gets > 0 && posts > 0
		})
		reports = append(reports, c.stop(ctx, i))
		n := c.start(ctx, i)
		waitFor(ctx, t, n.name+" to serve through nginx and every WebSocket to echo", func() bool {
			return l.servedBy(n.name) > 0 && ws.allEchoing()
		})
	}
	restartTime := time.Since(start)
	stopLoad()

	// The ledgers: every POST answered 200 ran exactly once, on the process that answered
	// it, and no POST ran that was not answered.
	ran := map[string][]string{}
	files, err := filepath.Glob(filepath.Join(c.dir, "ledger-*"))
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		inst := strings.TrimPrefix(filepath.Base(f), "ledger-")
		for _, id := range strings.Fields(string(b)) {
			ran[id] = append(ran[id], inst)
		}
	}
	twice, unanswered := 0, 0
	for id, insts := range ran {
		if len(insts) != 1 {
			twice++
			t.Errorf("POST %s ran %d times: %v", id, len(insts), insts)
		}
		if inst, ok := l.posted[id]; !ok {
			unanswered++
			t.Errorf("POST %s ran on %v but its client got no 200", id, insts)
		} else if inst != insts[0] {
			t.Errorf("POST %s ran on %s but was answered by %s", id, insts[0], inst)
		}
	}
	for id := range l.posted {
		if _, ok := ran[id]; !ok {
			t.Errorf("POST %s answered but in no ledger", id)
		}
	}

	// nginx's access log: requests nginx sent to more than one process.
	var nginxRetried, nginxRequests, upstream503 int
	if b, err := os.ReadFile(filepath.Join(c.dir, "access.log")); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			nginxRequests++
			if strings.Contains(line, ",") {
				nginxRetried++
			}
			if _, st, ok := strings.Cut(line, `"`); ok { // "$upstream_status": "503, 200"
				for _, code := range strings.Split(strings.Trim(st, `"`), ", ") {
					if code == "503" {
						upstream503++
					}
				}
			}
		}
	}

	var inFlight, refused, wsClosed, wsForced int
	for k, r := range reports {
		assert.False(t, r.DeadlineReached, "drain %d reached its deadline: %+v", k, r)
		assert.Zero(t, r.ForcedTasks, "drain %d forced tasks", k)
		assert.Zero(t, r.TakeoversForced, "drain %d forced WebSockets", k)
		assert.GreaterOrEqual(t, r.InFlight, 2, "drain %d: the slow GET and POST were in flight", k)
		inFlight += r.InFlight
		refused += r.RejectedDuring
		wsClosed += r.TakeoversClosed
		wsForced += r.TakeoversForced
	}
	ws.mu.Lock()
	for inst := range ws.closeBy {
		assert.True(t, restarted[inst], "a WebSocket got 1001 from %s, which was not restarted", inst)
	}
	var byInst []string
	for inst, n := range ws.closeBy {
		byInst = append(byInst, fmt.Sprintf("%s:%d", inst, n))
	}
	sort.Strings(byInst)
	bad := append([]string(nil), ws.bad...)
	ws.mu.Unlock()

	summary := fmt.Sprintf("nginx rolling restart (3 processes, each restarted once, %.1f s): "+
		"requests sent %d (GET %d, POST %d), completed %d, retried by the client after 503/429 with Retry-After %d, "+
		"retried by nginx on another process %d of %d proxied (503s from draining processes %d), lost %d; "+
		"POSTs run once %d, run twice %d, run unanswered %d; "+
		"WebSockets %d: 1001 closes %d (drain reports: %d closed, %d forced; by process %v), reconnects %d, "+
		"dial retries %d, echoes %d; in flight at SIGTERM %d, refused with 503 while draining %d",
		restartTime.Seconds(), l.sent.Load(), l.gets.Load(), l.posts.Load(), l.completed.Load(), l.retried.Load(),
		nginxRetried, nginxRequests, upstream503, l.lost.Load(), len(ran)-twice, twice, unanswered,
		wsN, ws.closes.Load(), wsClosed, wsForced, byInst, ws.reconnects.Load(),
		ws.dialRetries.Load(), ws.echoes.Load(), inFlight, refused)
	t.Log(summary)

	assert.Zero(t, l.lost.Load(), "lost requests: %v", l.lostWhy)
	assert.Empty(t, l.lostWhy, "requests answered wrongly")
	assert.Equal(t, l.sent.Load(), l.completed.Load(), "every request completed")
	assert.Equal(t, l.posts.Load(), int64(len(l.posted)), "every POST answered 200 once")
	assert.Empty(t, bad, "WebSocket clients")
	assert.Equal(t, int64(wsClosed), ws.closes.Load(), "every WebSocket the drains closed with 1001 got the 1001")
	assert.Equal(t, ws.closes.Load(), ws.reconnects.Load(), "every WebSocket closed by a restart reconnected")
	assert.Positive(t, ws.closes.Load(), "no WebSocket was on a restarted process: the test proves nothing about them")
	assert.Positive(t, l.posts.Load())
	if t.Failed() {
		t.Logf("nginx error log:\n%s", readTail(filepath.Join(c.dir, "error.log")))
		for _, n := range c.nodes {
			t.Logf("%s stderr:\n%s", n.name, readTail(n.stderr))
		}
	}
}
