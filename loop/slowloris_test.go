package loop

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// 2,000 slowloris connections trickle header bytes; all are closed by the header timeout
// while a normal client keeps being served.
func testManySlowloris(t *testing.T, m mode) {
	const n = 2000
	_, addr := startServer(t, m.cfg(Config{ReadHeaderTimeout: 500 * time.Millisecond}), func(s *Server) {
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err, "dial %d", i)
		defer c.Close()
		conns = append(conns, c)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // trickle one byte per connection every 50 ms
		defer wg.Done()
		req := []byte("GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 200))
		for k := 0; ; k++ {
			for _, c := range conns {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Write(req[k%len(req) : k%len(req)+1])
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	normal := dial(t, addr)
	for i := 0; i < 10; i++ {
		resp, body := normal.get("/ok")
		require.Equal(t, 200, resp.StatusCode, "normal client")
		require.Equal(t, "ok", body, "normal client")
		time.Sleep(20 * time.Millisecond) // spreads the checks over the trickle; orders nothing
	}
	closed := 0
	deadline := time.Now().Add(15 * time.Second)
	buf := make([]byte, 512)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		for {
			if _, err := c.Read(buf); err != nil {
				var ne net.Error
				require.False(t, errors.As(err, &ne) && ne.Timeout(), "a slowloris connection was still open after 15s (%d closed)", closed)
				closed++
				break
			}
		}
	}
	close(stop)
	wg.Wait()
	require.Equal(t, n, closed, "slowloris connections closed")
	resp, _ := normal.get("/ok")
	mustStatus(t, resp, 200)
}
