package loop

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/offload"
)

// A graceful shutdown finishes while clients keep reconnecting after their 503s:
// connections opened during the drain do not hold it open.
func TestDrainFinishesWhileClientsReconnect(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := New(m.cfg(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)}))
			s.Handle("GET /work", func(c *Ctx) {
				_ = c.Sleep(2 * time.Millisecond)
				c.String(200, "ok")
			})
			errc := serveInBackground(t, s)
			addr := s.Addr().String()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var answered atomic.Int64
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						nc, err := net.DialTimeout("tcp", addr, time.Second)
						if err != nil {
							continue // refused once the port is closed: keep trying, like a client would
						}
						cl := &client{c: nc, br: newReader(nc)}
						for {
							if _, err := io.WriteString(nc, "GET /work HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
								break
							}
							resp, _, err := cl.tryRead("GET")
							if err != nil {
								break
							}
							answered.Add(1)
							if resp.StatusCode != 200 || resp.Close {
								break // 503 or Connection: close: reconnect at once
							}
						}
						_ = nc.Close()
					}
				}()
			}
			require.Eventually(t, func() bool { return answered.Load() > 200 }, 10*time.Second, time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			err := s.Shutdown(ctx)
			took := time.Since(start)
			close(stop)
			wg.Wait()
			require.NoError(t, err, "the drain ran to its deadline (%v)", took)
			require.False(t, s.DrainReport().DeadlineReached)
			require.ErrorIs(t, <-errc, ErrServerClosed)
		})
	}
}

// Shutdown honours its context while offloaded functions that ignore their
// context still run, instead of waiting a fixed 10 s for them.
func TestShutdownHonoursDeadlineForHungOffload(t *testing.T) {
	release := make(chan struct{})
	defer close(release) // let the hung function go at the end (goleak)
	started := make(chan struct{})
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	s.Handle("GET /hang", func(c *Ctx) {
		_, _ = offload.Do(c, func(context.Context) (int, error) {
			close(started)
			<-release // ignores its context
			return 0, nil
		})
		c.String(200, "late")
	})
	errc := serveInBackground(t, s)
	cl := dial(t, s.Addr().String())
	cl.send("GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Shutdown(ctx)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, <-errc, ErrServerClosed)
	require.Less(t, took, 5*time.Second, "Shutdown waited past its context for a hung offloaded function")
}
