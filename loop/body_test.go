package loop

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client that closes in the middle of a body leaves nothing behind; a 10 GB
// Content-Length claim is refused before any body is read.
func testAbruptCloseAndHugeClaims(t *testing.T, m mode) {
	var ran atomic.Int32
	s, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("POST /up", func(c *Ctx) {
			ran.Add(1)
			c.String(200, fmt.Sprint(len(c.Body())))
		})
	})
	hw := watchHeap()
	for i := 0; i < 50; i++ {
		c := dial(t, addr)
		c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + strings.Repeat("x", 10000))
		_ = c.c.Close()
	}
	c := dial(t, addr)
	c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n")
	resp, _ := c.read("POST")
	mustStatus(t, resp, 413)
	c.expectClosed(5 * time.Second)
	c = dial(t, addr)
	c.send("POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\n")
	resp, _ = c.read("POST")
	require.Contains(t, []int{400, 413}, resp.StatusCode, "huge chunk")
	require.LessOrEqual(t, hw.growth(), uint64(64<<20), "heap growth")
	c = dial(t, addr)
	c.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	resp, body := c.read("POST")
	require.Equal(t, 200, resp.StatusCode, "normal upload")
	require.Equal(t, "3", body, "normal upload")
	require.EqualValues(t, 1, ran.Load(), "handlers ran (incomplete bodies must not run)")
	_ = c.c.Close()
	// Every connection of this test is gone from the server's books.
	waitFor(t, func() bool {
		done := make(chan int, 1)
		if s.Loop(0).Post(func() { done <- len(s.conns.all) }) != nil {
			return false
		}
		return <-done == 0
	})
}
