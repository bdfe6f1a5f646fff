package room

import (
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/stats"
)

func TestShardRoomsRunOnTheirShard(t *testing.T) {
	const shards = 3
	type made struct {
		shard, tickShard int
	}
	ticked := make(chan made, 16)
	var rooms sync.Map
	_, addr := startServer(t, loop.Config{Shards: shards}, func(s *loop.Server) {
		stats.Mount(s, "/debug/baton")
		s.Handle("GET /room/{name}", func(c *loop.Ctx) {
			name := c.PathValue("name")
			r, err := New(c.Loop(), Config[int]{Name: name, Period: time.Millisecond,
				Tick: func(r *Room[int], t *Tick[int]) {
					if t.N == 1 {
						ticked <- made{shard: c.Loop().Index(), tickShard: t.Task.Loop().Index()}
						r.Stop()
					}
				}})
			if Error(c, err) {
				return
			}
			rooms.Store(name, r)
			c.String(200, "ok")
		})
	})
	for i := 0; i < 6; i++ {
		resp, body := looptest.Dial(t, addr).Get("/room/r" + strconv.Itoa(i))
		require.Equal(t, 200, resp.StatusCode, body)
		m := <-ticked
		assert.Equal(t, m.shard, m.tickShard, "the room ticks on the loop of the handler that made it")
	}
	// The rooms page with several loops: the totals, and each loop's own rooms.
	resp, body := looptest.Dial(t, addr).Get("/debug/baton/rooms")
	require.Equal(t, 200, resp.StatusCode, body)
	var page struct {
		Total  int `json:"rooms_total"`
		Shards []struct {
			Shard int `json:"shard"`
			Total int `json:"rooms_total"`
		} `json:"shards"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &page), body)
	require.Len(t, page.Shards, shards)
	sum := 0
	for i, sh := range page.Shards {
		assert.Equal(t, i, sh.Shard)
		sum += sh.Total
	}
	assert.Equal(t, 6, page.Total, "six rooms made (stopped, not yet freed)")
	assert.Equal(t, page.Total, sum, "the total sums the loops")
}
