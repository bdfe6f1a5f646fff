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

// Middleware added before the routes wraps every one, outermost first; groups add their
// prefix and their own middleware inside the server's (a group's Use reaches the routes of
// sub-groups made before it); middleware hands values to the handler.
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
				s.Use(trace("Outer"))
				s.Handle("GET /plain", func(c *Ctx) { c.String(200, "plain") })
				api := s.Group("/api/")
				v2 := api.Group("/v2", trace("V2")) // made before api.Use: still gets auth
				api.Use(auth)
				api.Handle("GET /me", func(c *Ctx) { c.String(200, fmt.Sprint(c.Value(playerKey{}))) })
				v2.Handle("GET /me", func(c *Ctx) {
					c.SetValue(playerKey{}, "replaced")
					c.String(200, fmt.Sprint(c.Value(playerKey{}), c.Value("missing")))
				})
			})
			c := dial(t, addr)
			resp, body := c.get("/plain")
			require.Equal(t, "plain", body)
			require.Equal(t, "1", resp.Header.Get("X-Outer"), "Use before a route wraps it")

			c.send("GET /api/v2/me HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, body = c.read("GET")
			require.Equal(t, 401, resp.StatusCode, "the parent group's Use covers a sub-group made before it: %s", body)

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

// Use after a route panics, naming the routes it would have left unwrapped: on the server
// (also for routes added through a group, a feature's Mount, or with shards) and on a group (also
// for routes of its sub-groups); a group's Use does not mind the server's other routes.
func TestUseAfterRoutesPanics(t *testing.T) {
	nop := func(h HandlerFunc) HandlerFunc { return h }
	h := func(*Ctx) {}
	for _, shards := range []int{1, 2} {
		s := New(Config{Addr: "127.0.0.1:0", Shards: shards})
		s.Use(nop) // before any route: fine
		s.Handle("GET /open", h)
		s.Handle("POST /items/{id}", h)
		require.PanicsWithValue(t, `loop: Use called after 2 route(s) were added ("GET /open", "POST /items/{id}"): `+
			`middleware wraps routes as they are registered, so these would run without it; call Use before adding routes `+
			`(put routes that must not run it outside a Group that uses it)`, func() { s.Use(nop) }, "shards=%d", shards)
		require.NoError(t, s.Close())
	}

	panicOf := func(fn func()) (msg string) {
		defer func() { msg = fmt.Sprint(recover()) }()
		fn()
		return ""
	}
	s := New(Config{Addr: "127.0.0.1:0"})
	t.Cleanup(func() { _ = s.Close() })
	s.Handle("GET /healthz", h) // outside the groups below: their Use is fine
	api := s.Group("/api")
	v1 := api.Group("/v1")
	v1.Use(nop)
	v1.Handle("GET /me", h)
	msg := panicOf(func() { api.Use(nop) })
	require.Contains(t, msg, `loop: Group.Use called after 1 route(s) were added ("GET /api/v1/me")`)
	msg = panicOf(func() { v1.Use(nop) })
	require.Contains(t, msg, `("GET /api/v1/me")`)
	admin := s.Group("/admin")
	admin.Use(nop) // a group with no routes yet, beside others that have some
	admin.Handle("GET /x", h)
	msg = panicOf(func() { s.Use(nop) })
	require.Contains(t, msg, `loop: Use called after 3 route(s) were added ("GET /healthz", "GET /api/v1/me", "GET /admin/x")`)

	s2 := New(Config{Addr: "127.0.0.1:0"})
	t.Cleanup(func() { _ = s2.Close() })
	for _, p := range []string{"tasks", "routes", "loop", "offload", "admission", "rooms", "events"} {
		s2.Handle("GET /debug/baton/"+p, h)
	}
	msg = panicOf(func() { s2.Use(nop) })
	require.Contains(t, msg, `("GET /debug/baton/tasks", `)
	require.Regexp(t, `and \d+ more\)`, msg, "a long list is cut after five")
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

// Await and Wait with a bound: the deadline passes (ErrTimeout), or a Resolve from another
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
					v, err := fut.Await(c, d)
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
					_, err := NewFuture[struct{}](s.loopRef).Await(c, 20*time.Millisecond)
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
	s.Loop(0).OnDrain(func(time.Time) { hooks <- struct{}{} })
	parked := make(chan struct{})
	s.Handle("GET /poll", func(c *Ctx) {
		close(parked)
		if _, err := s.Draining().Await(c, time.Minute); err != nil {
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
// sees context.Canceled (its deferred functions run).
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
	require.NotNil(t, h)
	c := dial(t, addr)
	require.Eventually(t, func() bool {
		_, body := c.get("/debug/baton/tasks")
		return strings.Contains(body, `"matchmaker"`)
	}, 10*time.Second, 5*time.Millisecond)
	h.Stop()
	h.Stop() // idempotent
	waitDone(t, "Done", h.Done())
	require.ErrorIs(t, <-stopped, context.Canceled)
}
