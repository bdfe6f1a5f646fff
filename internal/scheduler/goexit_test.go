package scheduler

import (
	"bytes"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// panicLog records what Config.OnPanic received.
type panicLog struct {
	vals []any
	ids  []uint64
}

func (p *panicLog) onPanic(t *Task, v any, stack []byte) {
	p.vals = append(p.vals, v)
	if t != nil {
		p.ids = append(p.ids, t.ID())
	} else {
		p.ids = append(p.ids, 0)
	}
}

// A task that calls runtime.Goexit ends as if it panicked with ErrGoexit: its deferred
// functions run, OnPanic sees ErrGoexit, the loop (here the test goroutine) survives, later
// tasks run on pooled coroutines, and the goroutine that ran the task exits.
func TestGoexitInTaskIsContained(t *testing.T) {
	var pl panicLog
	s := New(Config{Post: func(func()) {}, OnPanic: pl.onPanic})
	var order []string
	var gA uint64
	a := s.Go(func(t *Task) {
		gA = t.Goroutine()
		defer func() { order = append(order, "a defer 1") }()
		defer func() { order = append(order, "a defer 2") }()
		t.Yield()
		runtime.Goexit()
	})
	aID := a.ID()
	s.Go(func(t *Task) {
		t.Yield()
		t.Yield()
		order = append(order, "b")
	})
	runAll(s)
	assert.Equal(t, []string{"a defer 2", "a defer 1", "b"}, order)
	require.Equal(t, []any{ErrGoexit}, pl.vals)
	assert.Equal(t, []uint64{aID}, pl.ids)
	c := s.Counters()
	assert.Equal(t, uint64(1), c.Goexits)
	assert.Equal(t, uint64(1), c.Panics)
	assert.Zero(t, c.LeakedCoroutines)
	assert.Zero(t, c.Live)
	assert.Equal(t, uint64(2), c.Coroutines)
	assert.Equal(t, 2, c.Idle, "both Task structs are pooled (a's without its coroutine)")

	// The Task structs are reused; the one whose coroutine was dropped gets a new one.
	ran := 0
	for range 2 {
		s.Go(func(t *Task) { t.Yield(); ran++ })
	}
	runAll(s)
	assert.Equal(t, 2, ran)
	assert.Equal(t, uint64(3), s.Counters().Coroutines, "one new coroutine, for the struct that lost its own")
	s.Close()
	// The goroutine that ran a's coroutine has ended (leakOpts would hide it).
	require.NotZero(t, gA)
	waitUntil(t, "the Goexit's goroutine to end", func() bool { return !goroutineAlive(gA) })
	goleak.VerifyNone(t, leakOpts...)
}

// goroutineAlive reports whether goroutine id exists.
func goroutineAlive(id uint64) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Contains(buf, fmt.Appendf(nil, "goroutine %d [", id))
}

// waitUntil polls cond (on the calling goroutine) until it holds or a generous deadline
// passes.
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// On a real loop goroutine: a Go task that parks and then calls runtime.Goexit, and an
// Every task whose second tick calls it, leave the loop running. The Every task ends (a
// Goexit cannot be survived by the goroutine it happens on, so no tick follows it), its
// tick's deferred functions ran.
func TestGoexitInGoAndEveryTasks(t *testing.T) {
	var goexits atomic.Int32 // OnPanic calls with ErrGoexit
	var other atomic.Value
	l := newLoop(t, Config{OnPanic: func(_ *Task, v any, _ []byte) {
		if v == ErrGoexit {
			goexits.Add(1)
		} else {
			other.Store(v)
		}
	}})
	var goDefer, tickDefer bool
	ticks := 0
	var ev *Event
	l.do(func() {
		ev = NewEvent(l.s)
		l.s.Go(func(t *Task) {
			defer func() { goDefer = true }()
			_ = ev.Wait(t)
			runtime.Goexit()
		})
		l.s.Every(time.Millisecond, func(t *Task) {
			defer func() { tickDefer = true }()
			ticks++
			if ticks == 2 {
				runtime.Goexit()
			}
		})
	})
	l.do(ev.Set)
	l.waitFor(t, "both Goexits", func() bool { return goexits.Load() == 2 })
	l.do(func() {
		assert.True(t, goDefer, "the Go task's deferred function ran")
		assert.True(t, tickDefer, "the tick's deferred function ran")
		assert.Equal(t, 2, ticks)
		c := l.s.Counters()
		assert.Equal(t, uint64(2), c.Goexits)
		assert.Zero(t, c.Live, "the Every task ended")
		assert.Zero(t, c.Timers, "no tick pending")
	})
	// The loop goes on running tasks and timers.
	done := make(chan struct{})
	l.do(func() {
		l.s.Go(func(t *Task) {
			_ = t.Sleep(time.Millisecond)
			close(done)
		})
	})
	<-done
	assert.Nil(t, other.Load(), "OnPanic received something else")
}

