package servers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/bench/wsload"
)

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func getStats[T any](t *testing.T, url string) T {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var v T
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	return v
}

// wsTargets are the targets of the rooms, ws-broadcast and arena routes: the floor too
// where it runs (Linux).
func wsTargets() []string {
	if runtime.GOOS == "linux" {
		return append(append([]string{}, Targets...), Floor)
	}
	return Targets
}

// TestRoomsRoutes: on every target, rooms set up by POST /rooms/setup tick (light rooms
// and the heavy one), take inputs that their ticks apply, refuse bad and misdirected
// inputs, and report lateness histograms that decode.
func TestRoomsRoutes(t *testing.T) {
	for _, target := range wsTargets() {
		t.Run(target, func(t *testing.T) {
			srv, err := Start(target, "127.0.0.1:0", nil)
			require.NoError(t, err)
			defer srv.Close()
			base := "http://" + srv.Addr()
			code, body := post(t, base+"/rooms/setup", `{"rooms":4,"iters":10,"heavy_iters":50}`)
			require.Equal(t, 200, code, body)
			code, _ = post(t, base+"/rooms/setup", `{"rooms":4,"iters":10}`)
			assert.Equal(t, 409, code, "a second setup")
			code, _ = post(t, base+"/rooms/setup", `{"rooms":0,"iters":10}`)
			assert.Equal(t, 400, code, "an invalid setup")
			code, _ = post(t, base+"/rooms/setup", `{"rooms":1,"iters":10,"pace_us":-1}`)
			assert.Equal(t, 400, code, "a negative pace")
			require.Eventually(t, func() bool {
				code, _ := post(t, base+"/rooms/room-3/input", "p=1&dx=1&dy=0")
				return code == 200
			}, 5*time.Second, 5*time.Millisecond)
			code, _ = post(t, base+"/rooms/room-3/input", "p=9&dx=1&dy=0")
			assert.Equal(t, 400, code, "player out of range")
			code, _ = post(t, base+"/rooms/room-99/input", "p=1&dx=1&dy=0")
			assert.Equal(t, 404, code, "unknown room")
			var st RoomStats
			require.Eventually(t, func() bool {
				st = getStats[RoomStats](t, base+"/rooms/stats")
				return st.Light.Ticks >= 8 && st.Heavy != nil && st.Heavy.Ticks >= 2 && st.InputsApplied >= 1
			}, 5*time.Second, 10*time.Millisecond)
			assert.Equal(t, 4, st.Rooms)
			assert.Equal(t, int64(10), st.Iters, "not paced: the setup's iterations")
			assert.GreaterOrEqual(t, st.InputsQueued, uint64(1))
			assert.Positive(t, st.Light.TickUs)
			h, err := hdrhistogram.Decode([]byte(st.Light.Lateness))
			require.NoError(t, err)
			assert.Equal(t, int64(st.Light.Ticks), h.TotalCount())

			code, _ = post(t, base+"/rooms/reset", "")
			require.Equal(t, 200, code)
			st = getStats[RoomStats](t, base+"/rooms/stats")
			assert.Less(t, st.Light.Ticks, uint64(4*3), "a reset clears the figures")
		})
	}
}

// TestWSRoutes: on every target, WebSocket clients join rooms, POST /ws/start makes each
// room push stamped messages to its members, and wsload measures them in its window.
func TestWSRoutes(t *testing.T) {
	for _, target := range wsTargets() {
		t.Run(target, func(t *testing.T) {
			srv, err := Start(target, "127.0.0.1:0", nil)
			require.NoError(t, err)
			defer srv.Close()
			base := "http://" + srv.Addr()
			resp, err := http.Get(base + "/ws/lobby")
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 404, resp.StatusCode, "not a room-N name")

			fleet, err := wsload.Dial(context.Background(), wsload.Config{
				Addr: srv.Addr(), Conns: 10, Path: func(i int) string { return fmt.Sprintf("/ws/room-%d", i%2) },
			})
			require.NoError(t, err)
			defer fleet.Close()
			require.Equal(t, 10, fleet.Connected())
			require.Eventually(t, func() bool { return getStats[WSStats](t, base+"/ws/stats").Conns == 10 }, 5*time.Second, 5*time.Millisecond)
			code, body := post(t, base+"/ws/start", `{"rooms":2}`)
			require.Equal(t, 200, code, body)
			code, _ = post(t, base+"/ws/start", `{"rooms":2}`)
			assert.Equal(t, 409, code)
			fleet.MeasureStart()
			require.Eventually(t, func() bool { return fleet.Received() >= 30 }, 5*time.Second, 5*time.Millisecond)
			fleet.MeasureEnd()
			st := getStats[WSStats](t, base+"/ws/stats")
			fleet.Close()
			res := fleet.Result()
			assert.GreaterOrEqual(t, res.Delivered, uint64(10))
			assert.Equal(t, int64(res.Delivered), res.Latency.TotalCount())
			assert.Empty(t, res.Errors)
			assert.Positive(t, res.Window)
			assert.GreaterOrEqual(t, st.Sent, uint64(30))
			assert.GreaterOrEqual(t, st.Broadcasts, uint64(3))
			assert.Zero(t, st.SlowClosed)
		})
	}
}

func TestParseInput(t *testing.T) {
	in, ok := ParseInput([]byte("p=2&dx=1&dy=-1"))
	require.True(t, ok)
	assert.Equal(t, Input{Player: 2, DX: 1, DY: -1}, in)
	in, ok = ParseInput([]byte("dy=7&p=0&dx=-9"))
	require.True(t, ok)
	assert.Equal(t, Input{Player: 0, DX: -1, DY: 1}, in, "moves are clamped to -1..1")
	for _, bad := range []string{"", "p=1", "p=1&dx=1", "p=4&dx=0&dy=0", "p=x&dx=0&dy=0", "p=1&dx=0&dz=0", "p1&dx=0&dy=0"} {
		_, ok := ParseInput([]byte(bad))
		assert.False(t, ok, "%q", bad)
	}
}

func TestSimStep(t *testing.T) {
	a, b := NewRoomState(7), NewRoomState(7)
	a.SimStep(50)
	b.SimStep(50)
	assert.Equal(t, a.Checksum(), b.Checksum(), "deterministic")
	a.Apply(Input{Player: 1, DX: 1})
	a.SimStep(1)
	assert.NotEqual(t, a.Checksum(), b.Checksum())
	assert.Equal(t, uint64(2), a.Tick)
	assert.Positive(t, CalibrateSim(20*time.Microsecond))
	assert.Error(t, RoomSetup{Rooms: 1}.Validate())
	assert.Error(t, RoomSetup{Iters: 1}.Validate())
	assert.Error(t, RoomSetup{Rooms: 1, Iters: 1, HeavyIters: -1}.Validate())
	assert.NoError(t, RoomSetup{Rooms: 1, Iters: 1}.Validate())
	assert.Error(t, WSStart{}.Validate())
	assert.Equal(t, 12, wsRoomIndex("room-12"))
	assert.Equal(t, -1, wsRoomIndex("room-"))
	assert.Equal(t, -1, wsRoomIndex("lobby"))
}
