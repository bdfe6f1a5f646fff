package loop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHoldDrainKeepsShutdownOpen: a Go task that holds the drain flushes its work after
// Shutdown began, and Shutdown returns only after it released; a second release does
// nothing.
func TestHoldDrainKeepsShutdownOpen(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	finish := NewFuture[struct{}](s.loopRef)
	var holding, sawDrain, flushed atomic.Bool
	s.Loop(0).Go("flusher", func(tk *Task) {
		release := s.Loop(0).HoldDrain()
		holding.Store(true)
		defer release()
		defer release() // idempotent: the hold is counted once
		if _, err := s.Draining().Await(tk); err != nil {
			return
		}
		sawDrain.Store(true)
		if _, err := finish.Await(tk); err != nil { // the work that must finish before the stop
			return
		}
		flushed.Store(true)
	})
	errc := serveInBackground(t, s)
	// A Go task starts once the server is ready: a Shutdown before it took the hold would
	// not wait for it.
	require.Eventually(t, holding.Load, 10*time.Second, time.Millisecond)
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	require.Eventually(t, sawDrain.Load, 10*time.Second, time.Millisecond)
	// The drain began and checked what was left (before the task woke from Draining);
	// without the hold, nothing else was there to keep the server running.
	var st serverState
	inLoop(t, s, func() { st = s.life.load() })
	assert.Equal(t, stateDraining, st, "the hold keeps the server draining")
	assert.Empty(t, shut, "Shutdown returned while the drain was held")
	finish.Resolve(struct{}{}, nil)
	require.NoError(t, <-shut)
	assert.True(t, flushed.Load(), "the task finished its work before Shutdown returned")
	require.ErrorIs(t, <-errc, ErrServerClosed)
}

// TestHoldDrainForcedByDeadline: a hold never released does not outlive the Shutdown
// context: the stop is forced at its deadline.
func TestHoldDrainForcedByDeadline(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
	held := make(chan struct{})
	require.NoError(t, s.Loop(0).Post(func() { s.Loop(0).HoldDrain(); close(held) })) // never released
	errc := serveInBackground(t, s)
	<-held
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := s.Shutdown(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, <-errc, ErrServerClosed)
}
