package ws

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
)

// TestWSStatsListsTheMostQueued: with more connections open than the page lists, the page
// counts them all and lists maxListed of them, the most queued output first, then by id.
func TestWSStatsListsTheMostQueued(t *testing.T) {
	var conns []*Conn // on the loop
	s, addr := startServer(t, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /ws", func(c *loop.Ctx) {
			w, err := UpgradeTo(c, opts(c, Config{}), Handler{OnMessage: func(*Conn, bool, []byte) {}})
			if err == nil {
				conns = append(conns, w)
			}
		})
	})
	n := maxListed + 20
	for range n {
		wsRawDial(t, addr, "/ws") // reads nothing: output sent to it stays queued
	}
	var st Stats
	require.Eventually(t, func() bool { st = wsStats(t, s); return st.Open == n }, 10*time.Second, time.Millisecond)
	require.Len(t, st.Connections, maxListed)
	require.Equal(t, maxListed, st.ConnectionsShown)
	for i := 1; i < len(st.Connections); i++ {
		require.Less(t, st.Connections[i-1].ID, st.Connections[i].ID, "nothing queued: by id")
	}
	var last *Conn
	onLoop(t, s, func() {
		last = conns[len(conns)-1]
		for _, w := range conns {
			if w.id > last.id {
				last = w
			}
		}
		require.NoError(t, last.Send(NewPrepared(true, make([]byte, 8<<20))))
		last.rc.Flush(-1)
	})
	st = wsStats(t, s)
	require.Equal(t, n, st.Open)
	require.Len(t, st.Connections, maxListed)
	require.Equal(t, last.id, st.Connections[0].ID, "the most queued first, though its id is the highest")
	require.Positive(t, st.Connections[0].QueuedBytes)
	require.Equal(t, st.QueuedBytes, st.Connections[0].QueuedBytes)
	require.NotEmpty(t, st.Connections[0].Remote)
	for i := 2; i < len(st.Connections); i++ {
		require.Less(t, st.Connections[i-1].ID, st.Connections[i].ID)
	}
}
