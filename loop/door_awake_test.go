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
	"github.com/batonrt/baton/scheduler"
)

// TestDoorAwakeSkipsTheByte: while the loop is awake a post writes no byte but marks the
// door waiting, and so does a waker; a kick (the loop's own pump request) still writes.
// Once the loop is not awake a post writes the byte again.
func TestDoorAwakeSkipsTheByte(t *testing.T) {
	peer, loopEnd := testPair(t)
	var d door
	d.init()
	d.open(*peer)

	d.awake.Store(true)
	require.True(t, d.post(func() {}))
	require.True(t, d.postWake(scheduler.Waker{}))
	assert.Zero(t, pending(t, *loopEnd), "no byte while the loop is awake")
	assert.True(t, d.waiting.Load(), "the loop finds the batch at the end of its callback")
	require.True(t, d.kick())
	assert.Equal(t, 1, pending(t, *loopEnd), "a pump request goes through epoll even while awake")

	batch, wakes := d.take()
	assert.Len(t, batch, 1)
	assert.Len(t, wakes, 1)
	assert.False(t, d.waiting.Load(), "take clears waiting")
	d.recycle(batch, wakes)

	d.awake.Store(false)
	require.True(t, d.post(func() {}))
	assert.Equal(t, 1, pending(t, *loopEnd), "an idle loop is woken by the byte")
	d.close()
	assert.False(t, d.waiting.Load(), "close clears waiting")
}

// TestPostWhileAwakeRunsAtCallbackEnd: a function posted by another goroutine while the
// loop runs a batch (so is awake) runs at the end of that callback, without a byte, and so
// does one the loop posts itself.
func TestPostWhileAwakeRunsAtCallbackEnd(t *testing.T) {
	s, _ := startServer(t, Config{}, nil)
	ran := make(chan uint64, 2)
	var before uint64
	require.NoError(t, s.Post(func() {
		before = s.door.inline
		posted := make(chan error)
		go func() {
			posted <- s.Post(func() { ran <- s.door.inline })
		}()
		assert.NoError(t, <-posted) // the loop is awake: the post returned without a byte
		assert.NoError(t, s.Post(func() { ran <- s.door.inline }))
	}))
	first, second := <-ran, <-ran
	assert.Equal(t, before+1, first, "both ran from one batch at the callback's end")
	assert.Equal(t, first, second)
}

// TestPostNoLostWakes: goroutines post while the loop is busy (serving requests that
// offload or yield, running posted functions that spin) and while it is idle (each poster waits
// for its function now and then); every posted function runs, in each goroutine's order,
// and some ran at the end of a callback rather than from a byte. A lost wake leaves a
// poster or a client waiting: both give up after 20 s.
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
				c.Yield()
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
				err := s.Post(func() {
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

	type result struct {
		next   []int
		inline uint64
	}
	got := make(chan result, 1)
	require.NoError(t, s.Post(func() { got <- result{append([]int(nil), next...), s.door.inline} }))
	var r result
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		require.Fail(t, "final post never ran: lost wake")
	}
	for g := range posters {
		assert.Equal(t, each, r.next[g], "goroutine %d", g)
	}
	assert.Zero(t, bad.Load(), "functions ran out of their goroutine's order")
	assert.Positive(t, served.Load())
	assert.Positive(t, r.inline, "no batch ran at a callback's end: the test did not exercise the path")
}
