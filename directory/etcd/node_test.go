package etcd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
)

// The cluster tests run baton nodes as child processes: this test binary, re-executed
// with BATON_CLUSTER_CHILD set, runs childMain instead of the tests. Each child is a baton
// server on loopback that is a node of the directory on the test's etcd, with routes
// /join/{room} (room.Join), /play/{room} (room.Admit, making a room whose every tick is
// logged), and /local (the rooms it runs).

// seatKey is the key the test's nodes share for seat tokens.
var seatKey = []byte("baton cluster test seat key, 32+ bytes long")

// childEnv are the child's settings, from the environment.
const (
	envChild   = "BATON_CLUSTER_CHILD" // the node's ID
	envEtcd    = "BATON_CLUSTER_ETCD"  // etcd endpoints, comma-separated
	envPrefix  = "BATON_CLUSTER_PREFIX"
	envTTL     = "BATON_CLUSTER_TTL"
	envTickLog = "BATON_CLUSTER_TICKLOG" // the file each tick is logged to
	envPublish = "BATON_CLUSTER_PUBLISH" // NodeConfig.PublishEvery
	envHandoff = "BATON_CLUSTER_HANDOFF" // "1": rooms have state hooks and move on drain (handoff_test.go)
)

// monotonic returns CLOCK_MONOTONIC in nanoseconds: one clock for every process of the
// machine (Go's monotonic readings are per process).
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// childMain runs a node until SIGTERM; it prints "ADDR host:port" once it serves.
func childMain() int {
	id := os.Getenv(envChild)
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child", id+":", err); return 1 }
	cli, err := Connect(strings.Split(os.Getenv(envEtcd), ","))
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	publish, _ := time.ParseDuration(os.Getenv(envPublish))
	tickLog, err := os.OpenFile(os.Getenv(envTickLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(err)
	}
	defer tickLog.Close()
	seats, err := directory.NewSeatSigner(directory.SeatConfig{Key: seatKey})
	if err != nil {
		return fail(err)
	}
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	handoff := os.Getenv(envHandoff) == "1"
	var hoKey []byte
	if handoff {
		hoKey = handoffKey
	}
	err = room.UseDirectory(srv, New(cli, os.Getenv(envPrefix)), room.NodeConfig{
		Directory:    directory.Config{Node: id, TTL: ttl, RequestTimeout: 500 * time.Millisecond},
		Seats:        seats,
		PublishEvery: publish,
		HandoffKey:   hoKey,
	})
	if err != nil {
		return fail(err)
	}
	if handoff {
		if err := room.AcceptHandoffs(srv, func(name string) (room.Config[int], error) { return handoffRoom(id, name, tickLog), nil }); err != nil {
			return fail(err)
		}
	}
	local := map[string]*room.Room[int]{} // loop-confined: one loop
	srv.Handle("GET /join/{room}", func(c *loop.Ctx) { room.Join(c, c.PathValue("room"), c.Query("player")) })
	srv.Handle("GET /play/{room}", func(c *loop.Ctx) {
		name := c.PathValue("room")
		burn, _ := time.ParseDuration(c.Query("burn"))
		r, seat, ok := room.Admit(c, name, func(l *loop.Loop) (*room.Room[int], error) {
			if handoff {
				return room.New(l, handoffRoom(id, name, tickLog))
			}
			var line []byte
			r, err := room.New(l, room.Config[int]{Name: name, Period: 50 * time.Millisecond,
				Tick: func(r *room.Room[int], t *room.Tick[int]) {
					start := monotonic()
					if burn > 0 {
						for end := time.Now().Add(burn); time.Now().Before(end); {
						}
					}
					line = fmt.Appendf(line[:0], "%s %s %d %d %d\n", id, name, r.Token(), start, monotonic())
					_, _ = tickLog.Write(line)
				}})
			if err == nil {
				local[name] = r
				go func() { <-r.Done(); _ = l.Post(func() { delete(local, name) }) }()
			}
			return r, err
		})
		if !ok {
			return
		}
		c.JSON(200, map[string]any{"node": id, "room": name, "token": r.Token(), "player": seat.Player})
	})
	srv.Handle("GET /local", func(c *loop.Ctx) {
		names := make([]string, 0, len(local))
		for n := range local {
			names = append(names, n)
		}
		c.JSON(200, names)
	})
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case <-srv.Ready():
	case err := <-errc:
		return fail(err)
	}
	fmt.Printf("ADDR %s\n", srv.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	return 0
}

// child is one node process.
type child struct {
	id, addr string
	cmd      *exec.Cmd
	exited   chan struct{}
	stderr   *os.File
}

// nodeOpts configure the children.
type nodeOpts struct {
	bin     string        // the binary to run; "" is this test binary
	prefix  string        // etcd key prefix
	ttl     time.Duration // lease TTL
	publish time.Duration // load publication period
	tickLog string        // the shared tick log
	// etcd, if set, gives node i's etcd endpoints (a proxy that the test can cut).
	etcd func(i int) []string
	// handoff gives the rooms state hooks and the nodes a handoff key (handoff_test.go).
	handoff bool
}

// startNodes starts n nodes named <prefix>n0.. on the cluster's etcd and waits until each
// serves and holds a lease; they are killed at the end of the test.
func startNodes(t testing.TB, c *cluster, n int, o nodeOpts) []*child {
	t.Helper()
	if o.bin == "" {
		o.bin = os.Args[0]
	}
	if o.publish == 0 {
		o.publish = 200 * time.Millisecond
	}
	dir := t.TempDir()
	nodes := make([]*child, n)
	for i := range nodes {
		id := fmt.Sprintf("n%d", i)
		cmd := exec.Command(o.bin, "-test.run=^$")
		endpoints := c.endpoints()
		if o.etcd != nil {
			endpoints = o.etcd(i)
		}
		cmd.Env = append(os.Environ(), envChild+"="+id, envEtcd+"="+strings.Join(endpoints, ","),
			envPrefix+"="+o.prefix, envTTL+"="+o.ttl.String(), envTickLog+"="+o.tickLog, envPublish+"="+o.publish.String())
		if o.handoff {
			cmd.Env = append(cmd.Env, envHandoff+"=1")
		}
		errf, err := os.Create(filepath.Join(dir, id+".stderr"))
		require.NoError(t, err)
		cmd.Stderr = errf
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.SysProcAttr = childAttr()
		require.NoError(t, cmd.Start())
		nd := &child{id: id, cmd: cmd, exited: make(chan struct{}), stderr: errf}
		nodes[i] = nd
		addrc := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
					addrc <- a
				}
			}
			_ = cmd.Wait()
			close(nd.exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-nd.exited
			errf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(errf.Name())
				t.Logf("node %s stderr (last 2000 bytes):\n%s", id, tail(b, 2000))
			}
		})
		select {
		case nd.addr = <-addrc:
		case <-nd.exited:
			b, _ := os.ReadFile(errf.Name())
			t.Fatalf("node %s exited before serving: %s", id, tail(b, 2000))
		case <-time.After(20 * time.Second):
			t.Fatalf("node %s not serving after 20 s", id)
		}
	}
	cli := c.client(t)
	require.Eventually(t, func() bool {
		resp, err := cli.Get(context.Background(), prefixOf(o.prefix)+"nodes/", clientv3.WithPrefix())
		return err == nil && len(resp.Kvs) == n
	}, 10*time.Second, 20*time.Millisecond, "the nodes did not all publish their records")
	return nodes
}

