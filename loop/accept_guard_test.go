package loop_test

import (
	"bufio"
	"net"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var fdExhaustedLine = regexp.MustCompile(`(?im)^.*too many open files.*$`)

// TestAcceptSurvivesFileDescriptorExhaustion is issue 13 item 1: a server whose
// RLIMIT_NOFILE is exhausted by connections must keep serving the connections it has,
// answer new ones once descriptors are free again, log the exhaustion (rate-limited), and
// not exit.
func TestAcceptSurvivesFileDescriptorExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("opens hundreds of connections")
	}
	const (
		limit   = 256 // the child's RLIMIT_NOFILE
		keepers = 20  // connections opened first and used before and after the exhaustion
		excess  = 400 // more connections than the child has descriptors left
	)
	var rl unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &rl))
	if rl.Cur < keepers+excess+100 {
		t.Skipf("the test process needs %d descriptors, RLIMIT_NOFILE is %d", keepers+excess+100, rl.Cur)
	}
	fc := startFaultChild(t, "emfile", limit)

	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	var kept []client
	for range keepers {
		c, err := net.DialTimeout("tcp", fc.addr, 5*time.Second)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		cl := client{c, bufio.NewReader(c)}
		require.NoError(t, getOn(cl.c, cl.br, 5*time.Second))
		kept = append(kept, cl)
	}

	var extra []net.Conn
	closeExtra := func() {
		for _, c := range extra {
			_ = c.Close()
		}
		extra = nil
	}
	t.Cleanup(closeExtra)
	for range excess {
		c, err := net.DialTimeout("tcp", fc.addr, 5*time.Second)
		if err != nil {
			break // the backlog is full or the server is gone; enough pressure either way
		}
		extra = append(extra, c)
	}
	// The child runs out of descriptors while accepting these: wait until it says so.
	require.Eventually(t, func() bool {
		return fdExhaustedLine.MatchString(fc.stderr.String()) || !fc.alive()
	}, 20*time.Second, 10*time.Millisecond, "the child never reported descriptor exhaustion")
	closeExtra()

	// New connections are answered again once descriptors are free.
	var lastErr error
	ok := assert.Eventually(t, func() bool {
		lastErr = freshGet(fc.addr, 2*time.Second)
		return lastErr == nil || !fc.alive()
	}, 20*time.Second, 20*time.Millisecond)
	require.True(t, fc.alive(), "the child exited: %v", fc.exitEr)
	require.True(t, ok)
	require.NoError(t, lastErr, "a new connection is not answered")

	// The connections that were open through the exhaustion still work.
	for i, cl := range kept {
		require.NoError(t, getOn(cl.c, cl.br, 5*time.Second), "kept connection %d", i)
	}
	require.True(t, fc.alive(), "the child exited: %v", fc.exitEr)

	// Logged, but rate-limited: hundreds of accepts failed, a handful of lines say so.
	lines := fdExhaustedLine.FindAllString(fc.stderr.String(), -1)
	t.Logf("child logged: %q", lines)
	require.NotEmpty(t, lines)
	assert.LessOrEqual(t, len(lines), 5, "one log line per failed accept: %q", lines)
}
