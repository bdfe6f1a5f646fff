package loop

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/offload"
)

// TestOffloadFunctionSeesCancelCause: an offloaded function's context is cancelled when
// its handler is, with the handler's cause (context.Cause): DeadlineExceeded when the
// handler's deadline passes, Canceled when the client goes away; in both modes, whether
// or not the handler made its own context before the call (on the loop the task's context
// is otherwise not made for the call: offload.Hook.Base).
func TestOffloadFunctionSeesCancelCause(t *testing.T) {
	type seen struct{ err, cause error }
	for _, m := range modes {
		for _, madeCtx := range []bool{false, true} {
			for _, tc := range []struct {
				name  string
				cfg   Config
				cause error
			}{
				{"deadline", Config{HandlerTimeout: 50 * time.Millisecond}, context.DeadlineExceeded},
				{"disconnect", Config{}, context.Canceled},
			} {
				name := m.name + "/" + tc.name
				if madeCtx {
					name += "/ctx-made"
				}
				t.Run(name, func(t *testing.T) {
					saw := make(chan seen, 1)
					running := make(chan struct{})
					_, addr := startServer(t, m.cfg(tc.cfg), func(s *Server) {
						s.Handle("GET /w", func(c *Ctx) {
							if madeCtx {
								_ = c.Context()
							}
							_, _ = offload.Do(c, func(ctx context.Context) (int, error) {
								close(running)
								select {
								case <-ctx.Done():
									saw <- seen{ctx.Err(), context.Cause(ctx)}
								case <-time.After(20 * time.Second):
									saw <- seen{}
								}
								return 0, nil
							})
							c.String(200, "late")
						})
					})
					cl := dial(t, addr)
					cl.send("GET /w HTTP/1.1\r\nHost: x\r\n\r\n")
					<-running
					if tc.cause == context.Canceled {
						require.NoError(t, cl.c.Close())
					}
					s := <-saw
					assert.ErrorIs(t, s.err, context.Canceled)
					assert.ErrorIs(t, s.cause, tc.cause)
				})
			}
		}
	}
}
