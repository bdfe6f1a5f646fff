package wsload

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFleet against a gorilla/websocket server: the fleet answers pings, measures stamped
// data messages (also fragmented ones, once) only inside its window, counts unmeasurable
// ones as received, and records the server's close code.
func TestFleet(t *testing.T) {
	var pongs atomic.Int64
	release := make(chan struct{})
	up := websocket.Upgrader{WriteBufferSize: 256}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetPongHandler(func(string) error { pongs.Add(1); return nil })
		go func() { // gorilla runs the pong handler from reads
			for {
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
			}
		}()
		<-release
		send := func(size int) {
			p := make([]byte, size)
			PutStamp(p, time.Now())
			assert.NoError(t, c.WriteMessage(websocket.BinaryMessage, p))
		}
		assert.NoError(t, c.WriteControl(websocket.PingMessage, []byte("hi"), time.Now().Add(time.Second)))
		send(200)
		send(3000)                                                                // over the write buffer: sent in fragments
		assert.NoError(t, c.WriteMessage(websocket.TextMessage, []byte("short"))) // no stamp
		send(70000)                                                               // a 64-bit length
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "slow"))
		time.Sleep(100 * time.Millisecond) // let the close handshake finish before Close
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	defer hs.Close()

	f, err := Dial(context.Background(), Config{Addr: ln.Addr().String(), Conns: 3, Path: func(int) string { return "/ws" }})
	require.NoError(t, err)
	require.Equal(t, 3, f.Connected())
	f.MeasureStart()
	close(release)
	require.Eventually(t, func() bool { return f.Received() == 3*4 && pongs.Load() == 3 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return f.Result().Errors["close 1008"] == 3 }, 5*time.Second, 5*time.Millisecond)
	f.MeasureEnd()
	f.Close()
	res := f.Result()
	assert.Equal(t, uint64(3*3), res.Delivered, "stamped messages")
	assert.Equal(t, int64(3*3), res.Latency.TotalCount())
	assert.Less(t, res.Latency.Max(), int64(5_000_000))
	assert.Equal(t, map[string]uint64{"close 1008": 3}, res.Errors)
	assert.Positive(t, res.Window)
}

// TestDialFailures: refused connections and failed handshakes count as connect errors;
// an invalid Config is refused naming the field.
func TestDialFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: http.NotFoundHandler()}
	go hs.Serve(ln)
	defer hs.Close()
	f, err := Dial(context.Background(), Config{Addr: ln.Addr().String(), Conns: 2, Path: func(int) string { return "/nope" }})
	require.NoError(t, err)
	f.Close()
	assert.Equal(t, 0, f.Connected())
	assert.Equal(t, uint64(2), f.Result().Errors[ErrConnect])

	for _, c := range []Config{
		{Addr: "127.0.0.1:1", Path: func(int) string { return "/" }},
		{Addr: "127.0.0.1:1", Conns: 1},
		{Addr: "8.8.8.8:80", Conns: 1, Path: func(int) string { return "/" }},
		{Addr: "127.0.0.1:1", Conns: 1, Path: func(int) string { return "/" }, MaxDialing: -1},
	} {
		err := c.Validate()
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "wsload: Config."), err.Error())
	}
}
