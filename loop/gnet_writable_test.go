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
