package loop

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerStateTransitions(t *testing.T) {
	for from := stateNew; from <= stateStopped; from++ {
		assert.NotContains(t, from.String(), "?")
		for to := stateNew; to <= stateStopped; to++ {
			if allowedTransition(from, to) {
				assert.Greater(t, to, from, "%v → %v: states only move forward", from, to)
				continue
			}
			var l lifecycle
			l.v.Store(int32(from))
			assert.Panics(t, func() { l.move(from, to) }, "%v → %v must be refused", from, to)
		}
	}
	var l lifecycle
	require.True(t, l.move(stateNew, stateStarting))
	require.False(t, l.move(stateNew, stateStarting), "a second move from the same state loses")
	from, moved := l.advance(stateStopping)
	require.True(t, moved)
	require.Equal(t, stateStarting, from)
	_, moved = l.advance(stateDraining)
	require.False(t, moved, "never backwards")
}

// waitDone fails the test if ch is not closed within 10 s (a call that blocks forever).
func waitDone(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		require.FailNow(t, what+" blocked")
	}
}

// returns runs fn in a goroutine and fails the test if it does not return within 10 s.
func returns(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	waitDone(t, what, done)
}

// Every public lifecycle call in every state a caller can observe: before start, serving,
// after Shutdown, after Close, and twice in a row. None blocks forever.
func TestLifecycleTable(t *testing.T) {
	calls := []struct {
		name string
		fn   func(t *testing.T, s *Server)
	}{
		{"Shutdown", func(t *testing.T, s *Server) {
			returns(t, "Shutdown", func() { assert.NoError(t, s.Shutdown(context.Background())) })
		}},
		{"Close", func(t *testing.T, s *Server) { returns(t, "Close", func() { assert.NoError(t, s.Close()) }) }},
		{"Done", func(t *testing.T, s *Server) { waitDone(t, "Done", s.Done()) }},
		{"Ready", func(t *testing.T, s *Server) { waitDone(t, "Ready", s.Ready()) }},
		{"DrainReport", func(t *testing.T, s *Server) { returns(t, "DrainReport", func() { s.DrainReport() }) }},
		{"Post", func(t *testing.T, s *Server) { assert.ErrorIs(t, s.Loop(0).Post(func() {}), ErrServerClosed) }},
		{"ListenAndServe", func(t *testing.T, s *Server) {
			returns(t, "ListenAndServe", func() { assert.ErrorIs(t, s.ListenAndServe(), ErrServerClosed) })
		}},
		{"Go", func(t *testing.T, s *Server) { waitDone(t, "Go handle", s.Loop(0).Go("x", func(*Task) {}).Done()) }},
		{"Every", func(t *testing.T, s *Server) {
			waitDone(t, "Every handle", s.Loop(0).Every("x", time.Second, func(*Task) {}).Done())
		}},
	}
	stops := []struct {
		name    string
		started bool
		stop    func(s *Server) error
	}{
		{"NeverStarted/Shutdown", false, func(s *Server) error { return s.Shutdown(context.Background()) }},
		{"NeverStarted/Close", false, func(s *Server) error { return s.Close() }},
		{"Served/Shutdown", true, func(s *Server) error { return s.Shutdown(context.Background()) }},
		{"Served/Close", true, func(s *Server) error { return s.Close() }},
	}
	for _, st := range stops {
		for _, call := range calls {
			t.Run(st.name+"/"+call.name, func(t *testing.T) {
				s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
				errc := make(chan error, 1)
				if st.started {
					go func() { errc <- s.ListenAndServe() }()
					waitDone(t, "Ready", s.Ready())
				}
				require.NoError(t, st.stop(s))
				if st.started {
					require.ErrorIs(t, <-errc, ErrServerClosed)
				}
				call.fn(t, s)
				call.fn(t, s) // twice: still fine
			})
		}
	}
}

// The common pattern: defer Close plus an explicit Shutdown, on a server that never
// started. Used to block forever.
func TestShutdownTwiceBeforeStart(t *testing.T) {
	s := New(Config{Logger: quietLogger(t)})
	returns(t, "first Shutdown", func() { require.NoError(t, s.Shutdown(context.Background())) })
	returns(t, "second Shutdown", func() { require.NoError(t, s.Shutdown(context.Background())) })
	returns(t, "Close", func() { require.NoError(t, s.Close()) })
	waitDone(t, "Done", s.Done())
	returns(t, "DrainReport", func() { s.DrainReport() })
}

// Shutdown racing ListenAndServe: whichever wins, both return, the server ends stopped and
// ListenAndServe reports ErrServerClosed (or never ran its loop).
func TestShutdownRacingListenAndServe(t *testing.T) {
	for i := 0; i < 20; i++ {
		s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
		var wg sync.WaitGroup
		wg.Add(2)
		var serveErr, shutErr error
		go func() { defer wg.Done(); serveErr = s.ListenAndServe() }()
		go func() { defer wg.Done(); shutErr = s.Shutdown(context.Background()) }()
		returns(t, "both", wg.Wait)
		require.ErrorIs(t, serveErr, ErrServerClosed)
		require.NoError(t, shutErr)
		require.Equal(t, stateStopped, s.life.load())
		waitDone(t, "Done", s.Done())
	}
}

// A Shutdown while the server is starting drains once the loop is up, and the port is
// closed afterwards.
func TestShutdownDuringStartDrains(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	require.NoError(t, s.Shutdown(context.Background()))
	require.ErrorIs(t, <-errc, ErrServerClosed)
	if a := s.Addr(); a != nil {
		_, err := net.DialTimeout("tcp", a.String(), time.Second)
		require.Error(t, err, "the port must be closed after the drain")
	}
}

// The engine stopping without a Shutdown is an error a supervisor restarts on, not
// ErrServerClosed.
func TestEngineStopWithoutShutdownIsAnError(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	errc := serveInBackground(t, s)
	eng := s.eng.Load()
	require.NotNil(t, eng)
	require.NoError(t, eng.Stop(context.Background())) // as gnet does on a fatal accept error
	err := <-errc
	require.ErrorIs(t, err, errEngineStopped)
	require.False(t, errors.Is(err, ErrServerClosed))
	returns(t, "Shutdown after", func() { require.NoError(t, s.Shutdown(context.Background())) })
}

// Shutdown on a server that never started must close Done, so that a second Shutdown,
// Close, <-Done() and DrainReport return (defer Close plus an explicit Shutdown).
func TestShutdownBeforeStartClosesDone(t *testing.T) {
	s := New(Config{Logger: quietLogger(t)})
	require.NoError(t, s.Shutdown(context.Background()))
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_ = s.Shutdown(context.Background())
		_ = s.Close()
		<-s.Done()
		s.DrainReport()
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Shutdown, Close, Done or DrainReport blocked on a server that never started")
	}
	require.ErrorIs(t, s.ListenAndServe(), ErrServerClosed)
}
