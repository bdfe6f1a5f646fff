//go:build !race

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// restartableNode is a gameserver process of a test cluster that the test can restart at
// the same address under the same node ID.
type restartableNode struct {
	id, addr string
	stop     func()
	start    func()
}

// startRestartableCluster starts etcd and n gameserver processes with matches of 10
// minutes and no score limit, and waits until each answers joins.
func startRestartableCluster(t *testing.T, n int) []*restartableNode {
	t.Helper()
	dir := t.TempDir()
	etcdURL := startEtcd(t, dir)
	addrs := freeAddrs(t, n)
	nodes := make([]*restartableNode, n)
	for i, addr := range addrs {
		nd := &restartableNode{id: fmt.Sprintf("game-%d", i+1), addr: addr}
		runs := 0
		// A restart must come back at the same address (the page and the directory know
		// it). Another process may hold the port for a moment (a client socket of another
		// test, the range being the kernel's ephemeral one): then try again after a
		// pause, as startGameCluster tries another port.
		nd.start = func() {
			for try := 0; ; try++ {
				runs++
				cmd := exec.Command(os.Args[0])
				cmd.Env = append(os.Environ(), "GAMESERVER_TEST_MAIN=1",
					"GAMESERVER_SEAT_KEY="+strings.Repeat("k", 32),
					"GAMESERVER_TEST_ARGS="+strings.Join([]string{"-addr", addr, "-admin", "127.0.0.1:0",
						"-data", filepath.Join(dir, nd.id), "-bots=false", "-match", "10m", "-score-limit", "0",
						"-etcd", etcdURL, "-node", nd.id}, " "))
				name := fmt.Sprintf("%s-run%d", nd.id, runs)
				nd.stop = startClusterProcess(t, dir, name, cmd)
				if waitJoins(t, addr, filepath.Join(dir, name+".log")) {
					return
				}
				nd.stop()
				require.Less(t, try, 4, "%s: its port %s was taken at each of five tries", nd.id, addr)
				t.Logf("%s: trying %s again in a second", nd.id, addr)
				time.Sleep(time.Second)
			}
		}
		nodes[i] = nd
	}
	for _, nd := range nodes {
		nd.start()
	}
	return nodes
}

// chase steers the page's player to the nearest orb every 50 ms: the page's own
// top-level state, player and steer.
const chase = `setInterval(() => {
  if (!state) return;
  const me = state.players.find((p) => p.id === player);
  if (!me) return;
  let best = null, bd = Infinity;
  for (const [x, y] of state.orbs) { const d = Math.hypot(x - me.x, y - me.y); if (d < bd) { bd = d; best = [x, y]; } }
  if (!best) return;
  const dx = best[0] - me.x, dy = best[1] - me.y, l = Math.hypot(dx, dy) || 1;
  steer = { dx: +(dx / l).toFixed(2), dy: +(dy / l).toFixed(2) };
}, 50); true`

// myScore is the page's player's score in the latest state (-1 without one).
const myScore = `(() => { const me = state && state.players.find((p) => p.id === player); return me ? me.score : -1; })()`