func prefixOf(p string) string {
	if p == "" {
		return DefaultPrefix
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// httpc is the tests' client: no redirects followed, and patient (a loaded machine under
// -race answers a join in a second now and then); quick is for the joins while a node is
// paused, which must give up on the paused node soon.
var (
	httpc = &http.Client{Timeout: 5 * time.Second, CheckRedirect: noRedirect}
	quick = &http.Client{Timeout: 300 * time.Millisecond, CheckRedirect: noRedirect}
)

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// getJSON gets url and decodes a 200 answer into v; it returns the status code.
func getJSON(url string, v any) (int, string, error) { return getJSONWith(httpc, url, v) }

func getJSONWith(cl *http.Client, url string, v any) (int, string, error) {
	resp, err := cl.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			return resp.StatusCode, string(b), err
		}
	}
	if resp.StatusCode == 307 {
		return resp.StatusCode, resp.Header.Get("Location"), nil
	}
	return resp.StatusCode, string(b), nil
}

// joinAnswer is room.Join's answer.
type joinAnswer struct {
	Room  string          `json:"room"`
	Node  string          `json:"node"`
	Addr  string          `json:"addr"`
	Token directory.Token `json:"token"`
	Seat  string          `json:"seat"`
}

// seated is /play's answer.
type seated struct {
	Node   string          `json:"node"`
	Room   string          `json:"room"`
	Token  directory.Token `json:"token"`
	Player string          `json:"player"`
}

// joinVia asks node via for the room, goes where it says (following one redirect) and
// returns where the player was seated.
func joinVia(via *child, roomName, player string) (seated, error) {
	return joinWith(httpc, via, roomName, player)
}

