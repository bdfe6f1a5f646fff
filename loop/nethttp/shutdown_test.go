package nethttp

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/stretchr/testify/require"
)

// TestShutdownDeadlineAbandonsStuckHandlers: Shutdown(ctx) returns ctx.Err() once ctx
// ends although handlers running on goroutines of their own have not returned and ignore
// their context: five net/http-adapter handlers, and a long handler in multi-thread mode.
// The handlers are released only after Shutdown returned, so a Shutdown that waits for
// them never returns (before the fix it did not, within 20 s).
func TestShutdownDeadlineAbandonsStuckHandlers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		multi   bool
		clients int
	}{{"nethttp", false, 5}, {"multithread", true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var running atomic.Int32
			s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quietLogger(t), MultiThread: tc.multi})
			if tc.multi {
				s.Handle("GET /stuck", func(c *loop.Ctx) {
					running.Add(1)
					<-release // ignores c.Context()
					c.String(200, "late\n")
				})
			} else {
				handle(t, s, "GET /stuck", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					running.Add(1)
					<-release // ignores r.Context()
					_, _ = w.Write([]byte("late\n"))
				}))
			}
			errc := serveInBackground(t, s)
			addr := s.Addr().String()
			released := false
			defer func() {
				if !released {
					close(release)
				}
			}()
			for range tc.clients {
				go func() {
					resp, err := http.Get("http://" + addr + "/stuck")
					if err == nil {
						_ = resp.Body.Close()
					}
				}()
			}
			require.Eventually(t, func() bool { return int(running.Load()) == tc.clients }, 10*time.Second, time.Millisecond)

			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- s.Shutdown(ctx) }()
			select {
			case err := <-done:
				t.Logf("Shutdown(300ms) returned after %v with %d handlers still running", time.Since(start).Round(time.Millisecond), running.Load())
				require.ErrorIs(t, err, context.DeadlineExceeded)
			case <-time.After(20 * time.Second):
				t.Fatalf("Shutdown(300ms) had not returned after 20 s: it waits for handlers that ignore their context")
			}
			select {
			case err := <-errc:
				require.ErrorIs(t, err, loop.ErrServerClosed)
			case <-time.After(20 * time.Second):
				t.Fatal("ListenAndServe had not returned 20 s after Shutdown")
			}
			require.True(t, s.DrainReport().DeadlineReached)
			close(release) // the abandoned goroutines end now (goleak checks at the end)
			released = true
		})
	}
}
