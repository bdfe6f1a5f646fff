package loop

import (
	"fmt"
	"runtime/debug"
)

// OnStart registers fn to run on every event loop of the server (Config.Shards of them;
// one by default) once that loop runs, given the loop: before Ready is closed and before
// the loop's first connection is accepted, so what fn makes is there for the first
// request. It is the place for what must be made on a loop at boot: rooms
// (room.New(l, ...)), background tasks (l.Go), a feature's per-loop state
// (l.Value), and OnDrain hooks. With shards, fn runs once per loop, each on its own
// loop: per-loop state needs no more; work meant once per process checks l.Index() == 0.
// Functions run in registration order. An error or a panic from fn stops the server
// before it serves: ListenAndServe returns an error wrapping it (naming the loop), and
// the later functions do not run. If Shutdown was called before the loop ran, they do not
// run at all. Call it before ListenAndServe, from one goroutine.
func (s *Server) OnStart(fn func(l *Loop) error) {
	if fn == nil {
		panic("loop: OnStart(nil)")
	}
	if s.life.load() != stateNew {
		panic("loop: OnStart called after ListenAndServe")
	}
	if s.shards == nil {
		s.onStart = append(s.onStart, fn)
		return
	}
	for _, sh := range s.shards.all {
		sh.onStart = append(sh.onStart, fn)
	}
}

// runOnStart runs the OnStart functions on the loop, from the control connection's
// OnOpen, before Ready and the first accept. It reports false, with the server stopping
// and ListenAndServe's error recorded, if one failed. Loop-confined.
func (s *Server) runOnStart() bool {
	hooks := s.onStart
	s.onStart = nil
	if s.life.load() >= stateDraining { // a Shutdown came first: nothing will be served
		return true
	}
	for i, fn := range hooks {
		if err := s.callOnStart(fn); err != nil {
			err = fmt.Errorf("OnStart function %d of %d on loop %d: %w", i+1, len(hooks), s.shardIdx, err)
			s.startErr.Store(&err)
			s.log.Error("loop: an OnStart function failed; stopping without serving", "err", err)
			s.requestStop()
			return false
		}
	}
	return true
}

// callOnStart runs one OnStart function, turning a panic into an error.
func (s *Server) callOnStart(fn func(*Loop) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v\n\n%s", v, debug.Stack())
		}
	}()
	return fn(s.loopRef)
}