// TestBrowserMatchSurvivesRollingRestart: the flagship acceptance of issue 29. etcd and
// three gameserver processes; headless Chromium plays a match in room "cup" on the page of
// the first node (steering to the orbs, so it scores). Each node in turn is stopped with
// SIGTERM (the drain hands its rooms to another node) and started again at the same
// address. The page follows its room each time it moves (its socket closed with 4001
// naming the node the room was handed to: the client resumes its seat there, without a
// join) and goes on playing: the same player, resumed, the score never lower than before
// the move, the match's tick going on, on the room's new owner.
func TestBrowserMatchSurvivesRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, three game servers and Chromium")
	}
	exe := chromium(t)
	nodes := startRestartableCluster(t, 3)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 4*time.Minute)
	defer tcancel()
	poll := func(expr string, within time.Duration) chromedp.Action {
		return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(50*time.Millisecond))
	}
	var player string
	var ok bool
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate("http://"+nodes[0].addr+"/?room=cup"),
		poll(`window.batonSeat && batonFrames() >= 5`, 30*time.Second),
		chromedp.Evaluate(`player`, &player),
		chromedp.Evaluate(chase, &ok),
		chromedp.Evaluate(`batonClient.addEventListener("joined", () => { window.joinedAt = Date.now(); }); true`, &ok),
		poll(myScore+` >= 2`, 60*time.Second)))

	moves := 0
	restarted := map[string]bool{}
	for range nodes {
		// The room's owner first while it has not been restarted, so that the room moves
		// as often as it can: each node is restarted once.
		var seatNode string
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`batonSeat.node`, &seatNode)))
		var nd *restartableNode
		for _, n := range nodes {
			if !restarted[n.id] && (nd == nil || n.id == seatNode) {
				nd = n
			}
		}
		restarted[nd.id] = true
		var owner string
		var score, tick, resumes, moved int
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Evaluate(`batonSeat.node`, &owner),
			chromedp.Evaluate(myScore, &score),
			chromedp.Evaluate(`state.seq`, &tick),
			chromedp.Evaluate(`batonClient.stats.resumes`, &resumes),
			chromedp.Evaluate(`batonClient.stats.moves`, &moved)))
		stopped := time.Now()
		nd.stop() // SIGTERM: the drain hands the node's rooms to another node
		t.Logf("%s stopped (drained) in %v; the room was on %s", nd.id, time.Since(stopped).Round(time.Millisecond), owner)
		nd.start()
		t.Logf("%s started again %v after its SIGTERM", nd.id, time.Since(stopped).Round(time.Millisecond))
		if owner == nd.id {
			moves++
			var now string
			// The socket closed with 4001 naming the new owner (ws.Config.KeepOnDrain), and
			// the page resumed there without a join.
			err := chromedp.Run(ctx, poll(fmt.Sprintf(`batonClient.stats.moves > %d && batonClient.stats.resumes > %d && batonClient.hello.resumed && batonClient.hello.node !== %q && state.seq > %d`, moved, resumes, nd.id, tick), 30*time.Second),
				chromedp.Evaluate(`batonClient.hello.node`, &now))
			require.NoError(t, err, "the page did not follow its room off %s", nd.id)
			var joinedAt int64
			require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`window.joinedAt`, &joinedAt)))
			t.Logf("the page followed the room from %s to %s: seated there %v after the SIGTERM", nd.id, now, time.UnixMilli(joinedAt).Sub(stopped).Round(time.Millisecond))
		}
		var seat struct {
			Player  string `json:"player"`
			Resumed bool   `json:"resumed"`
		}
		var after, tickAfter int
		require.NoError(t, chromedp.Run(ctx,
			poll(fmt.Sprintf(`state && !state.over && state.seq > %d + 20`, tick), 30*time.Second),
			chromedp.Evaluate(`batonSeat`, &seat),
			chromedp.Evaluate(myScore, &after),
			chromedp.Evaluate(`state.seq`, &tickAfter)))
		assert.Equal(t, player, seat.Player, "the same player")
		assert.GreaterOrEqual(t, after, score, "the score carried over")
		t.Logf("after %s: player %s, score %d -> %d, tick %d -> %d", nd.id, seat.Player, score, after, tick, tickAfter)
	}
	require.GreaterOrEqual(t, moves, 2, "the room moved with each of its owners' restarts")
	// The player plays on at the room's last owner: its inputs are taken there, it scores.
	var before, final int
	var stats map[string]int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(myScore, &before)))
	require.NoError(t, chromedp.Run(ctx,
		poll(fmt.Sprintf(`%s > %d`, myScore, before), 60*time.Second),
		chromedp.Evaluate(myScore, &final),
		chromedp.Evaluate(`batonClient.stats`, &stats)), "the player no longer scores after the restarts")
	t.Logf("moves %d, final score %d, client %v", moves, final, stats)
	assert.Equal(t, moves, stats["moves"], "every move told with 4001")
	assert.Zero(t, stats["drops"], "no connection dropped otherwise")
}
