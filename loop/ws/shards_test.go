package ws

import (
	"context"
	"encoding/json"
	"io"
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

// TestWSStatsWithShards: with several loops the websockets section is taken on each loop
// and summed by its one summing function: the page shows the totals and each shard's
// figures, and Snapshot.Sections["websockets"] is the totals as a Stats.
func TestWSStatsWithShards(t *testing.T) {
	const shards, conns = 2, 6
	s, addr := startServer(t, loop.Config{Shards: shards}, func(s *loop.Server) {
		s.Handle("GET /ws", wsEcho(nil))
		stats.Mount(s, "/debug")
	})
	var clients []*websocket.Conn
	for range conns {
		c := wsDial(t, addr, "/ws", nil)
		require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte("hi")))
		_, _, err := c.ReadMessage()
		require.NoError(t, err)
		clients = append(clients, c)
	}
	resp, err := http.Get("http://" + addr + "/debug/websockets")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, string(body))
	var page struct {
		Stats
		Shards []Stats `json:"shards"`
	}
	require.NoError(t, json.Unmarshal(body, &page), string(body))
	assert.Equal(t, conns, page.Open)
	require.Len(t, page.Shards, shards)
	open, msgs := 0, uint64(0)
	for _, sh := range page.Shards {
		open += sh.Open
		for _, r := range sh.Routes {
			msgs += r.MessagesIn
		}
	}
	assert.Equal(t, conns, open, "the shards' open connections add up to the total")
	require.Len(t, page.Routes, 1, "one route, merged over the shards")
	assert.EqualValues(t, conns, page.Routes[0].MessagesIn)
	assert.EqualValues(t, conns, msgs)
	assert.Len(t, page.Connections, conns)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, err := stats.Take(ctx, s, stats.ViewSections)
	require.NoError(t, err)
	st, ok := snap.Sections["websockets"].(Stats)
	require.True(t, ok, "Sections[websockets] is %T", snap.Sections["websockets"])
	assert.Equal(t, conns, st.Open)
	assert.EqualValues(t, conns, st.UpgradesTotal)

	resp, err = http.Get("http://" + addr + "/debug/websockets?format=text")
	require.NoError(t, err)
	text, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.True(t, strings.HasPrefix(string(text), "== total over 2 shards ==\nwebsockets open 6"), string(text))
	for _, c := range clients {
		_ = c.Close()
	}
}
