package room

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"
)

// readEvent reads the next "data:" line of a Server-Sent Events stream.
func readEvent(t *testing.T, r *bufio.Reader) []byte {
	t.Helper()
	for {
		line, err := r.ReadBytes('\n')
		require.NoError(t, err)
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			return bytes.TrimSpace(data)
		}
	}
}

// With rooms on the server, a frame carries the rooms table, busiest first: a room that
// spins in its tick leads it.
func TestDashboardShowsRooms(t *testing.T) {
	s, addr := startServer(t, loop.Config{StallThreshold: -1}, func(s *loop.Server) { stats.Mount(s, "/debug/baton") })
	newRoomT(t, s, Config[int]{Name: "quiet", Period: 20 * time.Millisecond, Tick: func(*Room[int], *Tick[int]) {}})
	newRoomT(t, s, Config[int]{Name: "busy", Period: 20 * time.Millisecond,
		Tick: func(*Room[int], *Tick[int]) { spinFor(3 * time.Millisecond) }})
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://" + addr + "/debug/baton/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var rows []panelRow
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		var f struct {
			Panels struct {
				Rooms []panelRow `json:"rooms"`
			} `json:"panels"`
		}
		require.NoError(t, json.Unmarshal(readEvent(t, r), &f))
		rows = f.Panels.Rooms
		if len(rows) == 2 && rows[0].Room == "busy" && rows[0].Share10s > rows[1].Share10s {
			break
		}
	}
	require.Len(t, rows, 2, "%+v", rows)
	assert.Equal(t, "busy", rows[0].Room)
	assert.Equal(t, "quiet", rows[1].Room)
	assert.Positive(t, rows[0].Ticks)
	assert.Greater(t, rows[0].TickP99, 1.0, "the busy room's ticks spin 3 ms")
}
