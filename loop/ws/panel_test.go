package ws

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"
)

// TestWSDashboardPanel: the live dashboard's frames carry the websockets section's panel
// (what its page renders in the WebSockets box): the totals and a row per route.
func TestWSDashboardPanel(t *testing.T) {
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /ws", wsEcho(nil))
		stats.Mount(s, "/debug")
	})
	conn := wsDial(t, addr, "/ws", nil)
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("hi")))
	_, _, err := conn.ReadMessage()
	require.NoError(t, err)

	resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://" + addr + "/debug/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var frame struct {
		Panels struct {
			WebSockets struct {
				Open   int          `json:"open"`
				Routes []RouteStats `json:"routes"`
			} `json:"websockets"`
		} `json:"panels"`
	}
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || strings.HasPrefix(data, "[") { // the history event comes first: skip it
			continue
		}
		require.NoError(t, json.Unmarshal([]byte(data), &frame))
		break
	}
	assert.Equal(t, 1, frame.Panels.WebSockets.Open)
	require.Len(t, frame.Panels.WebSockets.Routes, 1)
	assert.Equal(t, "GET /ws", frame.Panels.WebSockets.Routes[0].Route)
	assert.EqualValues(t, 1, frame.Panels.WebSockets.Routes[0].MessagesIn)
}
