package servers

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatonShardsRoutes: baton with 3 shards serves plaintext and the rooms routes (rooms
// spread over the shards, inputs from any shard), the rooms page shows every shard, and the
// other scenarios' routes are not served.
func TestBatonShardsRoutes(t *testing.T) {
	srv, err := StartWith(Baton, "127.0.0.1:0", nil, Options{Shards: 3})
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()
	for range 10 {
		resp, err := http.Get(base + "/plaintext")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, Hello, string(b))
	}
	code, body := post(t, base+"/rooms/setup", `{"rooms":12,"iters":10,"heavy_iters":50}`)
	require.Equal(t, 200, code, body)
	code, _ = post(t, base+"/rooms/setup", `{"rooms":4,"iters":10}`)
	assert.Equal(t, 409, code, "a second setup")
	for _, room := range []string{"room-0", "room-5", "room-11"} {
		require.Eventually(t, func() bool {
			code, _ := post(t, base+"/rooms/"+room+"/input", "p=1&dx=1&dy=0")
			return code == 200 // the rooms are made over one period
		}, 5*time.Second, 5*time.Millisecond)
	}
	var st RoomStats
	require.Eventually(t, func() bool {
		st = getStats[RoomStats](t, base+"/rooms/stats")
		return st.Light.Ticks >= 24 && st.Heavy != nil && st.Heavy.Ticks >= 2 && st.InputsApplied >= 3
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, 12, st.Rooms)

	page := getStats[map[string]any](t, base+"/debug/baton/rooms")
	assert.EqualValues(t, 13, page["rooms_total"], "every shard's rooms")
	shards, _ := page["shards"].([]any)
	assert.Len(t, shards, 3)

	resp, err := http.Get(base + "/json/players/1")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 404, resp.StatusCode, "one loop's routes are not served with shards")
}
