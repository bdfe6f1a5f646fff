package loop

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/internal/scheduler"
	"github.com/batonrt/baton/offload"
)

// testPair returns a connected nonblocking socket pair: peer is the door's end, loop
// stands for the control connection's end. Both are closed at the end of the test unless
// the test closed them (set to -1).
func testPair(t *testing.T) (peer, loopEnd *int) {
	t.Helper()
	fds, err := socketpair(true)
	require.NoError(t, err)
	peer, loopEnd = &fds[0], &fds[1]
	t.Cleanup(func() {
		for _, fd := range []*int{peer, loopEnd} {
			if *fd >= 0 {
				_ = unix.Close(*fd)
			}
		}
	})
	return peer, loopEnd
}

// pending reads what the door wrote to the control socket so far (nonblocking).
func pending(t *testing.T, fd int) int {
	t.Helper()
	var buf [256]byte
	n, err := unix.Read(fd, buf[:])
	if err == unix.EAGAIN {
		return 0
	}
	require.NoError(t, err)
	return n
}

// TestDoorWakesOncePerBatch: posts before open queue without a wake and open wakes once;
// after that the first post of a batch writes one byte and later ones ride along until
// the loop takes the batch, in posting order, functions and wakers apart.
func TestDoorWakesOncePerBatch(t *testing.T) {
	peer, loopEnd := testPair(t)
	var d door
	d.init()
	var got []int
	post := func(i int) { require.True(t, d.post(func() { got = append(got, i) })) }

	post(1)
	post(2)
	assert.Zero(t, pending(t, *loopEnd), "no wake before open")
	d.open(*peer)
	assert.Equal(t, 1, pending(t, *loopEnd), "open wakes the loop for what was queued")
	post(3) // rides along
	require.True(t, d.postWake(scheduler.Waker{}))
	assert.Zero(t, pending(t, *loopEnd), "later posts ride along")

	batch, wakes := d.take()
	for _, fn := range batch {
		fn()
	}
	assert.Equal(t, []int{1, 2, 3}, got)
	assert.Len(t, wakes, 1)
	d.recycle(batch, wakes)

	post(4)
	assert.Equal(t, 1, pending(t, *loopEnd), "the first post after take starts a new batch")
	post(5)
	assert.Zero(t, pending(t, *loopEnd))
	batch, _ = d.take()
	assert.Len(t, batch, 2)
}

// TestDoorEAGAINKeepsBatch: with the control socket's buffer full the post still
// succeeds: bytes are waiting, so the loop will run the batch.
func TestDoorEAGAINKeepsBatch(t *testing.T) {
	peer, loopEnd := testPair(t)
	fill := make([]byte, 4096)
	for {
		if _, err := unix.Write(*peer, fill); err == unix.EAGAIN {
			break
		} else {
			require.NoError(t, err)
		}
	}
	var d door
	d.init()
	d.open(*peer)
	ran := false
	require.True(t, d.post(func() { ran = true }))
	require.True(t, d.post(func() {}))
	assert.Positive(t, pending(t, *loopEnd))
	batch, _ := d.take()
	require.Len(t, batch, 2)
	batch[0]()
	assert.True(t, ran)
}

// TestDoorEPIPE: once the loop's end is closed (the loop stopped) a post that has to wake
// the loop reports false, and so does every later one; close then drops what is queued,
// refuses later posts and closes gone.
func TestDoorEPIPE(t *testing.T) {
	peer, loopEnd := testPair(t)
	var d door
	d.init()
	d.open(*peer)
	require.NoError(t, unix.Close(*loopEnd))
	*loopEnd = -1
	assert.False(t, d.post(func() {}))
	assert.False(t, d.postWake(scheduler.Waker{}))
	assert.False(t, d.kick())

	d.close()
	d.close() // idempotent
	assert.False(t, d.post(func() {}))
	batch, wakes := d.take()
	assert.Empty(t, batch)
	assert.Empty(t, wakes)
	select {
	case <-d.gone:
	default:
		t.Fatal("gone not closed")
	}
}

// TestDoorKickSharesTheByte: a pump request (kick) and a batch share one byte, whichever
// comes first; a kick before open reports false (the caller posts instead).
func TestDoorKickSharesTheByte(t *testing.T) {
	peer, loopEnd := testPair(t)
	var d door
	d.init()
	assert.False(t, d.kick(), "not open yet")
	d.open(*peer)
	assert.Zero(t, pending(t, *loopEnd), "nothing queued: open does not wake")
	require.True(t, d.kick())
	require.True(t, d.post(func() {}))
	require.True(t, d.kick())
	assert.Equal(t, 1, pending(t, *loopEnd))
	batch, _ := d.take()
	assert.Len(t, batch, 1)
	require.True(t, d.post(func() {}))
	require.True(t, d.kick())
	assert.Equal(t, 1, pending(t, *loopEnd))
}

// TestDoorCloseDropsQueued: close drops what is queued (reported through gone) and
// refuses later posts without writing to the control socket.
func TestDoorCloseDropsQueued(t *testing.T) {
	peer, loopEnd := testPair(t)
	var d door
	d.init()
	d.open(*peer)
	require.True(t, d.post(func() {}))
	assert.Equal(t, 1, pending(t, *loopEnd))
	d.close()
	assert.False(t, d.post(func() {}))
	assert.Zero(t, pending(t, *loopEnd), "no write after close")
	batch, _ := d.take()
	assert.Empty(t, batch)
}

