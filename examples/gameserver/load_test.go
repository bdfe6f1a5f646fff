package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// TestLoad is a manual load check, not part of the suite: GAMESERVER_LOAD=PLAYERS,SECONDS
// (e.g. 400,10) starts the real server as a child process with no bots, connects PLAYERS
// WebSocket players (matches of 4), lets them play for SECONDS (one input per state
// received, 20 a second each) and reports input-to-snapshot latency (from sending an
// input to the first state whose seq for the player acknowledges it), states received,
// the server's CPU and RSS, and the rooms' tick lateness. It is the seed of the bench
// harness's `game` scenario.
func TestLoad(t *testing.T) {
	spec := os.Getenv("GAMESERVER_LOAD")
	if spec == "" {
		t.Skip("set GAMESERVER_LOAD=PLAYERS,SECONDS to run the load check")
	}
	ps, ss, _ := strings.Cut(spec, ",")
	players, err := strconv.Atoi(ps)
	require.NoError(t, err, "GAMESERVER_LOAD players")
	secs, err := strconv.Atoi(ss)
	require.NoError(t, err, "GAMESERVER_LOAD seconds")
	window := time.Duration(secs) * time.Second

	// All players come from 127.0.0.1: the per-address ticket limit would refuse them.
	p := startProcess(t, "-addr 127.0.0.1:0 -admin 127.0.0.1:0 -addr-rate 1000000 -addr-burst 1000000 -bots=false -players 4 -wait 30s -match 30m -score-limit 0 -db "+t.TempDir()+"/load.db")
	pid := p.cmd.Process.Pid

	var (
		mu      sync.Mutex
		lat     []time.Duration
		states  int
		failed  []error
		started sync.WaitGroup
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range players {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			id := "load" + strconv.Itoa(i)
			ws, _, err := websocket.DefaultDialer.Dial("ws://"+p.addr+"/ws?player="+id, nil)
			started.Done()
			if err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
				return
			}
			defer ws.Close()
			go func() { <-stop; _ = ws.Close() }()
			sent := map[uint32]time.Time{}
			var seq uint32
			var mine []time.Duration
			n := 0
			measuring := false
			for {
				var m struct {
					Type  string `json:"type"`
					State *struct {
						Players []struct {
							ID  string `json:"id"`
							Seq uint32 `json:"seq"`
						} `json:"players"`
					} `json:"state"`
				}
				if ws.ReadJSON(&m) != nil {
					break
				}
				if m.Type != "state" {
					continue
				}
				now := time.Now()
				n++
				for _, pl := range m.State.Players {
					if pl.ID != id {
						continue
					}
					for s, at := range sent {
						if s <= pl.Seq {
							if measuring {
								mine = append(mine, now.Sub(at))
							}
							delete(sent, s)
						}
					}
				}
				measuring = true
				seq++
				sent[seq] = now
				if ws.WriteJSON(map[string]any{"dx": 1, "dy": 0, "seq": seq}) != nil {
					break
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			states += n
			mu.Unlock()
		}()
	}
	started.Wait()
	cpu0, _ := procCPU(pid)
	t0 := time.Now()
	time.Sleep(window)
	cpu1, rss := procCPU(pid)
	elapsed := time.Since(t0)
	var rooms struct {
		Rooms []struct {
			Name     string `json:"name"`
			Lateness struct {
				P99 float64 `json:"p99_seconds"`
				Max float64 `json:"max_seconds"`
			} `json:"tick_lateness"`
			Duration struct {
				P99 float64 `json:"p99_seconds"`
			} `json:"tick_duration"`
		} `json:"rooms"`
	}
	resp, err := http.Get("http://" + p.admin + "/debug/baton/rooms?top=100000")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rooms))
	resp.Body.Close()
	close(stop)
	wg.Wait()
	require.Empty(t, failed, "players that could not connect")
	require.NotEmpty(t, lat, "no input was acknowledged")

	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	var lateP99, lateMax, tickP99 float64
	for _, r := range rooms.Rooms {
		if strings.HasPrefix(r.Name, "arena-") {
			lateP99 = max(lateP99, r.Lateness.P99)
			lateMax = max(lateMax, r.Lateness.Max)
			tickP99 = max(tickP99, r.Duration.P99)
		}
	}
	t.Logf("%d players in %d rooms for %v: input-to-snapshot p50 %v p99 %v max %v (%d inputs); %.0f states/s received",
		players, len(rooms.Rooms)-1, elapsed.Round(time.Millisecond), q(0.5), q(0.99), lat[len(lat)-1], len(lat),
		float64(states)/elapsed.Seconds())
	t.Logf("server CPU %.1f%% of one core, RSS %.1f MiB; worst room's tick lateness p99 %.2f ms (max %.2f ms), tick duration p99 %.3f ms",
		100*(cpu1-cpu0).Seconds()/elapsed.Seconds(), float64(rss)/(1<<20), lateP99*1e3, lateMax*1e3, tickP99*1e3)
}

// procCPU reads a process's user+system CPU time and resident set size from /proc.
func procCPU(pid int) (cpu time.Duration, rss int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks, pages * int64(os.Getpagesize())
}
