package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// etcdBinary finds etcd (Debian's etcd-server), or skips the test.
func etcdBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ETCD_BIN"); p != "" {
		return p
	}
	for _, p := range []string{"etcd", "/usr/bin/etcd", "/usr/local/bin/etcd"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("no etcd binary (install Debian's etcd-server: apt-get install -y etcd-server, or set ETCD_BIN): the cluster test needs a real etcd")
	return ""
}

// freeAddrs returns n loopback addresses that were free a moment ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		out[i] = l.Addr().String()
		defer l.Close()
	}
	return out
}

// startClusterProcess starts cmd with its output in a file under dir; stop (also run at
// the end of the test) stops it: SIGTERM, then SIGKILL after 15 s.
func startClusterProcess(t *testing.T, dir, name string, cmd *exec.Cmd) (stop func()) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name+".log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				b, _ := os.ReadFile(f.Name())
				t.Logf("%s's output:\n%s", name, b)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// startEtcd starts one etcd member on loopback and waits until it answers, trying three
// times on fresh ports (a port found free may be taken before etcd binds it); it skips
// the test if etcd cannot start.
func startEtcd(t *testing.T, dir string) string {
	t.Helper()
	bin := etcdBinary(t)
	var why error
	for try := range 3 {
		addrs := freeAddrs(t, 2)
		client, peer := "http://"+addrs[0], "http://"+addrs[1]
		name := fmt.Sprintf("etcd-%d", try)
		stop := startClusterProcess(t, dir, name, exec.Command(bin, "--name", "e", "--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "e="+peer,
			"--heartbeat-interval", "50", "--election-timeout", "500"))
		if why = waitHealthy(client, 15*time.Second); why == nil {
			return client
		}
		t.Logf("etcd try %d: %v", try+1, why)
		stop()
	}
	t.Skipf("etcd (%s) did not become healthy on loopback in three tries: %v", bin, why)
	return ""
}