// TestPostFIFOPerGoroutine: functions posted from several goroutines at once all run,
// each goroutine's in the order it posted them, in both modes.
func TestPostFIFOPerGoroutine(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(map[bool]string{false: "loop", true: "multithread"}[mt], func(t *testing.T) {
			s, _ := startServer(t, Config{MultiThread: mt}, nil)
			const goroutines, each = 8, 500
			next := make([]int, goroutines) // loop-owned
			var bad atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						assert.NoError(t, s.Loop(0).Post(func() {
							if next[g] != i {
								bad.Add(1)
							}
							next[g] = i + 1
						}))
					}
				}()
			}
			wg.Wait()
			done := make(chan []int, 1)
			require.NoError(t, s.Loop(0).Post(func() { done <- append([]int(nil), next...) }))
			got := <-done
			for g := range goroutines {
				assert.Equal(t, each, got[g], "goroutine %d", g)
			}
			assert.Zero(t, bad.Load(), "functions ran out of their goroutine's order")
		})
	}
}

// TestPostDuringShutdown: goroutines keep posting while the server shuts down. Every
// function whose Post returned before Shutdown was called runs; no function runs after
// ListenAndServe returned; every Post after that reports ErrServerClosed.
func TestPostDuringShutdown(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	<-s.Ready()

	const goroutines = 4
	var (
		stopping atomic.Bool              // set just before Shutdown is called
		stopped  atomic.Bool              // set once ListenAndServe returned
		late     atomic.Int64             // functions that ran after ListenAndServe returned
		owed     [goroutines]atomic.Int64 // per goroutine: 1 + the last sequence number posted before Shutdown
		ran      [goroutines]atomic.Int64 // per goroutine: 1 + the last sequence number that ran
		wg       sync.WaitGroup
		quit     = make(chan struct{})
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(1); ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				err := s.Loop(0).Post(func() {
					if stopped.Load() {
						late.Add(1)
					}
					ran[g].Store(i) // posts of one goroutine run in order (TestPostFIFOPerGoroutine)
				})
				if err != nil {
					assert.ErrorIs(t, err, ErrServerClosed)
					continue
				}
				if !stopping.Load() {
					owed[g].Store(i)
				}
			}
		}()
	}
	require.Eventually(t, func() bool { return ran[0].Load() > 100 }, 10*time.Second, time.Millisecond)
	stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	require.ErrorIs(t, <-errc, ErrServerClosed)
	stopped.Store(true)
	require.ErrorIs(t, s.Loop(0).Post(func() { late.Add(1) }), ErrServerClosed)
	close(quit)
	wg.Wait()
	assert.Zero(t, late.Load(), "functions ran after the loop stopped")
	for g := range goroutines {
		assert.GreaterOrEqual(t, ran[g].Load(), owed[g].Load(), "goroutine %d: a function posted before Shutdown did not run", g)
	}
}

// TestPostAllocs: a Post from another goroutine that wakes an idle loop allocates nothing
// (gnet's EventLoop.Execute allocated twice per wake).
func TestPostAllocs(t *testing.T) {
	s, _ := startServer(t, Config{}, nil)
	back := make(chan struct{})
	fn := func() { back <- struct{}{} }
	for range 100 {
		require.NoError(t, s.Loop(0).Post(fn))
		<-back
	}
	allocs := testing.AllocsPerRun(500, func() {
		if err := s.Loop(0).Post(fn); err != nil {
			t.Error(err)
		}
		<-back
	})
	assert.Zero(t, allocs)
}

// TestOffloadDoFromHandlerAllocs: a request whose handler offloads a function that does
// nothing allocates at most once (Do's typed result), client included.
func TestOffloadDoFromHandlerAllocs(t *testing.T) {
	nop := func(context.Context) (int, error) { return 0, nil }
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /", func(c *Ctx) {
			if _, err := offload.Do(c, nop); err != nil {
				c.String(500, err.Error())
				return
			}
			c.String(200, "Hello, World!")
		})
	})
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	req := []byte("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
	// Learn the response's length from the first one.
	_, err = nc.Write(req)
	require.NoError(t, err)
	buf := make([]byte, 4096)
	n := 0
	for !bytes.HasSuffix(buf[:n], []byte("Hello, World!")) {
		m, err := nc.Read(buf[n:])
		require.NoError(t, err)
		n += m
	}
	resp := buf[:n]
	roundTrip := func() {
		if _, err := nc.Write(req); err != nil {
			t.Error(err)
			return
		}
		if _, err := io.ReadFull(nc, resp); err != nil {
			t.Error(err)
		}
	}
	for range 200 { // warm up: pooled contexts, coroutines, a worker
		roundTrip()
	}
	allocs := testing.AllocsPerRun(500, roundTrip)
	assert.LessOrEqual(t, allocs, 1.0)
}

// TestPostBeforeStartRunsOnceReady: functions posted before ListenAndServe wait in the
// door (there is no control socket yet) and run in order once the loop is reachable.
func TestPostBeforeStartRunsOnceReady(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	ran := make(chan int, 3)
	for i := range 3 {
		require.NoError(t, s.Loop(0).Post(func() {
			select {
			case <-s.Ready():
			default:
				t.Error("a posted function ran before the server was ready")
			}
			ran <- i
		}))
	}
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	for i := range 3 {
		select {
		case got := <-ran:
			assert.Equal(t, i, got)
		case err := <-errc:
			t.Fatalf("ListenAndServe: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("function %d posted before start never ran", i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	require.ErrorIs(t, <-errc, ErrServerClosed)
}
