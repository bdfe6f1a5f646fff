package offload

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonrt/baton/internal/scheduler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type wkey struct{}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWorkCtxParentCause: a cancelled parent reaches the call's context whether Done was
// asked before or after, and context.Cause reports the parent's cause, as for a
// context.WithCancel child.
func TestWorkCtxParentCause(t *testing.T) {
	cause := errors.New("client gone")
	for _, doneFirst := range []bool{false, true} {
		parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), wkey{}, "v"))
		var w workCtx
		w.init(parent, nil)
		var done <-chan struct{}
		if doneFirst {
			done = w.Done()
			require.False(t, isClosed(done))
		}
		require.NoError(t, w.Err())
		require.NoError(t, context.Cause(&w))
		cancel(cause)
		if doneFirst {
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Done not closed after the parent was cancelled")
			}
		}
		assert.True(t, isClosed(w.Done()))
		assert.ErrorIs(t, w.Err(), context.Canceled)
		assert.Equal(t, cause, context.Cause(&w))
		assert.Equal(t, "v", w.Value(wkey{}))
		w.cancel(context.Canceled) // no-op now
		assert.Equal(t, cause, context.Cause(&w))
	}
}

// TestWorkCtxOwnCancel: cancelling the call closes Done, runs AfterFuncs registered on it
// and leaves the parent alone; Cause is context.Canceled; the marker and Deadline work.
func TestWorkCtxOwnCancel(t *testing.T) {
	parent, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	p := &Pool{}
	for _, doneFirst := range []bool{false, true} {
		var w workCtx
		w.init(parent, p)
		dl, ok := w.Deadline()
		pdl, _ := parent.Deadline()
		require.True(t, ok)
		require.Equal(t, pdl, dl)
		require.True(t, inPool(&w))
		require.Same(t, p, w.Value(markerKey{}))
		var done <-chan struct{}
		if doneFirst {
			done = w.Done()
		}
		ran := make(chan struct{})
		context.AfterFunc(&w, func() { close(ran) })
		child, childCancel := context.WithCancel(&w)
		w.cancel(context.Canceled)
		select {
		case <-ran:
		case <-time.After(20 * time.Second):
			t.Fatal("AfterFunc did not run")
		}
		select {
		case <-child.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("derived context not cancelled")
		}
		childCancel()
		if doneFirst {
			assert.True(t, isClosed(done))
		}
		assert.True(t, isClosed(w.Done()))
		assert.Equal(t, context.Canceled, w.Err())
		assert.Equal(t, context.Canceled, context.Cause(&w))
		assert.NoError(t, parent.Err())
	}
}

// TestDoAllocs: a call from a goroutine caller allocates only its typed result.
func TestDoAllocs(t *testing.T) {
	p := newPool(t, Config{Tokens: 2})
	g := NewGoCaller(context.Background(), p, "k")
	nop := func(context.Context) (int, error) { return 1, nil }
	_, err := Do(g, nop) // warm up: a worker
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := Do(g, nop); err != nil {
			t.Error(err)
		}
	})
	assert.LessOrEqual(t, allocs, 1.0)
}

// TestWorkCtxCancelCause: cancelCause gives context.Canceled with the cause, unless the
// parent was cancelled first (its error and cause stand).
func TestWorkCtxCancelCause(t *testing.T) {
	require.NotNil(t, cancelCtxKey, "context.Cause's key was not learnt")
	var w workCtx
	w.init(context.Background(), nil)
	done := w.Done()
	w.cancelCause(errGone)
	assert.True(t, isClosed(done))
	assert.Equal(t, context.Canceled, w.Err())
	assert.Equal(t, errGone, context.Cause(&w))
	child, cancel := context.WithCancel(&w)
	defer cancel()
	<-child.Done()
	assert.Equal(t, errGone, context.Cause(child))

	first := errors.New("parent first")
	parent, pcancel := context.WithCancelCause(context.Background())
	var w2 workCtx
	w2.init(parent, nil)
	pcancel(first)
	w2.cancelCause(errGone)
	assert.Equal(t, context.Canceled, w2.Err())
	assert.Equal(t, first, context.Cause(&w2))

	var w3 workCtx
	w3.init(context.Background(), nil)
	w3.cancelCause(context.Canceled)
	assert.Equal(t, context.Canceled, context.Cause(&w3))
}

// baseCaller is a loop task whose own context is never made: its hook gives Base, and its
// cancellation reaches the pool only through its park's error.
type baseCaller struct{ *loopCaller }

func (c baseCaller) Context() context.Context {
	panic("offload: Context called although the hook gives Base")
}

func (c baseCaller) OffloadHook() Hook {
	h := c.loopCaller.OffloadHook()
	h.Base = context.WithValue(context.Background(), wkey{}, "base")
	return h
}

// TestBaseCancelReachesFunction: with Hook.Base the function's context derives from Base,
// and the caller's cancellation (its park's error) cancels it with that error as cause.
func TestBaseCancelReachesFunction(t *testing.T) {
	l := newLoop(t)
	p := newPool(t, Config{Tokens: 2})
	type seen struct {
		err, cause error
		val        any
	}
	running, saw, hold, done := make(chan struct{}), make(chan seen, 1), make(chan struct{}), make(chan struct{})
	var doErr error
	var ref scheduler.Ref
	l.do(func() {
		lc := &loopCaller{l: l, key: "GET /b", pool: p, log: &whyLog{}}
		c := baseCaller{lc}
		lc.t = l.s.Spawn(func(*scheduler.Task) {
			defer close(done)
			_, doErr = Do(c, func(ctx context.Context) (int, error) {
				close(running)
				<-ctx.Done()
				saw <- seen{ctx.Err(), context.Cause(ctx), ctx.Value(wkey{})}
				<-hold
				return 1, nil
			})
		}, nil)
		ref = lc.t.Ref()
	})
	<-running
	l.do(func() { l.s.Cancel(ref.Task(), errGone) })
	s := <-saw
	assert.Equal(t, context.Canceled, s.err)
	assert.Equal(t, errGone, s.cause)
	assert.Equal(t, "base", s.val)
	<-done
	assert.Equal(t, errGone, doErr)
	close(hold)
	waitUntil(t, "token released", func() bool { return p.Stats().Lanes[laneFast].InUse == 0 })
}
