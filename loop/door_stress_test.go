package loop

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/offload"
)

// TestPostNoLostWakes: goroutines post while the loop is busy (serving requests that
// offload or yield, running posted functions that spin) and while it is idle (each poster waits
// for its function now and then); every posted function runs, in each goroutine's order.
// A lost wake leaves a poster or a client waiting: both give up after 20 s.
func TestPostNoLostWakes(t *testing.T) {
	nop := func(context.Context) (int, error) { return 0, nil }
	s, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /", func(c *Ctx) {
			if _, err := offload.Do(c, nop); err != nil {
				c.String(500, err.Error())
				return
			}
			c.String(200, "ok")
		})
		s.Handle("GET /y", func(c *Ctx) { // keeps a turn on its way (pumpPosted) while posts come in
			for range 3 {
				_ = c.Sleep(0)
			}
			c.String(200, "ok")
		})
	})
	const posters, each, clients = 8, 300, 4
	stop := make(chan struct{})
	var served atomic.Int64
	var cwg sync.WaitGroup
	for c := range clients {
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = nc.Close() })
		br := bufio.NewReader(nc)
		path := []string{"/", "/y"}[c%2]
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
				if _, err := fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path); !assert.NoError(t, err) {
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if !assert.NoError(t, err, "a response never came: lost wake?") {
					return
				}
				_ = resp.Body.Close()
				served.Add(1)
			}
		}()
	}

	next := make([]int, posters) // loop-owned
	var bad atomic.Int64
	var pwg sync.WaitGroup
	for g := range posters {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := range each {
				done := make(chan struct{})
				err := s.Loop(0).Post(func() {
					if next[g] != i {
						bad.Add(1)
					}
					next[g] = i + 1
					if i%7 == 0 { // keep the loop awake a little while others post
						for end := time.Now().Add(20 * time.Microsecond); time.Now().Before(end); {
						}
					}
					close(done)
				})
				if !assert.NoError(t, err) {
					return
				}
				if i%5 == 0 { // wait now and then, so the loop also goes idle
					select {
					case <-done:
					case <-time.After(20 * time.Second):
						assert.Fail(t, "posted function never ran: lost wake", "goroutine %d post %d", g, i)
						return
					}
				}
			}
		}()
	}
	pwg.Wait()
	close(stop)
	cwg.Wait()

	got := make(chan []int, 1)
	require.NoError(t, s.Loop(0).Post(func() { got <- append([]int(nil), next...) }))
	var r []int
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		require.Fail(t, "final post never ran: lost wake")
	}
	for g := range posters {
		assert.Equal(t, each, r[g], "goroutine %d", g)
	}
	assert.Zero(t, bad.Load(), "functions ran out of their goroutine's order")
	assert.Positive(t, served.Load())
}
