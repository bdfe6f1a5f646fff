package loop

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/offload"
)

type (
	reqPlayerKey struct{}
	reqSpanKey   struct{}
)

// TestRequestValuesReachContext: what a middleware stores with SetValue (before or after
// the context was made) and the context it sets with SetContext reach c.Context() and the
// context an offloaded function gets, and that context is still cancelled when the
// handler returns. Over real sockets, in both modes.
func TestRequestValuesReachContext(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			type seen struct{ player, span, late, offPlayer, offSpan any }
			got := make(chan seen, 1)
			var after context.Context
			_, addr := startServer(t, Config{MultiThread: mt}, func(s *Server) {
				s.Use(func(next HandlerFunc) HandlerFunc {
					return func(c *Ctx) {
						c.SetValue(reqPlayerKey{}, "alice") // before the context exists
						c.SetContext(context.WithValue(c.Context(), reqSpanKey{}, "span-1"))
						next(c)
					}
				})
				s.Handle("GET /x", func(c *Ctx) {
					c.SetValue("late", 7) // after the context exists
					var v seen
					v.player, v.span, v.late = c.Context().Value(reqPlayerKey{}), c.Context().Value(reqSpanKey{}), c.Context().Value("late")
					_, err := offload.Do(c, func(ctx context.Context) (int, error) {
						v.offPlayer, v.offSpan = ctx.Value(reqPlayerKey{}), ctx.Value(reqSpanKey{})
						return 0, nil
					})
					require.NoError(t, err)
					after = c.Context()
					got <- v
					c.String(200, "ok")
				})
			})
			resp, err := http.Get("http://" + addr + "/x")
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, seen{"alice", "span-1", 7, "alice", "span-1"}, <-got)
			<-after.Done() // the context set with SetContext ends with the handler
		})
	}
}
