package loop_test

// The epoll half of gnet_writable_test.go: the mechanism of the drain watch
// (drainwatch_linux.go), checked against a bare gnet engine. Linux only, like the watch.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// writeWatch is a sketch of the mechanism proposed for item 9: an epoll instance of our own
// watching parked connections for EPOLLOUT (one-shot), waited on by one goroutine that posts
// each readiness to the loop, where OutboundBuffered decides: drained below the low-water
// mark (resume the stream) or not yet (re-arm). gnet keeps its own registration of the
// descriptor; a socket can sit in several epoll sets.
type writeWatch struct {
	ep, quit int
	done     chan struct{}
}

func newWriteWatch(t *testing.T, onReady func(token uint64)) *writeWatch {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	require.NoError(t, err)
	quit, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	require.NoError(t, err)
	require.NoError(t, unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, quit, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}))
	w := &writeWatch{ep: ep, quit: quit, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		evs := make([]unix.EpollEvent, 64)
		for {
			n, err := unix.EpollWait(ep, evs, -1)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return
			}
			for _, ev := range evs[:n] {
				if ev.Fd == -1 {
					return
				}
				onReady(uint64(uint32(ev.Fd))) // the token, here the descriptor itself
			}
		}
	}()
	return w
}

// arm asks for one EPOLLOUT report on fd. Call it on the loop.
func (w *writeWatch) arm(fd int, add bool) error {
	op := unix.EPOLL_CTL_MOD
	if add {
		op = unix.EPOLL_CTL_ADD
	}
	return unix.EpollCtl(w.ep, op, fd, &unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLONESHOT, Fd: int32(fd)})
}

// forget removes fd; call it on the loop in OnClose, before gnet closes the descriptor.
func (w *writeWatch) forget(fd int) { _ = unix.EpollCtl(w.ep, unix.EPOLL_CTL_DEL, fd, nil) }

func (w *writeWatch) close() {
	_, _ = unix.Write(w.quit, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-w.done
	_ = unix.Close(w.ep)
	_ = unix.Close(w.quit)
}

// TestWritableWatchWakesOnDrain proves the mechanism: a connection holding 4 MiB of
// unsent output is watched; its client reads slowly; the loop learns that the output
// drained below a low-water mark with a number of wake-ups bounded by the reader's progress
// (not by elapsed milliseconds), each on the loop goroutine.
func TestWritableWatchWakesOnDrain(t *testing.T) {
	e, cc, gc := startRawEngine(t)
	const (
		size     = 4 << 20
		lowWater = 64 << 10
	)
	var (
		wakeups  atomic.Int64 // readiness reports handled on the loop
		offLoop  atomic.Int64 // of those, ones that ran elsewhere (must stay 0)
		drainedC = make(chan int, 1)
		w        *writeWatch
	)
	w = newWriteWatch(t, func(uint64) {
		_ = gc.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			wakeups.Add(1)
			if goid() != e.loopGID.Load() {
				offLoop.Add(1)
			}
			if n := gc.OutboundBuffered(); n <= lowWater {
				drainedC <- n
				return nil
			}
			return w.arm(gc.Fd(), false) // not yet: one more report when writable again
		}))
	})
	defer w.close()
	e.closedMu.Lock()
	e.onClose = func(c gnet.Conn) { w.forget(c.Fd()) }
	e.closedMu.Unlock()

	armed := make(chan error, 1)
	require.NoError(t, gc.AsyncWrite(make([]byte, size), func(c gnet.Conn, err error) error {
		if err == nil {
			err = w.arm(c.Fd(), true) // on the loop, right after the write was queued
		}
		armed <- err
		return nil
	}))
	require.NoError(t, <-armed)

	// A slow reader: 32 KiB every millisecond at most.
	start := time.Now()
	buf := make([]byte, 32<<10)
	var got int
	var left int
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for got < size {
			n, err := cc.Read(buf)
			got += n
			if err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	select {
	case left = <-drainedC:
	case <-time.After(60 * time.Second):
		t.Fatal("never told that the output drained")
	}
	took := time.Since(start)
	<-readDone
	assert.Equal(t, size, got)
	assert.LessOrEqual(t, left, lowWater)
	assert.Zero(t, offLoop.Load(), "readiness handled off the loop")
	// A 1 ms poll would have woken took/1ms times; the watch wakes when gnet could write
	// more, a few times per socket buffer the reader consumed.
	polls := took / time.Millisecond
	t.Logf("drained %d MiB to %d B in %v with %d wake-ups (a 1 ms poll: %d)", size>>20, left, took, wakeups.Load(), polls)
	assert.Less(t, wakeups.Load(), int64(size/4096), "more than one wake-up per 4 KiB read")
}
