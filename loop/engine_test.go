package loop_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
)

// TestEngineStopAfterServingIsAnError: when the event loop stops although neither
// Shutdown nor Close asked (here gnet's own Stop is called behind the server's back, the
// way a fatal loop error ends it) after it has run handlers and with one still parked,
// ListenAndServe must return an error that is not ErrServerClosed (so that a supervisor
// restarts the program), and the parked handler is unwound, not leaked.
func TestEngineStopAfterServingIsAnError(t *testing.T) {
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s.Handle("GET /", func(c *loop.Ctx) { c.String(200, "ok\n") })
	parked := make(chan struct{})
	unwound := make(chan struct{})
	s.Handle("GET /park", func(c *loop.Ctx) {
		defer close(unwound)
		close(parked)
		_ = c.Sleep(time.Hour)
	})
	served := make(chan error, 1)
	go func() { served <- s.ListenAndServe() }()
	<-s.Ready()
	require.NoError(t, freshGet(s.Addr().String(), 5*time.Second))
	pc, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	defer pc.Close()
	_, err = io.WriteString(pc, "GET /park HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	<-parked

	// Not gnet's package-level Stop: every server's placeholder listener has the same
	// address (accept_guard.go), so it would find whichever engine registered last.
	require.NoError(t, loop.StopEngine(s))
	select {
	case err = <-served:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "ListenAndServe did not return after the engine stopped")
	}
	require.Error(t, err)
	assert.NotErrorIs(t, err, loop.ErrServerClosed)
	assert.ErrorIs(t, err, loop.ErrEngineStopped) // errEngineStopped, through export_test.go
	select {
	case <-unwound:
	default:
		assert.Fail(t, "the parked handler was not unwound")
	}
	_, derr := net.DialTimeout("tcp", s.Addr().String(), time.Second)
	assert.Error(t, derr, "the listener is closed once ListenAndServe returned")
	require.NoError(t, s.Shutdown(context.Background()))
}