// With Config.LockedOSThread (the loop goroutine is locked to its thread), the coroutine of
// a task that called Goexit cannot be finished elsewhere: it stays parked, counted, and the
// loop goes on. (TestMain ignores that goroutine: it lives until the process ends.)
func TestGoexitOnLockedLoopLeaksTheCoroutine(t *testing.T) {
	var pl panicLog
	var c Counters
	var order []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s := New(Config{Post: func(func()) {}, OnPanic: pl.onPanic, LockedOSThread: true})
		s.Go(func(t *Task) {
			defer func() { order = append(order, "defer") }()
			runtime.Goexit()
		})
		s.Go(func(t *Task) { t.Yield(); order = append(order, "after") })
		runAll(s)
		c = s.Counters()
		s.Close()
	}()
	<-done
	assert.Equal(t, []string{"defer", "after"}, order)
	assert.Equal(t, []any{ErrGoexit}, pl.vals)
	assert.Equal(t, uint64(1), c.Goexits)
	assert.Equal(t, uint64(1), c.LeakedCoroutines)
}

// A Goexit in an AfterFunc callback runs on the loop goroutine itself and cannot be
// contained: OnPanic is told, then the loop goroutine (here a goroutine of the test) exits.
func TestGoexitInAfterFuncIsReported(t *testing.T) {
	var pl panicLog
	exited := make(chan struct{})
	returned := false
	go func() {
		defer close(exited)
		s := New(Config{Post: func(func()) {}, OnPanic: pl.onPanic})
		defer s.Close()
		s.AfterFunc(0, func() { runtime.Goexit() })
		for s.Counters().Timers > 0 {
			s.Run()
		}
		returned = true
	}()
	<-exited
	assert.False(t, returned, "the loop goroutine went on after a Goexit on it")
	assert.Equal(t, []any{ErrGoexit}, pl.vals)
	assert.Equal(t, []uint64{0}, pl.ids)
}

// A Goexit from a deferred function, while a panic or Close unwinds the task, is contained
// too. A Goexit during a panic supersedes it (recover no longer sees the panic): only the
// Goexit is reported.
func TestGoexitInDeferredFunctions(t *testing.T) {
	var pl panicLog
	s := New(Config{Post: func(func()) {}, OnPanic: pl.onPanic})
	s.Go(func(t *Task) {
		defer runtime.Goexit()
		panic("boom")
	})
	runAll(s)
	require.Equal(t, []any{ErrGoexit}, pl.vals)
	unwound := false
	s.Go(func(t *Task) {
		defer func() { unwound = true; runtime.Goexit() }()
		_ = t.Park(ReasonOther)
	})
	runAll(s)
	after := false
	s.Go(func(t *Task) { after = true })
	runAll(s)
	assert.True(t, after, "the loop goes on")
	s.Close() // unwinds the parked task, whose deferred function calls Goexit
	assert.True(t, unwound)
	assert.Equal(t, []any{ErrGoexit, ErrGoexit}, pl.vals)
	assert.Equal(t, uint64(2), s.Counters().Goexits)
}
