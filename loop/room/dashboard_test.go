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

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"
)

// readEvent reads the data of the next frame (an unnamed event) of a Server-Sent Events
// stream, skipping the "history" event a new subscriber gets first.
func readEvent(t *testing.T, r *bufio.Reader) []byte {
	t.Helper()
	named := false
	for {
		line, err := r.ReadBytes('\n')
		require.NoError(t, err)
		switch {
		case len(bytes.TrimSpace(line)) == 0:
			named = false
		case bytes.HasPrefix(line, []byte("event: ")):
			named = true
		case !named && bytes.HasPrefix(line, []byte("data: ")):
			return bytes.TrimSpace(line[len("data: "):])
		}
	}
}

// The dashboard's rooms panel lists the rooms that run (stopped ones stay on the rooms
// page), and the rooms' series sum every room's counters, the "other" row's included, with
// the worst lateness p99 of the rooms that run.
func TestDashboardPanelAndSeries(t *testing.T) {
	rs := accounting.RoomsSnapshot{Total: 4, Rooms: []accounting.RoomSnapshot{
		{Name: "a", State: roomRunning, Ticks: 10, Overruns: 2, Skipped: 1, TickLateness: accounting.Summary{P99: 3 * time.Millisecond}},
		{Name: "gone", State: roomStopped, Ticks: 7, Overruns: 7, TickLateness: accounting.Summary{P99: 9 * time.Millisecond}},
		{Name: "b", State: roomDraining, Ticks: 5, Skipped: 4},
	}, Other: &accounting.RoomSnapshot{Name: "other", Ticks: 100, Overruns: 1, Rooms: 1}}
	var rows []panelRow
	require.NoError(t, json.Unmarshal(panel(rs), &rows))
	names := []string{}
	for _, r := range rows {
		names = append(names, r.Room)
	}
	assert.Equal(t, []string{"a", "b", "other (1 rooms)"}, names, "the stopped room is left out")
	assert.Equal(t, map[string]float64{"rooms": 4, "ticks_total": 122, "overruns_total": 10, "skipped_total": 5,
		"tick_lateness_p99_seconds": 0.003}, series(rs))
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
