package loop_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestNonReadingPipelinerMemoryBounded is issue 13 item 2: a client that pipelines requests
// for large responses without reading them, then keeps sending requests as fast as it can,
// must not grow the server's memory without bound. The server may stop reading the
// connection (the client's writes then block) or close it; it must not buffer it all.
//
// The bound, 200 MB of resident memory, is generous on purpose: per connection the server
// may hold Config.MaxOutputBytes (4 MiB) of output and Config.MaxBufferedInput (4 MiB) of
// input by default; even a server that kept all 40 responses (40 MiB) with the Go
// collector's default headroom (GOGC=100, twice the live heap) stays near 100 MB, while
// unbounded growth (about 100 MB/s in the report) passes 200 MB within seconds.
func TestNonReadingPipelinerMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("pushes a child process's memory")
	}
	const (
		boundKB   = 200 << 10 // kB
		pipelined = 40
		sendFor   = 5 * time.Second
	)
	fc := startFaultChild(t, "rss", 0)
	pid := fc.cmd.Process.Pid
	base, err := procStatusKB(pid, "VmRSS")
	require.NoError(t, err)

	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", fc.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	deadline := time.Now().Add(sendFor)
	require.NoError(t, c.SetWriteDeadline(deadline))
	_, err = io.WriteString(c, strings.Repeat("GET /big HTTP/1.1\r\nHost: x\r\n\r\n", pipelined))
	require.NoError(t, err)

	// Flood small requests until the deadline, a write error (the server stopped reading:
	// the write blocked until the deadline; or it closed the connection), or the bound.
	over := make(chan int64, 1)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			if rss, err := procStatusKB(pid, "VmRSS"); err == nil && rss > boundKB {
				over <- rss
				_ = c.SetWriteDeadline(time.Now()) // end the flood now
				return
			}
		}
	}()
	req := bytes.Repeat([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 64)
	var sent int64
	var werr error
	for time.Now().Before(deadline) {
		var n int
		n, werr = c.Write(req)
		sent += int64(n)
		if werr != nil {
			break
		}
	}
	close(stop)
	<-sampled
	peak, err := procStatusKB(pid, "VmHWM")
	require.NoError(t, err)
	t.Logf("sent %d MB of requests; write ended with %v; child RSS %d kB at start, peak %d kB", sent>>20, werr, base, peak)
	select {
	case rss := <-over:
		require.FailNow(t, "child RSS over its bound", "%d kB (bound %d kB) after %d MB of requests", rss, boundKB, sent>>20)
	default:
	}
	require.True(t, fc.alive(), "the child exited: %v", fc.exitEr)
	assert.Less(t, peak, int64(boundKB), "child peak RSS")
}
