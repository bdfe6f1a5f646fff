package loop

import (
	"sync/atomic"
	"testing"
	"time"
)

// A task that yields in a loop until another request arrives must not keep the loop from
// polling I/O: the other request is accepted, parsed and run between its yields.
func TestYieldingTaskDoesNotStarveIO(t *testing.T) {
	var flag atomic.Bool
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /a", func(c *Ctx) {
			for !flag.Load() {
				c.Yield()
			}
			c.String(200, "a")
		})
		s.Handle("GET /b", func(c *Ctx) {
			flag.Store(true)
			_ = c.Sleep(50 * time.Millisecond)
			c.String(200, "b")
		})
	})
	a := dial(t, addr)
	a.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(20 * time.Millisecond)
	b := dial(t, addr)
	b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := b.read("GET")
	if resp.StatusCode != 200 || body != "b" {
		t.Fatalf("b: %d %q", resp.StatusCode, body)
	}
	if _, body = a.read("GET"); body != "a" {
		t.Fatalf("a: %q", body)
	}
}
