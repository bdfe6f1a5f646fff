package loop

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// OnStart's functions run on the loop, in order, before Ready is closed: what they make
// (state, a background task) is there for the first request. With shards each loop runs
// them once, on itself, given itself.
func TestOnStartRunsOnEveryLoopBeforeReady(t *testing.T) {
	for _, shards := range []int{1, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			var mu sync.Mutex
			var ran []string
			made := make([]string, shards) // per loop: written by that loop's OnStart only
			var ready []<-chan struct{}
			s, addr := startServer(t, Config{Shards: shards}, func(s *Server) {
				ready = append(ready, s.Ready())
				s.OnStart(func(l *Loop) error {
					select {
					case <-ready[0]:
						return errors.New("Ready was closed before OnStart ran")
					default:
					}
					if !l.OnLoop() {
						return errors.New("not on the loop")
					}
					made[l.Index()] = fmt.Sprintf("room-%d", l.Index())
					l.Go("boot-task", func(*Task) {}) // a task on this loop, no Post needed
					mu.Lock()
					ran = append(ran, fmt.Sprintf("first@%d", l.Index()))
					mu.Unlock()
					return nil
				})
				s.OnStart(func(l *Loop) error {
					mu.Lock()
					ran = append(ran, fmt.Sprintf("second@%d", l.Index()))
					mu.Unlock()
					return nil
				})
				s.Handle("GET /room", func(c *Ctx) { c.String(200, made[c.Loop().Index()]) })
			})
			mu.Lock()
			got := append([]string(nil), ran...)
			mu.Unlock()
			require.Len(t, got, 2*shards, "every function ran on every loop before Ready: %v", got)
			for i := range shards {
				first := indexOf(got, fmt.Sprintf("first@%d", i))
				second := indexOf(got, fmt.Sprintf("second@%d", i))
				require.True(t, first >= 0 && first < second, "loop %d ran them in order: %v", i, got)
			}
			c := dial(t, addr)
			resp, body := c.get("/room")
			mustStatus(t, resp, 200)
			require.True(t, strings.HasPrefix(body, "room-"), "the first request found what OnStart made: %q", body)
			require.Panics(t, func() { s.OnStart(func(*Loop) error { return nil }) }, "OnStart after ListenAndServe")
		})
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// An OnStart function that fails (error or panic) stops the server without serving:
// ListenAndServe returns an error wrapping it that names the loop, the later functions do
// not run, Ready and Done are closed, and no connection is served.
func TestOnStartFailureStopsTheServer(t *testing.T) {
	errBoot := errors.New("database writer: cannot open")
	for _, tc := range []struct {
		name string
		fn   func(*Loop) error
		want string
	}{
		{"error", func(*Loop) error { return errBoot }, "OnStart function 1 of 2 on loop 0: database writer: cannot open"},
		{"panic", func(*Loop) error { panic("boom") }, "OnStart function 1 of 2 on loop 0: panic: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
			served := false
			s.Handle("GET /", func(c *Ctx) { served = true; c.String(200, "served") })
			later := false
			s.OnStart(tc.fn)
			s.OnStart(func(*Loop) error { later = true; return nil })
			errc := make(chan error, 1)
			go func() { errc <- s.ListenAndServe() }()
			var err error
			select {
			case err = <-errc:
			case <-time.After(20 * time.Second):
				t.Fatal("ListenAndServe did not return")
			}
			require.ErrorContains(t, err, tc.want)
			if tc.name == "error" {
				require.ErrorIs(t, err, errBoot)
			}
			require.False(t, later, "the functions after the failed one did not run")
			require.False(t, served)
			<-s.Ready()
			<-s.Done()
			if a := s.Addr(); a != nil { // the socket is closed: nothing answers there
				if c, derr := net.DialTimeout("tcp", a.String(), time.Second); derr == nil {
					_ = c.SetDeadline(time.Now().Add(2 * time.Second))
					_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
					n, _ := c.Read(make([]byte, 64))
					_ = c.Close()
					require.Zero(t, n, "a connection was served after a failed start")
				}
			}
			require.NoError(t, s.Shutdown(t.Context()))
		})
	}
}

// With shards, a loop whose OnStart fails stops the whole server, and the error names it.
func TestOnStartFailureOnOneShard(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Shards: 2, Logger: quietLogger(t)})
	s.OnStart(func(l *Loop) error {
		if l.Index() == 1 {
			return errors.New("shard one cannot start")
		}
		return nil
	})
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	select {
	case err := <-errc:
		require.ErrorContains(t, err, "on loop 1: shard one cannot start")
	case <-time.After(30 * time.Second):
		t.Fatal("ListenAndServe did not return")
	}
}
