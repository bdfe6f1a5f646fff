package loop

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/offload"
)

// A handler offloads blocking work: it parks (reason offload) while the pool runs it,
// other requests are served meanwhile, and the result comes back to the handler.
func testOffloadFromHandler(t *testing.T, m mode) {
	release := make(chan struct{})
	var parkedOffload atomic.Int64
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		s.Handle("GET /db", func(c *Ctx) {
			v, err := offload.Do(c, func(ctx context.Context) (int, error) {
				<-release // blocking: fine off the loop
				return 42, nil
			})
			if err != nil {
				c.String(500, err.Error())
				return
			}
			parkedOffload.Store(int64(c.Stats().Parked[accounting.ParkOffload]))
			c.String(200, strconv.Itoa(v))
		})
		s.Handle("GET /ok", func(c *Ctx) { c.String(200, "ok") })
	})
	slow := dial(t, addr)
	slow.send("GET /db HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, _ := dial(t, addr).get("/ok") // served while /db waits for the pool
	mustStatus(t, resp, 200)
	time.Sleep(20 * time.Millisecond)
	close(release)
	resp, body := slow.read("GET")
	if resp.StatusCode != 200 || body != "42" {
		t.Fatalf("offloaded: %d %q", resp.StatusCode, body)
	}
	if parkedOffload.Load() <= 0 {
		t.Fatal("the handler's parked-offload time is zero")
	}
}

// A gate full of holders answers the next caller busy at once, without a pool token.
func testGateAnswersBusy(t *testing.T, m mode) {
	release := make(chan struct{})
	var gate *offload.Gate
	var inside atomic.Int32
	_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
		gate = s.NewGate("request_task", 2, 0)
		s.Handle("GET /task", func(c *Ctx) {
			if !gate.TryEnter() {
				c.SetHeader("Retry-After", "1")
				c.String(429, "busy")
				return
			}
			defer gate.Leave()
			inside.Add(1)
			_, err := offload.Do(c, func(ctx context.Context) (struct{}, error) {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return struct{}{}, nil
			})
			if err != nil && !errors.Is(err, context.Canceled) {
				c.String(500, err.Error())
				return
			}
			c.String(200, "done")
		})
	})
	holders := []*client{dial(t, addr), dial(t, addr)}
	for _, h := range holders {
		h.send("GET /task HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	waitFor(t, func() bool { return inside.Load() == 2 })
	resp, body := dial(t, addr).get("/task")
	if resp.StatusCode != 429 || body != "busy" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third caller: %d %q", resp.StatusCode, body)
	}
	if st := gate.Stats(); st.Rejected != 1 {
		t.Fatalf("gate stats %+v", st)
	}
	close(release)
	for _, h := range holders {
		resp, _ := h.read("GET")
		mustStatus(t, resp, 200)
	}
}
