package loop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type playerKey struct{}

// Middleware wraps routes added after it, outermost first; groups add their prefix and
// their own middleware inside the server's; middleware hands values to the handler.
func TestMiddlewareGroupsAndValues(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			trace := func(tag string) Middleware {
				return func(next HandlerFunc) HandlerFunc {
					return func(c *Ctx) {
						c.SetHeader("X-"+tag, "1")
						next(c)
					}
				}
			}
			auth := func(next HandlerFunc) HandlerFunc {
				return func(c *Ctx) {
					if c.Header("Authorization") != "Bearer ana" {
						c.String(401, "who are you")
						return
					}
					c.SetValue(playerKey{}, "ana")
					next(c)
				}
			}
			_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				s.Handle("GET /before", func(c *Ctx) { c.String(200, "plain") }) // added before Use: unwrapped
				s.Use(trace("Outer"))
				api := s.Group("/api/", auth)
				api.Handle("GET /me", func(c *Ctx) { c.String(200, fmt.Sprint(c.Value(playerKey{}))) })
				v2 := api.Group("/v2", trace("V2"))
				v2.Handle("GET /me", func(c *Ctx) {
					c.SetValue(playerKey{}, "replaced")
					c.String(200, fmt.Sprint(c.Value(playerKey{}), c.Value("missing")))
				})
			})
			c := dial(t, addr)
			resp, body := c.get("/before")
			require.Equal(t, "plain", body)
			require.Empty(t, resp.Header.Get("X-Outer"))

			resp, body = c.get("/api/me")
			require.Equal(t, "who are you", body)
			require.Equal(t, 401, resp.StatusCode, "the group's middleware ran")
			require.Equal(t, "1", resp.Header.Get("X-Outer"), "the server's middleware ran first")

			c.send("GET /api/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ana\r\n\r\n")
			resp, body = c.read("GET")
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "ana", body)

			c.send("GET /api/v2/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ana\r\n\r\n")
			resp, body = c.read("GET")
			require.Equal(t, "replaced<nil>", body)
			require.Equal(t, "1", resp.Header.Get("X-V2"))
			require.Equal(t, "1", resp.Header.Get("X-Outer"))

			// A pooled Ctx forgets the last request's values.
			c.send("GET /api/me HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, _ = c.read("GET")
			require.Equal(t, 401, resp.StatusCode)
		})
	}
}

func TestUseAfterStartPanics(t *testing.T) {
	s, _ := startServer(t, Config{}, nil)
	require.Panics(t, func() { s.Use(func(h HandlerFunc) HandlerFunc { return h }) })
	require.Panics(t, func() { s.Group("/g").Handle("GET /x", func(*Ctx) {}) })
}

// Ctx.Headers yields every request header in order, names as sent.
func TestCtxHeaders(t *testing.T) {
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /h", func(c *Ctx) {
			var lines []string
			for name, value := range c.Headers() {
				lines = append(lines, name+"="+value)
				if name == "Stop" {
					break
				}
			}
			c.String(200, strings.Join(lines, ","))
		})
	})
	c := dial(t, addr)
	c.send("GET /h HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nx-a: 2\r\nStop: here\r\nAfter: no\r\n\r\n")
	_, body := c.read("GET")
	require.Equal(t, "Host=x,X-A=1,x-a=2,Stop=here", body)
}

// AwaitTimeout and WaitTimeout: the deadline passes (ErrTimeout), or a Resolve from another
// goroutine wakes the waiter first, in both modes.
func TestTimedWaits(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var f atomic.Pointer[Future[string]]
			waiting := make(chan struct{}, 1)
			_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				s.Handle("GET /poll", func(c *Ctx) {
					fut := NewFuture[string](s.loopRef)
					f.Store(fut)
					waiting <- struct{}{}
					d, _ := time.ParseDuration(c.Query("wait"))
					v, err := fut.AwaitTimeout(c, d)
					switch {
					case errors.Is(err, ErrTimeout):
						c.String(204, "")
					case err != nil:
						c.String(500, err.Error())
					default:
						c.String(200, v)
					}
				})
				s.Handle("GET /event", func(c *Ctx) {
					err := NewEvent(s.loopRef).WaitTimeout(c, 20*time.Millisecond)
					c.String(200, fmt.Sprint(errors.Is(err, ErrTimeout)))
				})
			})
			c := dial(t, addr)
			start := time.Now()
			resp, _ := c.get("/poll?wait=30ms")
			require.Equal(t, 204, resp.StatusCode)
			require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
			<-waiting

			c.send("GET /poll?wait=1m HTTP/1.1\r\nHost: x\r\n\r\n")
			<-waiting
			go func() { f.Load().Resolve("matched", nil) }() // from another goroutine
			resp, body := c.read("GET")
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "matched", body)

			_, body = c.get("/event")
			require.Equal(t, "true", body)
		})
	}
}

// Shutdown sets the drain signal and runs the OnDrain hooks on the loop: a long poll
// waiting on the signal answers at once instead of holding the drain.
func TestDrainSignalEndsLongPolls(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	hooks := make(chan struct{}, 1)
	s.Loop(0).OnDrain(func() { hooks <- struct{}{} })
	parked := make(chan struct{})
	s.Handle("GET /poll", func(c *Ctx) {
		close(parked)
		if err := s.Draining().WaitTimeout(c, time.Minute); err != nil {
			c.String(500, err.Error())
			return
		}
		c.String(200, "server going away")
	})
	errc := serveInBackground(t, s)
	c := dial(t, s.Addr().String())
	c.send("GET /poll HTTP/1.1\r\nHost: x\r\n\r\n")
	<-parked
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, s.Shutdown(ctx))
	require.Less(t, time.Since(start), 5*time.Second)
	resp, body := c.read("GET")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "server going away", body)
	require.True(t, resp.Close, "a response during the drain closes its connection")
	<-hooks
	require.ErrorIs(t, <-errc, ErrServerClosed)
}

// A background task's name reaches the tasks page, and a Go task stopped with its handle
// sees ErrTaskStopped (its deferred functions run).
func TestBackgroundNamesAndStop(t *testing.T) {
	stopped := make(chan error, 1)
	var h *TaskHandle
	_, addr := startServer(t, Config{}, func(s *Server) {
		h = s.Loop(0).Go("matchmaker", func(t *Task) {
			defer func() { stopped <- t.Err() }()
			_ = t.Sleep(time.Hour)
		})
		s.HandleStats("/debug/baton")
	})
	require.Equal(t, "matchmaker", h.Name())
	c := dial(t, addr)
	require.Eventually(t, func() bool {
		_, body := c.get("/debug/baton/tasks")
		return strings.Contains(body, `"matchmaker"`)
	}, 10*time.Second, 5*time.Millisecond)
	h.Stop()
	h.Stop() // idempotent
	waitDone(t, "Done", h.Done())
	require.ErrorIs(t, <-stopped, ErrTaskStopped)
}