func joinWith(cl *http.Client, via *child, roomName, player string) (seated, error) {
	var a joinAnswer
	code, body, err := getJSONWith(cl, "http://"+via.addr+"/join/"+roomName+"?player="+player, &a)
	if err != nil || code != 200 {
		return seated{}, fmt.Errorf("join via %s: %d %s %v", via.id, code, body, err)
	}
	url := "http://" + a.Addr + "/play/" + roomName + "?seat=" + a.Seat
	for range 2 {
		var s seated
		code, body, err = getJSONWith(cl, url, &s)
		switch {
		case err != nil:
			return seated{}, fmt.Errorf("play at %s (%s): %w", a.Node, a.Addr, err)
		case code == 200:
			return s, nil
		case code == 307:
			url = body
			continue
		}
		return seated{}, fmt.Errorf("play at %s: %d %s", a.Node, code, body)
	}
	return seated{}, fmt.Errorf("play: redirected twice")
}

// tick is one logged tick.
type tick struct {
	node, room string
	token      int64
	start, end int64 // CLOCK_MONOTONIC ns
}

func readTicks(t testing.TB, path string) []tick {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []tick
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			continue // a line cut by a SIGKILL
		}
		tk := tick{node: fs[0], room: fs[1]}
		tk.token, _ = strconv.ParseInt(fs[2], 10, 64)
		tk.start, _ = strconv.ParseInt(fs[3], 10, 64)
		tk.end, _ = strconv.ParseInt(fs[4], 10, 64)
		out = append(out, tk)
	}
	return out
}

// window is the span of a room's ticks by one owner under one token.
type window struct {
	node       string
	token      int64
	start, end int64
	ticks      int
}

// twins returns the overlapping ownership windows found in ticks: two owners (node and
// token) of one room whose first-to-last tick spans overlap.
func twins(ticks []tick) []string {
	byRoom := map[string]map[string]*window{}
	for _, tk := range ticks {
		ws := byRoom[tk.room]
		if ws == nil {
			ws = map[string]*window{}
			byRoom[tk.room] = ws
		}
		k := tk.node + "/" + strconv.FormatInt(tk.token, 10)
		w := ws[k]
		if w == nil {
			w = &window{node: tk.node, token: tk.token, start: tk.start, end: tk.end}
			ws[k] = w
		}
		w.start, w.end, w.ticks = min(w.start, tk.start), max(w.end, tk.end), w.ticks+1
	}
	var out []string
	for r, ws := range byRoom {
		list := make([]*window, 0, len(ws))
		for _, w := range ws {
			list = append(list, w)
		}
		for i := range list {
			for j := i + 1; j < len(list); j++ {
				a, b := list[i], list[j]
				if a.start < b.end && b.start < a.end {
					out = append(out, fmt.Sprintf("room %s: %s token %d ticked %.3f-%.3f s (%d ticks), %s token %d ticked %.3f-%.3f s (%d ticks)",
						r, a.node, a.token, float64(a.start)/1e9, float64(a.end)/1e9, a.ticks, b.node, b.token, float64(b.start)/1e9, float64(b.end)/1e9, b.ticks))
				}
			}
		}
	}
	return out
}