// waitHealthy waits until etcd at client answers /health with "true", or limit passes.
func waitHealthy(client string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			var h struct{ Health string }
			err = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if err == nil && h.Health == "true" {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("health %q", h.Health)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy after %v: %w", client, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startGameCluster starts one etcd and three gameserver processes on loopback (this test
// binary running the real main with -etcd, so built from the tree under test), waits
// until each answers joins, and returns their addresses; it skips where etcd is missing.
// A node whose port was taken between freeAddrs and its bind (another test's process got
// it first) is started again on a fresh port, up to three times, as startEtcd does.
func startGameCluster(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	etcdURL := startEtcd(t, dir)
	addrs := make([]string, 3)
	for i := range addrs {
		node := fmt.Sprintf("game-%d", i+1)
		for try := 0; ; try++ {
			addr := freeAddrs(t, 1)[0]
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "GAMESERVER_TEST_MAIN=1",
				"GAMESERVER_SEAT_KEY="+strings.Repeat("k", 32),
				"GAMESERVER_TEST_ARGS="+strings.Join([]string{"-addr", addr, "-admin", "127.0.0.1:0",
					"-data", filepath.Join(dir, fmt.Sprintf("node%d", i+1)), "-bots=false",
					"-etcd", etcdURL, "-node", node}, " "))
			name := node
			if try > 0 {
				name = fmt.Sprintf("%s-try%d", node, try+1)
			}
			stop := startClusterProcess(t, dir, name, cmd)
			if waitJoins(t, addr, filepath.Join(dir, name+".log")) {
				addrs[i] = addr
				break
			}
			stop()
			require.Less(t, try, 2, "%s: its port was taken at each of three tries", node)
			t.Logf("%s: trying another port", node)
		}
	}
	return addrs
}

// waitJoins waits until the node at addr answers joins, and reports true; or false at
// once when its log says its port was taken. It fails the test after 60 s.
func waitJoins(t *testing.T, addr, logFile string) bool {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := joinThrough(addr, "probe", "nobody"); err == nil {
			return true
		}
		if b, _ := os.ReadFile(logFile); strings.Contains(string(b), "is in use by another process") {
			t.Logf("%s was taken before the node bound it", addr)
			return false
		}
		require.True(t, time.Now().Before(deadline), "the node at %s did not answer joins", addr)
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterJoin is room.Join's answer.
type clusterJoin struct {
	Room, Node, Addr, Seat string
	Token                  int64
}

func joinThrough(addr, roomName, player string) (clusterJoin, error) {
	resp, err := http.Get("http://" + addr + "/join/" + roomName + "?player=" + url.QueryEscape(player))
	if err != nil {
		return clusterJoin{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return clusterJoin{}, fmt.Errorf("join %s through %s: %s", roomName, addr, resp.Status)
	}
	var j clusterJoin
	return j, json.NewDecoder(resp.Body).Decode(&j)
}

// dialSeat connects the WebSocket a join answer names. An upgrade answered 503 (the
// owner's loop is saturated: a 2-core machine running etcd and three -race servers) is
// tried again 100 ms later, as a client should, up to 50 times; busy counts those.
func dialSeat(j clusterJoin) (conn *websocket.Conn, busy int, err error) {
	for {
		conn, resp, err := websocket.DefaultDialer.Dial("ws://"+j.Addr+"/play/"+j.Room+"?seat="+url.QueryEscape(j.Seat), nil)
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || busy == 50 {
			if err != nil && resp != nil {
				err = fmt.Errorf("%w: %s", err, resp.Status)
			}
			return conn, busy, err
		}
		busy++
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterJoinsThroughAnyNode is the flagship as docs/cluster.md's recipe runs it: one
// etcd and three gameserver processes (this test binary running the real main with -etcd,
// so built from the tree under test) on loopback. Twelve players join four rooms, each
// through a node of its own choosing (every node serves joins): each is told the owner's
// address and a seat token, connects its WebSocket there, and the "joined" hello names
// the node. Every player of a room lands on the same node under the same token, that node
// is the owner every node names, and no join fails.
func TestClusterJoinsThroughAnyNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three game servers")
	}
	addrs := startGameCluster(t)

	type seat struct{ node, via string }
	rooms := []string{"lobby-1", "lobby-2", "lobby-3", "lobby-4"}
	seated := map[string][]seat{}
	busyRetries := 0
	tokens := map[string]map[int64]bool{}
	var conns []*websocket.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for p := range 12 {
		roomName, via := rooms[p%len(rooms)], addrs[(p*7+p/4)%len(addrs)] // spread over the nodes
		player := fmt.Sprintf("p%d", p)
		j, err := joinThrough(via, roomName, player)
		require.NoError(t, err)
		conn, busy, err := dialSeat(j)
		busyRetries += busy
		require.NoError(t, err, "player %s joined %s through %s, told %s", player, roomName, via, j.Addr)
		conns = append(conns, conn)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		var hello clusterHello
		for hello.Type != "joined" {
			require.NoError(t, conn.ReadJSON(&hello))
		}
		assert.Equal(t, player, hello.Player)
		assert.Equal(t, roomName, hello.Room)
		seated[roomName] = append(seated[roomName], seat{hello.Node, via})
		if tokens[roomName] == nil {
			tokens[roomName] = map[int64]bool{}
		}
		tokens[roomName][int64(hello.Token)] = true
	}
	t.Logf("upgrades answered 503 (loop saturated) and retried: %d", busyRetries)
	owners := map[string]int{}
	for _, roomName := range rooms {
		ss := seated[roomName]
		require.Len(t, ss, 3)
		vias := map[string]bool{}
		for _, s := range ss {
			assert.Equal(t, ss[0].node, s.node, "room %s: players seated on different nodes (no twin room may exist)", roomName)
			vias[s.via] = true
		}
		assert.Greater(t, len(vias), 1, "room %s: the players came through one node only", roomName)
		assert.Len(t, tokens[roomName], 1, "room %s: one token", roomName)
		for _, addr := range addrs {
			j, err := joinThrough(addr, roomName, "observer")
			require.NoError(t, err)
			assert.Equal(t, ss[0].node, j.Node, "node %s names another owner of %s", addr, roomName)
			assert.True(t, tokens[roomName][j.Token], "node %s names another token for %s", addr, roomName)
		}
		owners[ss[0].node]++
	}
	t.Logf("rooms per owner: %v", owners)
	// The messages after the hello are the match's states, from the owner's ticks.
	var state struct {
		Type  string          `json:"type"`
		State json.RawMessage `json:"state"`
	}
	for state.Type != "state" {
		require.NoError(t, conns[0].ReadJSON(&state))
	}
	assert.Contains(t, string(state.State), `"p0"`)
	for _, c := range conns {
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""), time.Now().Add(time.Second))
	}
}
