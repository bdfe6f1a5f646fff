package loop

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
			parkedOffload.Store(int64(c.Stats().Parked.Offload))
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

// Close of a server that never offloaded logs no "offloaded functions still running": it
// did in about 8 runs of 20 (the pool's Close picked its already-cancelled context at
// random beside its own closed done). Every round also has had a request served.
func TestCloseWithoutOffloadLogsNothing(t *testing.T) {
	for i := range 20 {
		var logged bytes.Buffer
		s := New(Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		s.Handle("GET /", func(c *Ctx) { c.String(200, "ok") })
		served := serveInBackground(t, s)
		c := dial(t, s.Addr().String())
		_, body := c.get("/")
		require.Equal(t, "ok", body)
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-served, ErrServerClosed)
		require.NotContains(t, logged.String(), "offloaded functions still running", "round %d", i)
	}
}
