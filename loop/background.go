package loop

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/batonrt/baton/internal/scheduler"
)

// TaskHandle controls a background task started with Loop.Go or Loop.Every: a game
// tick per match is stopped when the match ends. Safe for concurrent use.
type TaskHandle struct {
	srv      *Server
	name     string
	done     chan struct{} // closed when the task has ended
	stopOnce sync.Once
	run      *bgRun // touched only in functions posted to the loop
}

// bgRun is the loop's side of a background task. Loop-confined.
type bgRun struct {
	bt      *Task // the running task; nil before it starts and after it ends
	stopped bool  // Stop arrived before the task started: it never starts
}

// Task returns the running task: nil before it starts and after it ends. Loop-confined.
func (h *TaskHandle) Task() *Task { return h.run.bt }

// Stop stops the task: a Go task's park (Sleep, Await, ...) returns context.Canceled and its
// Context is cancelled with it, as a context's cancel function does, so it can return (its
// deferred functions run); an Every task runs no further tick (a tick already running
// finishes). Stop returns at once;
// Done is closed once the task has ended. Stopping a task that already ended does nothing.
// Safe for concurrent use, also from the task itself.
func (h *TaskHandle) Stop() {
	h.stopOnce.Do(func() {
		if h.srv.post(h.stopOnLoop) != nil {
			h.end() // the loop is gone: so is the task
		}
	})
}

func (h *TaskHandle) stopOnLoop() {
	if h.run.bt == nil {
		h.run.stopped = true
		h.end()
		return
	}
	h.run.bt.cancel(context.Canceled)
}

// Done returns a channel closed when the task has ended: its function returned, it was
// stopped, or the server stopped. Safe for concurrent use.
func (h *TaskHandle) Done() <-chan struct{} { return h.done }

func (h *TaskHandle) end() {
	select {
	case <-h.done:
	default:
		close(h.done)
	}
}

// Go starts fn as a background task on this loop, named name on the stats pages, in the
// stall log and in CPU accounting: like a handler it may park (Sleep, Yield, Await) and
// shares the loop's state without locks. Its Context is cancelled when the task is stopped
// or the server stops. Called on this loop (from a task or a function of the loop: a
// feature making the task of an object it creates there, such as a room's tick task), it
// starts the task at once: the handle's Task is there when Go returns, and the first slice
// runs in this loop turn's pump. Called from anywhere else (another loop, a goroutine,
// before ListenAndServe) it starts the task through Post, once the loop runs. Safe for
// concurrent use.
func (l *Loop) Go(name string, fn func(t *Task)) *TaskHandle {
	if l.OnLoop() {
		return l.start(name, fn)
	}
	return l.srv.goTask(name, fn)
}

// goTask is Loop.Go for this loop's Server.
func (s *Server) goTask(name string, fn func(t *Task)) *TaskHandle {
	if fn == nil {
		panic("loop: Go(" + name + ", nil)")
	}
	h := s.newHandle(name)
	s.spawnBackground(h, fn)
	return h
}

// Every runs fn on this loop every d as one background task named name: a game tick that
// shares state with handlers without locks. Ticks follow absolute deadlines (start + k·d),
// so they do not drift; a tick that runs late is not repeated (missed deadlines are
// skipped, not bunched). A panicking tick is logged and the next tick runs. It stops when
// its handle is stopped or the server stops. Safe for concurrent use.
func (l *Loop) Every(name string, d time.Duration, fn func(t *Task)) *TaskHandle {
	s := l.srv
	if d <= 0 {
		panic("loop: Every(" + name + "): non-positive interval")
	}
	if fn == nil {
		panic("loop: Every(" + name + ", nil)")
	}
	h := s.newHandle(name)
	s.spawnBackground(h, func(t *Task) {
		next := s.nanotime() + int64(d)
		for {
			if err := t.t.Sleep(time.Duration(next - s.nanotime())); err != nil || t.err != nil {
				return
			}
			s.tick(t, fn)
			now := s.nanotime()
			next += int64(d)
			if next <= now { // late: skip the deadlines already missed
				next += ((now-next)/int64(d) + 1) * int64(d)
			}
		}
	})
	return h
}

func (s *Server) newHandle(name string) *TaskHandle {
	if name == "" {
		name = "background"
	}
	return &TaskHandle{srv: s, name: name, done: make(chan struct{}), run: &bgRun{}}
}

// tick runs one tick of an Every task, containing a panic: logged, and the next tick runs.
func (s *Server) tick(t *Task, fn func(*Task)) {
	defer func() {
		if v := recover(); v != nil {
			if s.life.load() >= stateStopping {
				panic(v) // the scheduler is unwinding the task: let it
			}
			s.onTaskPanic(t.t, v, debug.Stack())
		}
	}()
	fn(t)
}

// spawnBackground starts fn as the background task of h once the loop runs. Until fn
// begins h is pending: if the loop never runs it, endPending ends it.
func (s *Server) spawnBackground(h *TaskHandle, fn func(t *Task)) {
	s.pend(h)
	err := s.post(func() {
		if h.run.stopped || s.life.load() >= stateStopping {
			s.unpend(h)
			h.end()
			return
		}
		bt := &Task{srv: s, ops: loopTask{}, name: h.name}
		h.run.bt = bt
		bt.t = s.sched.Spawn(func(t *scheduler.Task) {
			defer func() {
				h.run.bt = nil
				bt.release()
				if s.acct.on {
					s.acct.loop.TaskFinished()
				}
				h.end()
			}()
			s.unpend(h)
			s.publishTask(t, &bt.name)
			fn(bt)
		}, bt)
		bt.t.SetLabel(h.name)
		if s.acct.on {
			s.acct.loop.TaskStarted()
		}
		s.postPump()
	})
	if err != nil {
		h.end()
	}
}

// pend records h as a task that has not begun: until its function runs, the stop ends it
// (endPending). A task spawned in the loop's last turns (from an OnDrain hook, when the
// drain ends in that turn) is dropped by the scheduler's Close without running, and its
// deferred end with it. Safe for concurrent use.
func (s *Server) pend(h *TaskHandle) {
	s.pendingMu.Lock()
	s.pending[h] = struct{}{}
	s.pendingMu.Unlock()
}

// unpend records that h's task began, or ended before it could. Safe for concurrent use.
func (s *Server) unpend(h *TaskHandle) {
	s.pendingMu.Lock()
	delete(s.pending, h)
	s.pendingMu.Unlock()
}

// endPending ends the handles of background tasks that were posted but will never start:
// the door has closed. Safe for concurrent use.
func (s *Server) endPending() {
	s.pendingMu.Lock()
	hs := s.pending
	s.pending = map[*TaskHandle]struct{}{}
	s.pendingMu.Unlock()
	for h := range hs {
		h.end()
	}
}
