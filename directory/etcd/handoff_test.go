package etcd

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop/room"
)

// handoffKey is the key the handoff test's nodes share.
var handoffKey = []byte("baton cluster test handoff key, 32+ bytes")

// handoffState is a handoff test room's state: the ticks it has run, on any node.
type handoffState struct{ Ticks uint64 }

// handoffRoom is the room of the handoff tests (20 Hz): every tick counts itself in the
// room's state, which moves with the room, and logs "node room token start end N count".
func handoffRoom(id, name string, log *os.File) room.Config[int] {
	st := &handoffState{}
	var line []byte
	cfg := room.Config[int]{Name: name, Period: 50 * time.Millisecond,
		Tick: func(r *room.Room[int], t *room.Tick[int]) {
			start := monotonic()
			st.Ticks++
			line = fmt.Appendf(line[:0], "%s %s %d %d %d %d %d\n", id, name, r.Token(), start, monotonic(), t.N, st.Ticks)
			_, _ = log.Write(line)
		}}
	cfg.Snapshot, cfg.Restore = room.JSONState[int](st)
	return cfg
}

// hoTick is one logged tick of a handoff test room.
type hoTick struct {
	tick
	n, count uint64
}

func readHandoffTicks(t testing.TB, path string) map[string][]hoTick {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string][]hoTick{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 7 {
			continue
		}
		tk := hoTick{tick: tick{node: fs[0], room: fs[1]}}
		tk.token, _ = strconv.ParseInt(fs[2], 10, 64)
		tk.start, _ = strconv.ParseInt(fs[3], 10, 64)
		tk.end, _ = strconv.ParseInt(fs[4], 10, 64)
		tk.n, _ = strconv.ParseUint(fs[5], 10, 64)
		tk.count, _ = strconv.ParseUint(fs[6], 10, 64)
		out[tk.room] = append(out[tk.room], tk)
	}
	for _, ts := range out {
		slices.SortFunc(ts, func(a, b hoTick) int { return int(a.start - b.start) })
	}
	return out
}

// drainNode sends node SIGTERM (it drains: Shutdown with a 3 s deadline) and waits for it
// to exit.
func drainNode(t testing.TB, nd *child) time.Duration {
	t.Helper()
	began := time.Now()
	require.NoError(t, nd.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-nd.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("node %s did not exit 15 s after SIGTERM", nd.id)
	}
	return time.Since(began)
}

// TestHandoffOnDrainAcrossProcesses: three baton nodes as processes on one real etcd, 30
// rooms of 20 Hz placed through random nodes; n0 drains (SIGTERM), then n1: each hands its
// rooms to the nodes placement names (never a draining one). Every room ends up ticking on
// n2 with its state carried (the tick count in the state runs 1, 2, 3... across the
// nodes: no tick lost from the state, none run twice), tick numbers increasing, no two
// owners' tick windows overlapping (twins), and each move's tick-to-tick interval is
// reported.
func TestHandoffOnDrainAcrossProcesses(t *testing.T) {
	c := startCluster(t, 1)
	logPath := filepath.Join(t.TempDir(), "ticks")
	nodes := startNodes(t, c, 3, nodeOpts{prefix: "/handoff/", ttl: 2 * time.Second, tickLog: logPath, handoff: true})
	const rooms = 30
	names := make([]string, rooms)
	for i := range names {
		names[i] = fmt.Sprintf("ho-%d", i)
		_, err := joinVia(nodes[rand.IntN(3)], names[i], "p")
		require.NoError(t, err)
	}
	ticked := func(node string, atLeast int) func() bool {
		return func() bool {
			all := readHandoffTicks(t, logPath)
			for _, n := range names {
				ts := all[n]
				k := 0
				for i := len(ts) - 1; i >= 0 && ts[i].node == node; i-- {
					k++
				}
				if node == "" {
					k = len(ts)
				}
				if k < atLeast {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, ticked("", 5), 10*time.Second, 50*time.Millisecond, "the rooms did not tick")
	d0 := drainNode(t, nodes[0])
	d1 := drainNode(t, nodes[1])
	require.Eventually(t, ticked("n2", 5), 10*time.Second, 50*time.Millisecond, "the rooms do not all tick on n2")

	all := readHandoffTicks(t, logPath)
	var flat []tick
	var gaps []time.Duration
	moves := 0
	for _, n := range names {
		ts := all[n]
		for i, tk := range ts {
			flat = append(flat, tk.tick)
			require.Equal(t, uint64(i+1), tk.count, "room %s: tick %d carries count %d (state lost or a tick run twice)", n, i+1, tk.count)
			if i == 0 {
				continue
			}
			prev := ts[i-1]
			require.Greater(t, tk.n, prev.n, "room %s: tick numbers", n)
			if tk.node != prev.node {
				require.Greater(t, tk.token, prev.token, "room %s: the new owner's token", n)
				moves++
				gaps = append(gaps, time.Duration(tk.start-prev.start))
			}
		}
	}
	assert.Empty(t, twins(flat), "twin rooms")
	require.NotEmpty(t, gaps, "no room moved")
	slices.Sort(gaps)
	t.Logf("%d rooms, %d moves (drains took %v and %v): interval between the last tick on the old node and the first on the new p50 %v, p99 %v, max %v (a tick every 50 ms)",
		rooms, moves, d0.Round(time.Millisecond), d1.Round(time.Millisecond), gaps[len(gaps)/2], gaps[len(gaps)*99/100], gaps[len(gaps)-1])
}

// TestHandoffOffLosesRooms is the same drain without handoff: the rooms of the drained
// node stop there and run nowhere (the test above can fail).
func TestHandoffOffLosesRooms(t *testing.T) {
	c := startCluster(t, 1)
	logPath := filepath.Join(t.TempDir(), "ticks")
	nodes := startNodes(t, c, 2, nodeOpts{prefix: "/nohandoff/", ttl: 2 * time.Second, tickLog: logPath})
	on := map[string]string{}
	for i := range 10 {
		name := fmt.Sprintf("lost-%d", i)
		s, err := joinVia(nodes[i%2], name, "p")
		require.NoError(t, err)
		on[name] = s.Node
	}
	require.Eventually(t, func() bool { return len(readTicks(t, logPath)) > 50 }, 10*time.Second, 50*time.Millisecond)
	drainNode(t, nodes[0])
	after := monotonic()
	require.Eventually(t, func() bool { // n1's rooms tick on after the drain
		for _, tk := range readTicks(t, logPath) {
			if tk.start > after+int64(200*time.Millisecond) {
				return true
			}
		}
		return false
	}, 5*time.Second, 50*time.Millisecond)
	lost := 0
	for name, node := range on {
		if node != "n0" {
			continue
		}
		lost++
		for _, tk := range readTicks(t, logPath) {
			assert.False(t, tk.room == name && tk.start > after, "room %s ticked after its node drained, without handoff", name)
		}
	}
	require.Positive(t, lost)
	t.Logf("%d rooms of the drained node lost without handoff", lost)
}