// noTwinsRuns is how many times the no-twins test pauses an owner: BATON_NOTWINS_RUNS, or 3.
func noTwinsRuns() int {
	if n, err := strconv.Atoi(os.Getenv("BATON_NOTWINS_RUNS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// pauseOwners runs the no-twins scenario runs times on nodes and returns the re-homing
// times: a room is made through a random node, its owner is paused (SIGSTOP) for its
// lease's TTL + 1.5 s while players keep joining through the other nodes every 100 ms,
// then resumed (SIGCONT); players then join through every node, the old owner included.
//
// A room is re-homed when the directory names another owner: the test reads the room's
// claim from etcd every 10 ms while the owner is paused.
func pauseOwners(t *testing.T, cli *clientv3.Client, nodes []*child, ttl time.Duration, runs int) []time.Duration {
	byID := map[string]*child{}
	for _, n := range nodes {
		byID[n.id] = n
	}
	var rehome []time.Duration
	player := 0
	join := func(via []*child, name string) (seated, error) {
		player++
		return joinWith(quick, via[rand.IntN(len(via))], name, "p"+strconv.Itoa(player))
	}
	for run := range runs {
		name := fmt.Sprintf("twin-%d", run)
		var first seated
		require.Eventually(t, func() bool {
			var err error
			first, err = join(nodes, name)
			return err == nil
		}, 5*time.Second, 50*time.Millisecond, "run %d: the room was not made", run)
		owner := byID[first.Node]
		time.Sleep(150 * time.Millisecond) // let it tick a few times
		var others []*child
		for _, n := range nodes {
			if n != owner {
				others = append(others, n)
			}
		}
		require.NoError(t, owner.cmd.Process.Signal(syscall.SIGSTOP))
		stopped := time.Now()
		movedc := make(chan time.Duration, 1)
		watchCtx, stopWatch := context.WithCancel(context.Background())
		go func() { // when the directory first names another owner
			defer close(movedc)
			for watchCtx.Err() == nil {
				got, err := listed(watchCtx, cli, "")
				if err == nil && got[name] != "" && got[name] != owner.id {
					movedc <- time.Since(stopped)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		seatedElsewhere := false
		for time.Since(stopped) < ttl+1500*time.Millisecond {
			s, err := join(others, name)
			if err == nil && s.Node != owner.id {
				seatedElsewhere = true
				require.Greater(t, s.Token, first.Token, "run %d: the new owner's token", run)
			}
			time.Sleep(100 * time.Millisecond)
		}
		stopWatch()
		moved := <-movedc
		require.NoError(t, owner.cmd.Process.Signal(syscall.SIGCONT))
		require.True(t, seatedElsewhere && moved > 0, "run %d: room %s was not re-homed while %s was paused for %v", run, name, owner.id, ttl+1500*time.Millisecond)
		rehome = append(rehome, moved)
		// After the resume every node, the old owner too, seats players in the room under a
		// newer token (on the new owner; or anywhere, if a loaded machine made it lapse too).
		deadline := time.Now().Add(3 * time.Second)
		for _, n := range nodes {
			for {
				s, err := joinVia(n, name, "late")
				if err == nil {
					require.Greater(t, s.Token, first.Token, "run %d: joined through %s after the resume: seated under the old token", run, n.id)
					break
				}
				require.True(t, time.Now().Before(deadline), "run %d: joins through %s fail after the resume: %v", run, n.id, err)
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	return rehome
}

// TestNoTwinRooms pauses a room's owner past its lease while players keep joining through
// the other nodes, resumes it, and checks the ticks every node logged (node, room, token,
// CLOCK_MONOTONIC at the tick's start and end): no two owners of a room ever tick in
// overlapping windows, and the room is re-homed (the directory names a new owner) within
// TTL + 1 s of the pause.
// BATON_NOTWINS_RUNS sets the number of pauses (3 by default).
func TestNoTwinRooms(t *testing.T) {
	c := startCluster(t, 1)
	ttl := time.Second
	tickLog := filepath.Join(t.TempDir(), "ticks.log")
	nodes := startNodes(t, c, 3, nodeOpts{ttl: ttl, tickLog: tickLog})
	runs := noTwinsRuns()
	rehome := pauseOwners(t, c.client(t), nodes, ttl, runs)
	ticks := readTicks(t, tickLog)
	found := twins(ticks)
	require.Empty(t, found, "twin rooms: %s", strings.Join(found, "\n"))
	worst := time.Duration(0)
	for _, d := range rehome {
		worst = max(worst, d)
	}
	t.Logf("%d pauses, %d ticks logged, 0 twins; re-homed %v (worst %v) after the pause (TTL %v)", runs, len(ticks), rehome, worst, ttl)
	require.LessOrEqual(t, worst, ttl+time.Second, "re-homing took longer than TTL + 1 s")
}

// TestNoTwinRoomsCatchesUnfencedBuild runs the no-twins scenario once with nodes built
// with fencing off (the tag baton_nofencing: rooms tick without checking their lease) and
// checks that the checker finds twins: the test above can fail.
func TestNoTwinRoomsCatchesUnfencedBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second test binary")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the unfenced test binary")
	}
	c := startCluster(t, 1)
	bin := filepath.Join(t.TempDir(), "unfenced.test")
	build := exec.Command("go", "test", "-c", "-tags", "baton_nofencing", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the unfenced test binary: %v\n%s", err, out)
	}
	ttl := time.Second
	tickLog := filepath.Join(t.TempDir(), "ticks.log")
	nodes := startNodes(t, c, 3, nodeOpts{bin: bin, ttl: ttl, tickLog: tickLog})
	pauseOwners(t, c.client(t), nodes, ttl, 1)
	time.Sleep(300 * time.Millisecond) // the resumed owner ticks its old room beside the new owner
	found := twins(readTicks(t, tickLog))
	require.NotEmpty(t, found, "an unfenced build made no twins: the checker cannot fail")
	t.Logf("unfenced build: %s", strings.Join(found, "\n"))
}

// listed reads the claims under prefix straight from etcd: room -> owner.
func listed(ctx context.Context, cli *clientv3.Client, prefix string) (map[string]string, error) {
	p := prefixOf(prefix) + "rooms/"
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		cl, err := decodeClaim(strings.TrimPrefix(string(kv.Key), p), kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		out[cl.Room] = cl.Node
	}
	return out, nil
}

// TestNoLies kills a node (SIGKILL) holding rooms and checks the directory every 100 ms
// over the test: every room listed for a live node is run by that node (its /local, read
// after the directory), and the killed node's rooms are listed no longer than its lease's
// TTL + 1 s after the kill.
func TestNoLies(t *testing.T) {
	c := startCluster(t, 1)
	ttl := 2 * time.Second // 1 s lapses now and then on a loaded machine, which would spoil the count of rooms made
	nodes := startNodes(t, c, 3, nodeOpts{prefix: "/nolies/", ttl: ttl, tickLog: filepath.Join(t.TempDir(), "ticks.log")})
	cli := c.client(t)
	ctx := context.Background()
	for i := range 30 {
		_, err := joinVia(nodes[i%3], fmt.Sprintf("r%d", i), "p")
		require.NoError(t, err)
	}
	byID := map[string]*child{}
	for _, n := range nodes {
		byID[n.id] = n
	}
	all, err := listed(ctx, cli, "/nolies/")
	require.NoError(t, err)
	require.Len(t, all, 30)
	victim := byID[all["r0"]]
	var killedAt time.Time
	var goneAfter time.Duration
	checks := 0
	start := time.Now()
	for time.Since(start) < ttl+3*time.Second {
		if killedAt.IsZero() && time.Since(start) > 500*time.Millisecond {
			require.NoError(t, victim.cmd.Process.Kill())
			killedAt = time.Now()
		}
		got, err := listed(ctx, cli, "/nolies/")
		require.NoError(t, err)
		checks++
		runs := map[string]map[string]bool{}
		victimRooms := 0
		for r, owner := range got {
			if owner == victim.id && !killedAt.IsZero() {
				victimRooms++
				require.Less(t, time.Since(killedAt), ttl+time.Second, "room %s of the killed node still listed", r)
				continue
			}
			if runs[owner] == nil {
				var names []string
				code, body, err := getJSON("http://"+byID[owner].addr+"/local", &names)
				require.NoError(t, err)
				require.Equal(t, 200, code, body)
				runs[owner] = map[string]bool{}
				for _, n := range names {
					runs[owner][n] = true
				}
			}
			require.True(t, runs[owner][r], "room %s is listed for node %s, which does not run it", r, owner)
		}
		if !killedAt.IsZero() && victimRooms == 0 && goneAfter == 0 {
			goneAfter = time.Since(killedAt)
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NotZero(t, goneAfter, "the killed node's rooms were never unlisted")
	t.Logf("%d checks 100 ms apart; the killed node's rooms unlisted %v after the SIGKILL (TTL %v)", checks, goneAfter.Round(time.Millisecond), ttl)
}

// nodeLoads reads the nodes' published records.
func nodeLoads(ctx context.Context, cli *clientv3.Client, prefix string) (map[string]directory.NodeInfo, error) {
	p := prefixOf(prefix) + "nodes/"
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[string]directory.NodeInfo{}
	for _, kv := range resp.Kvs {
		n, err := decodeNode(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		out[n.ID] = n
	}
	return out, nil
}

// TestPlacementByCost: with one node running a room that burns 30 ms of each 50 ms tick,
// none of the next 20 rooms joined through random nodes goes to it; on three idle nodes,
// 30 rooms spread within one room of even.
func TestPlacementByCost(t *testing.T) {
	c := startCluster(t, 1)
	cli := c.client(t)
	ctx := context.Background()
	seats, err := directory.NewSeatSigner(directory.SeatConfig{Key: seatKey})
	require.NoError(t, err)

	t.Run("busy node gets none", func(t *testing.T) {
		nodes := startNodes(t, c, 3, nodeOpts{prefix: "/busy/", ttl: time.Second, tickLog: filepath.Join(t.TempDir(), "ticks.log")})
		hog := nodes[0]
		seat, err := seats.Sign("hog", "p")
		require.NoError(t, err)
		var s seated
		code, body, err := getJSON("http://"+hog.addr+"/play/hog?burn=30ms&seat="+seat, &s)
		require.NoError(t, err)
		require.Equal(t, 200, code, body)
		require.Eventually(t, func() bool {
			loads, err := nodeLoads(ctx, cli, "/busy/")
			return err == nil && loads[hog.id].Load.Utilisation > 0.4
		}, 5*time.Second, 50*time.Millisecond, "the busy node did not publish its load")
		count := map[string]int{}
		for i := range 20 {
			s, err := joinVia(nodes[rand.IntN(3)], fmt.Sprintf("new-%d", i), "p")
			require.NoError(t, err)
			count[s.Node]++
		}
		loads, err := nodeLoads(ctx, cli, "/busy/")
		require.NoError(t, err)
		t.Logf("rooms placed: %v; utilisation published: %s %.2f (room share %.2f), %s %.3f, %s %.3f", count,
			nodes[0].id, loads[nodes[0].id].Load.Utilisation, loads[nodes[0].id].Load.RoomShare,
			nodes[1].id, loads[nodes[1].id].Load.Utilisation, nodes[2].id, loads[nodes[2].id].Load.Utilisation)
		require.Zero(t, count[hog.id], "the node with the 30 ms room got new rooms")
	})

	t.Run("equal nodes spread", func(t *testing.T) {
		// Equal nodes: their published loads stay equal (no publication after the first
		// record during the test), so placement goes by the rooms each claimed since.
		// Measured loads differ by each room's real cost, and placement follows them
		// (the busy node above).
		nodes := startNodes(t, c, 3, nodeOpts{prefix: "/even/", ttl: time.Second, publish: time.Minute, tickLog: filepath.Join(t.TempDir(), "ticks.log")})
		count := map[string]int{}
		for i := range 30 {
			s, err := joinVia(nodes[rand.IntN(3)], fmt.Sprintf("even-%d", i), "p")
			require.NoError(t, err)
			count[s.Node]++
		}
		lo, hi := 30, 0
		for _, n := range nodes {
			lo, hi = min(lo, count[n.id]), max(hi, count[n.id])
		}
		t.Logf("30 rooms on three equal nodes: %v", count)
		require.LessOrEqual(t, hi-lo, 1, "rooms not spread within one of even: %v", count)
	})
}

// BenchmarkClusterJoins: 1,000 players join 250 rooms through random nodes of three (16
// at a time): each asks a random node (Join), goes to the address it names, and takes a
// seat there (Admit; a redirect is followed). Every player must be seated on the room's
// owner, with no error. It reports the join latency's p50 and p99 (ms), first join of a
// room (placement and claim) and later joins together.
func BenchmarkClusterJoins(b *testing.B) {
	c := startCluster(b, 1)
	cli := c.client(b)
	nodes := startNodes(b, c, 3, nodeOpts{prefix: "/joins/", ttl: 5 * time.Second, publish: time.Second, tickLog: filepath.Join(b.TempDir(), "ticks.log")})
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: httpc.CheckRedirect,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	const players, rooms, workers = 1000, 250, 16
	for it := 0; b.Loop(); it++ {
		lat := make([]time.Duration, players)
		seatedOn := make([]seated, players)
		errs := make([]error, players)
		next := make(chan int, players)
		for i := range players {
			next <- i
		}
		close(next)
		done := make(chan struct{})
		for range workers {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range next {
					name := fmt.Sprintf("it%d-room%d", it, i%rooms)
					t0 := time.Now()
					seatedOn[i], errs[i] = joinWith(hc, nodes[rand.IntN(len(nodes))], name, "p"+strconv.Itoa(i))
					lat[i] = time.Since(t0)
				}
			}()
		}
		for range workers {
			<-done
		}
		b.StopTimer()
		owners, err := listed(context.Background(), cli, "/joins/")
		require.NoError(b, err)
		for i := range players {
			require.NoError(b, errs[i], "player %d", i)
			require.Equal(b, owners[seatedOn[i].Room], seatedOn[i].Node, "player %d seated off the owner of %s", i, seatedOn[i].Room)
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[players/2].Microseconds())/1e3, "p50-ms")
		b.ReportMetric(float64(lat[players*99/100].Microseconds())/1e3, "p99-ms")
		b.ReportMetric(float64(lat[players-1].Microseconds())/1e3, "max-ms")
		b.StartTimer()
	}
}

// etcdFigures reads member m's CPU time (from /proc, Linux) and the gRPC messages it has
// received (its /metrics, grpc_server_msg_received_total summed over methods).
func etcdFigures(t testing.TB, m *member) (cpu time.Duration, msgs float64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	fs := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(fs[11], 10, 64) // utime and stime, fields 14 and 15, in clock ticks (100 Hz)
	st, _ := strconv.ParseInt(fs[12], 10, 64)
	cpu = time.Duration(ut+st) * 10 * time.Millisecond
	resp, err := http.Get(m.clientURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err)
		msgs += v
	}
	return cpu, msgs
}

// BenchmarkEtcdLoad measures what three nodes holding 1,000 rooms cost etcd at the
// defaults (TTL 5 s: a keep-alive every 1.67 s; load published every second), idle
// rooms: the messages etcd receives per second per node and etcd's CPU, over 10 s.
func BenchmarkEtcdLoad(b *testing.B) {
	c := startCluster(b, 1)
	nodes := startNodes(b, c, 3, nodeOpts{prefix: "/load/", ttl: 5 * time.Second, publish: time.Second, tickLog: os.DevNull})
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: httpc.CheckRedirect}
	for i := range 1000 {
		_, err := joinWith(hc, nodes[i%3], fmt.Sprintf("load-%d", i), "p")
		require.NoError(b, err)
	}
	const window = 10 * time.Second
	for b.Loop() {
		cpu0, msgs0 := etcdFigures(b, c.members[0])
		time.Sleep(window)
		cpu1, msgs1 := etcdFigures(b, c.members[0])
		b.ReportMetric((msgs1-msgs0)/window.Seconds()/3, "etcd-msgs/s/node")
		b.ReportMetric(100*float64(cpu1-cpu0)/float64(window), "etcd-cpu-%")
	}
}

// TestEtcdOutage stops the only etcd member for 3 s under three nodes with rooms: joins
// are refused (503) within the request timeout, the rooms stop ticking by their lease's
// local check (no tick later than TTL after the outage began), and once etcd is back
// joins succeed again and the rooms are made anew with greater tokens.
func TestEtcdOutage(t *testing.T) {
	c := startCluster(t, 1)
	ttl := time.Second
	tickLog := filepath.Join(t.TempDir(), "ticks.log")
	nodes := startNodes(t, c, 3, nodeOpts{prefix: "/outage/", ttl: ttl, tickLog: tickLog})
	before := map[string]directory.Token{}
	for i := range 6 {
		s, err := joinVia(nodes[i%3], fmt.Sprintf("o%d", i), "p")
		require.NoError(t, err)
		before[s.Room] = s.Token
	}
	time.Sleep(200 * time.Millisecond)
	m := c.members[0]
	killed := monotonic()
	c.kill(m)
	hc := &http.Client{Timeout: 3 * time.Second, CheckRedirect: httpc.CheckRedirect}
	var refused time.Duration
	for refused == 0 {
		var a joinAnswer
		code, _, err := getJSONWith(hc, "http://"+nodes[0].addr+"/join/o0?player=p", &a)
		if err == nil && code == 503 {
			refused = time.Duration(monotonic() - killed)
		}
		require.Less(t, time.Duration(monotonic()-killed), 5*time.Second, "joins not refused 5 s into the outage")
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3*time.Second - time.Duration(monotonic()-killed))
	var lastTick int64
	for _, tk := range readTicks(t, tickLog) {
		lastTick = max(lastTick, tk.end)
	}
	stoppedAfter := time.Duration(lastTick - killed)
	require.Less(t, stoppedAfter, ttl, "a room ticked %v into the outage, past its lease's TTL", stoppedAfter)

	require.NoError(t, c.start(m))
	restarted := monotonic()
	var recovered time.Duration
	for recovered == 0 {
		s, err := joinWith(hc, nodes[rand.IntN(3)], "o0", "p")
		if err == nil {
			recovered = time.Duration(monotonic() - restarted)
			require.Greater(t, s.Token, before["o0"])
		}
		require.Less(t, time.Duration(monotonic()-restarted), 10*time.Second, "joins still fail 10 s after etcd came back: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 6 {
		require.Eventually(t, func() bool {
			_, err := joinVia(nodes[i%3], fmt.Sprintf("o%d", i), "p")
			return err == nil
		}, 5*time.Second, 50*time.Millisecond)
	}
	t.Logf("etcd down 3 s (TTL %v, request timeout 500 ms): joins refused %v after the kill; last tick %v after it; first join %v after the restart",
		ttl, refused.Round(time.Millisecond), stoppedAfter.Round(time.Millisecond), recovered.Round(time.Millisecond))
}

// cutProxy forwards TCP connections to an address until cut: then it closes every
// connection it carries and those that arrive, until healed. A node cut off from etcd.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

func newCutProxy(t testing.TB, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		p.setCut(true)
	})
	return p
}

func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *cutProxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

// setCut cuts (closing every connection) or heals the proxy.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// TestPartitionFromEtcd cuts one node's connections to etcd (through a proxy) for 3 s while
// the node owns a room: the node's room stops by its local check, the room is re-homed on
// another node once etcd drops the node's lease, the node's ticks and the new owner's do not
// overlap, and once the network heals the node takes a new lease and routes joins to the new
// owner.
func TestPartitionFromEtcd(t *testing.T) {
	c := startCluster(t, 1)
	ttl := time.Second
	tickLog := filepath.Join(t.TempDir(), "ticks.log")
	proxy := newCutProxy(t, strings.TrimPrefix(c.members[0].clientURL, "http://"))
	nodes := startNodes(t, c, 3, nodeOpts{prefix: "/partition/", ttl: ttl, tickLog: tickLog, etcd: func(i int) []string {
		if i == 0 {
			return []string{"http://" + proxy.ln.Addr().String()}
		}
		return c.endpoints()
	}})
	cli := c.client(t)
	ctx := context.Background()
	seats, err := directory.NewSeatSigner(directory.SeatConfig{Key: seatKey})
	require.NoError(t, err)
	seat, err := seats.Sign("cut", "p")
	require.NoError(t, err)
	var first seated
	code, body, err := getJSON("http://"+nodes[0].addr+"/play/cut?seat="+seat, &first)
	require.NoError(t, err)
	require.Equal(t, 200, code, body)
	time.Sleep(200 * time.Millisecond)

	proxy.setCut(true)
	cutAt := monotonic()
	var rehomed time.Duration
	for rehomed == 0 {
		got, err := listed(ctx, cli, "/partition/")
		require.NoError(t, err)
		if owner := got["cut"]; owner != "" && owner != nodes[0].id {
			rehomed = time.Duration(monotonic() - cutAt)
			break
		}
		if got["cut"] == "" {
			_, _ = joinWith(quick, nodes[1+rand.IntN(2)], "cut", "p")
		}
		require.Less(t, time.Duration(monotonic()-cutAt), 5*time.Second, "not re-homed 5 s into the partition")
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3*time.Second - time.Duration(monotonic()-cutAt))
	var lastOld int64
	for _, tk := range readTicks(t, tickLog) {
		if tk.node == nodes[0].id && tk.room == "cut" {
			lastOld = max(lastOld, tk.end)
		}
	}
	proxy.setCut(false)
	healedAt := monotonic()
	var back time.Duration
	for back == 0 {
		loads, err := nodeLoads(ctx, cli, "/partition/")
		require.NoError(t, err)
		if _, ok := loads[nodes[0].id]; ok {
			back = time.Duration(monotonic() - healedAt)
		}
		require.Less(t, time.Duration(monotonic()-healedAt), 10*time.Second, "the node did not come back 10 s after the network healed")
		time.Sleep(10 * time.Millisecond)
	}
	s, err := joinVia(nodes[0], "cut", "late")
	require.NoError(t, err)
	require.Greater(t, s.Token, first.Token)
	found := twins(readTicks(t, tickLog))
	require.Empty(t, found, "twin rooms: %s", strings.Join(found, "\n"))
	t.Logf("partition of %s from etcd for 3 s (TTL %v): its last tick %v after the cut, room re-homed %v after it; node back in the directory %v after the heal",
		nodes[0].id, ttl, time.Duration(lastOld-cutAt).Round(time.Millisecond), rehomed.Round(time.Millisecond), back.Round(time.Millisecond))
}

// TestLeaderKilledUnderNodes kills the leader of a 3-member etcd cluster under three nodes
// holding rooms on leases of the default 5 s: the clients move to the other members, the
// nodes keep their leases, every room keeps ticking (no tick gap beyond the election) and
// keeps its token, and joins work again after the election. (On 2 s leases a node's
// renewals failed through the election in 1 of 2 runs and its rooms lapsed: the TTL must
// outlast an election and the client's move to another member.)
func TestLeaderKilledUnderNodes(t *testing.T) {
	c := startCluster(t, 3)
	ttl := 5 * time.Second
	tickLog := filepath.Join(t.TempDir(), "ticks.log")
	nodes := startNodes(t, c, 3, nodeOpts{prefix: "/leader/", ttl: ttl, tickLog: tickLog})
	cli := c.client(t)
	ctx := context.Background()
	tokens := map[string]directory.Token{}
	for i := range 6 {
		s, err := joinVia(nodes[i%3], fmt.Sprintf("l%d", i), "p")
		require.NoError(t, err)
		tokens[s.Room] = s.Token
	}
	time.Sleep(200 * time.Millisecond)
	leader, err := c.leader(ctx, cli)
	require.NoError(t, err)
	c.kill(leader)
	killed := monotonic()
	var joined time.Duration
	for joined == 0 {
		if _, err := joinVia(nodes[rand.IntN(3)], "after-election", "p"); err == nil {
			joined = time.Duration(monotonic() - killed)
		}
		require.Less(t, time.Duration(monotonic()-killed), 10*time.Second, "joins fail 10 s after the leader was killed")
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3*time.Second - time.Duration(monotonic()-killed))
	for r, tok := range tokens {
		s, err := joinVia(nodes[rand.IntN(3)], r, "late")
		require.NoError(t, err)
		require.Equal(t, tok, s.Token, "room %s was re-claimed: its owner lost it in the election", r)
	}
	// The largest gap between two ticks of a room across the election.
	last := map[string]int64{}
	var gap time.Duration
	for _, tk := range readTicks(t, tickLog) {
		if p, ok := last[tk.room]; ok {
			gap = max(gap, time.Duration(tk.start-p))
		}
		last[tk.room] = tk.start
	}
	require.Less(t, gap, time.Second, "a room stopped ticking for %v", gap)
	t.Logf("leader %s killed under three nodes (TTL %v): first join %v after the kill; every room kept its token; largest gap between two ticks of a room %v",
		leader.name, ttl, joined.Round(time.Millisecond), gap.Round(time.Millisecond))
}
