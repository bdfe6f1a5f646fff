package loop

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/batonrt/baton/internal/scheduler"
)

// Loop is one of a Server's event loops (Config.Shards of them; one by default): a handle
// for code that must reach that loop (post to it, start a task or make a room on it, read
// its vitals). Get it from Server.Loops, Server.Loop, Server.LoopFor, or from a task with
// Task.Loop. Its methods are safe for concurrent use.
type Loop struct {
	srv *Server
}

// Loops returns every event loop of the server, in index order (Config.Shards of them).
// Any goroutine.
func (s *Server) Loops() []*Loop {
	if s.shards == nil {
		return []*Loop{s.loopRef}
	}
	out := make([]*Loop, len(s.shards.all))
	for i, sh := range s.shards.all {
		out[i] = sh.loopRef
	}
	return out
}

// loopCount is how many event loops the server runs.
func (s *Server) loopCount() int {
	if s.shards == nil {
		return 1
	}
	return len(s.shards.all)
}

// Loop returns loop i, for i in [0, len(Loops())). It panics when i is out of range, like a
// slice index. Any goroutine.
func (s *Server) Loop(i int) *Loop {
	if s.shards == nil {
		if i != 0 {
			panic(fmt.Sprintf("loop: Loop(%d) out of range [0:1]", i))
		}
		return s.loopRef
	}
	if i < 0 || i >= len(s.shards.all) {
		panic(fmt.Sprintf("loop: Loop(%d) out of range [0:%d]", i, len(s.shards.all)))
	}
	return s.shards.all[i].loopRef
}

// LoopFor maps key (a room id, a player id) to one of the server's loops: FNV-1a of key
// modulo the number of loops. The same key always maps to the same loop while the number
// of loops stays the same; changing Config.Shards moves most keys. Any goroutine.
func (s *Server) LoopFor(key string) *Loop {
	n := s.loopCount()
	if n == 1 {
		return s.Loop(0)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return s.Loop(int(h.Sum32() % uint32(n)))
}

// Index returns the loop's index in [0, len(Server.Loops())). Any goroutine.
func (l *Loop) Index() int { return l.srv.shardIdx }

// Post runs fn on this loop soon: fn may touch the loop's confined state (its rooms, its
// handlers' maps), resolve its Futures and start its tasks, and must not block. Functions
// posted from one goroutine, or from one task of any loop, run in the order they were
// posted. It returns ErrServerClosed once the loop no longer runs posted functions. Any
// goroutine.
func (l *Loop) Post(fn func()) error { return l.srv.post(fn) }

// Server returns the Server the loop belongs to: the process, as New returned it. Any
// goroutine.
func (l *Loop) Server() *Server {
	if l.srv.shards != nil {
		return l.srv.shards.all[0]
	}
	return l.srv
}

// Loop returns the loop the task runs on: for a request, the loop its connection landed
// on; nil for a zero Task. From the task itself (Ctx.Loop in a handler).
func (t *Task) Loop() *Loop {
	if t.srv == nil {
		return nil // a zero Task: no task at all
	}
	return t.srv.loopRef
}

// OnLoop reports whether the caller runs on this loop: a handler in single-thread mode, a
// background task, a room's tick, a function passed to Post, a callback. A feature checks
// it at the entry points of its loop-confined objects (making a room), where calling from
// another goroutine would be a data race; it reads the caller's goroutine id from a stack
// trace (about a microsecond), so it belongs at such entry points, not on a hot path. Any
// goroutine.
func (l *Loop) OnLoop() bool { return l.srv.sched.OnLoop() }

// Current returns the task running now on the loop (a request's handler or a background
// task), or nil outside any task: a function passed to Post, a callback, another
// goroutine's call (a multi-thread handler's). A feature whose loop-confined methods park
// "the calling task" (loop/ws's writes) finds it here. Loop-confined.
func (l *Loop) Current() *Task {
	t := l.srv.sched.Current()
	if t == nil {
		return nil
	}
	switch a := t.Arg().(type) {
	case *Ctx:
		return &a.Task
	case *Task:
		return a
	}
	return nil
}

// Now returns the loop's clock now: the clock the scheduler and accounting use, cheap to
// read on the loop, where a handler (single-thread mode) or a task of the loop takes it
// with c.Loop().Now(); off the loop (a multi-thread handler) read time.Now. Loop-confined.
func (l *Loop) Now() time.Time { return l.srv.timeAt(l.srv.nanotime()) }

// Phase returns the server's lifecycle phase as Vitals.Phase names it: "starting",
// "serving", "draining" or "stopped". Cheaper than Vitals (one atomic load). Any goroutine.
func (l *Loop) Phase() string {
	switch st := l.srv.life.load(); {
	case st < stateServing:
		return "starting"
	case st >= stateStopping:
		return "stopped"
	case st >= stateDraining:
		return "draining"
	}
	return "serving"
}

// start starts fn as a background task on this loop now: Go's path on the loop, without
// the round trip through Post, so the handle's Task is there at once; its first slice runs
// in this loop turn's pump. Loop-confined.
func (l *Loop) start(name string, fn func(t *Task)) *TaskHandle {
	if fn == nil {
		panic("loop: Go(" + name + ", nil)")
	}
	s := l.srv
	h := s.newHandle(name)
	if s.life.load() >= stateStopping {
		h.end()
		return h
	}
	s.pend(h) // until fn begins: a task the stop drops unrun is ended by endPending
	bt := s.spawnOnLoop(h.name, func(bt *Task) {
		s.unpend(h)
		defer func() {
			h.run.bt = nil
			h.end()
		}()
		fn(bt)
	})
	h.run.bt = bt
	return h
}

// Value returns the value stored under key on this loop: state a feature keeps per loop
// (a room table), found from any task of the loop without a lock. When none is stored and
// init is not nil, it stores what init returns and returns that (state made on first
// use); with init nil it returns nil. Keys should be of a type of the feature's own, as
// with context.WithValue. Loop-confined.
func (l *Loop) Value(key any, init func() any) any {
	s := l.srv
	if v, ok := s.values[key]; ok || init == nil {
		return v
	}
	v := init()
	if s.values == nil {
		s.values = map[any]any{}
	}
	s.values[key] = v
	return v
}

// spawnOnLoop starts fn as a background task named name on the loop now, as Loop.Go
// does once its posted start runs. Loop-confined.
func (s *Server) spawnOnLoop(name string, fn func(t *Task)) *Task {
	bt := &Task{srv: s, ops: loopTask{}, name: name}
	bt.t = s.sched.Spawn(func(t *scheduler.Task) {
		defer func() {
			bt.release()
			if s.acct.on {
				s.acct.loop.TaskFinished()
			}
		}()
		s.publishTask(t, &bt.name)
		fn(bt)
	}, bt)
	bt.t.SetLabel(name)
	if s.acct.on {
		s.acct.loop.TaskStarted()
	}
	s.postPump()
	return bt
}
