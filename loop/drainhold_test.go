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
		if _, err := s.Draining().Await(tk, 0); err != nil {
			return
		}
		sawDrain.Store(true)
		if _, err := finish.Await(tk, 0); err != nil { // the work that must finish before the stop
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

// TestGoFromOnDrainStarts: a task started with Go from an OnDrain hook, which holds the
// drain for it (HoldDrain's doc), runs and saves before Shutdown returns, as one started
// with Start does. (Go posts the start to the loop's next turn, Start spawns at once: a
// task that blocks the loop thread from the hook's turn on delays a Go task, never a Start
// task already spawned.)
func TestGoFromOnDrainStarts(t *testing.T) {
	for _, how := range []string{"Go", "Start"} {
		t.Run(how, func(t *testing.T) {
			s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
			var saved atomic.Bool
			var h *TaskHandle
			l := s.Loop(0)
			l.OnDrain(func(time.Time) {
				release := l.HoldDrain() // in the hook: HoldDrain's doc says why
				save := func(tk *Task) {
					defer release()
					if tk.Sleep(10*time.Millisecond) == nil { // the work parks, as a write would
						saved.Store(true)
					}
				}
				if how == "Go" {
					h = l.Go("save-on-drain", save)
				} else {
					h = l.Go("save-on-drain", save)
				}
			})
			errc := serveInBackground(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, s.Shutdown(ctx))
			require.ErrorIs(t, <-errc, ErrServerClosed)
			assert.True(t, saved.Load(), "the task started from OnDrain did not run before Shutdown returned")
			select {
			case <-h.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the task's handle was not done 10 s after Shutdown returned")
			}
		})
	}
}

// TestUnrunTaskHandleEnds: a task started from an OnDrain hook without a hold, in a drain
// that ends in the hook's turn (nothing in flight), never runs (HoldDrain's doc), but its
// handle is done once the server stopped, for Go and Start alike. Before, the scheduler
// dropped the spawned task unrun at the stop, its deferred end with it, and Done was
// never closed: whoever waited for it waited forever.
func TestUnrunTaskHandleEnds(t *testing.T) {
	for _, how := range []string{"Go", "Start"} {
		t.Run(how, func(t *testing.T) {
			s := New(Config{Addr: "127.0.0.1:0", Logger: quietLogger(t)})
			var h *TaskHandle
			l := s.Loop(0)
			l.OnDrain(func(time.Time) {
				save := func(tk *Task) { _ = tk.Sleep(time.Millisecond) }
				if how == "Go" {
					h = l.Go("unheld-on-drain", save)
				} else {
					h = l.Go("unheld-on-drain", save)
				}
			})
			errc := serveInBackground(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, s.Shutdown(ctx))
			require.ErrorIs(t, <-errc, ErrServerClosed)
			select {
			case <-h.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the handle of a task the stop dropped unrun was not done 10 s after the server stopped")
			}
		})
	}
}
