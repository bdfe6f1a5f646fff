package loop_test

// Facts about gnet v2.10.0 that a fix for issue 13 item 9 (parked streams poll
// backpressure every millisecond) relies on, checked against a bare gnet engine so that
// they fail loudly if a gnet upgrade changes them.

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// goid returns the current goroutine's id (tests only: parsed from its stack header).
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// nopGnetLogger silences gnet in these tests.
type nopGnetLogger struct{}

func (nopGnetLogger) Debugf(string, ...any) {}
func (nopGnetLogger) Infof(string, ...any)  {}
func (nopGnetLogger) Warnf(string, ...any)  {}
func (nopGnetLogger) Errorf(string, ...any) {}
func (nopGnetLogger) Fatalf(string, ...any) {}

// rawEngine is a bare gnet server configured like loop's (one loop, ReusePort) that hands
// its first connection to the test.
type rawEngine struct {
	gnet.BuiltinEventEngine
	eng      atomic.Pointer[gnet.Engine]
	addr     chan string
	conns    chan gnet.Conn
	loopGID  atomic.Uint64
	onClose  func(gnet.Conn)
	closedMu sync.Mutex
}

func (e *rawEngine) OnBoot(eng gnet.Engine) gnet.Action {
	e.eng.Store(&eng)
	fd, err := eng.Dup()
	if err == nil {
		if sa, err := unix.Getsockname(fd); err == nil {
			if a, ok := sa.(*unix.SockaddrInet4); ok {
				e.addr <- (&net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}).String()
			}
		}
		_ = unix.Close(fd)
	}
	return gnet.None
}

func (e *rawEngine) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	e.loopGID.Store(goid())
	e.conns <- c
	return nil, gnet.None
}

func (e *rawEngine) OnClose(c gnet.Conn, _ error) gnet.Action {
	e.closedMu.Lock()
	defer e.closedMu.Unlock()
	if e.onClose != nil {
		e.onClose(c)
	}
	return gnet.None
}

// startRawEngine runs a bare gnet engine and returns a client connection that does not
// read (small receive buffer) and the server's side of it.
func startRawEngine(t *testing.T) (*rawEngine, net.Conn, gnet.Conn) {
	t.Helper()
	e := &rawEngine{addr: make(chan string, 1), conns: make(chan gnet.Conn, 1)}
	ran := make(chan error, 1)
	go func() {
		ran <- gnet.Run(e, "tcp://127.0.0.1:0", gnet.WithNumEventLoop(1), gnet.WithReusePort(true),
			gnet.WithReuseAddr(true), gnet.WithTCPNoDelay(gnet.TCPNoDelay), gnet.WithLogger(nopGnetLogger{}))
	}()
	var addr string
	select {
	case addr = <-e.addr:
	case err := <-ran:
		t.Fatalf("gnet.Run: %v", err)
	}
	t.Cleanup(func() {
		if eng := e.eng.Load(); eng != nil {
			_ = eng.Stop(context.Background())
		}
		require.NoError(t, <-ran)
	})
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	cc, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return e, cc, <-e.conns
}

// TestGnetAsyncWriteCallbackIsNotDrain: AsyncWrite's callback runs on the loop goroutine
// right after the write was attempted (connection_unix.go:255-269: c.write, then the
// deferred callback), with whatever the socket did not take still in gnet's outbound
// buffer. It says "queued", not "sent": it cannot be used to learn that a slow reader
// caught up, and it is called once only.
func TestGnetAsyncWriteCallbackIsNotDrain(t *testing.T) {
	e, _, gc := startRawEngine(t)
	const size = 8 << 20
	type call struct {
		gid      uint64
		outbound int
		err      error
	}
	calls := make(chan call, 4)
	require.NoError(t, gc.AsyncWrite(make([]byte, size), func(c gnet.Conn, err error) error {
		calls <- call{goid(), c.OutboundBuffered(), err}
		return nil
	}))
	cl := <-calls
	require.NoError(t, cl.err)
	assert.Equal(t, e.loopGID.Load(), cl.gid, "callback on the loop goroutine")
	assert.Greater(t, cl.outbound, size/2, "most of the data is still in gnet's outbound buffer when the callback runs")
	select {
	case extra := <-calls:
		t.Fatalf("a second callback: %+v", extra)
	default:
	}
}

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
