package loop

import "sync/atomic"

// serverState is where a Server is in its life. It only moves forward, and every move goes
// through lifecycle.move, a compare-and-swap: two goroutines racing for a transition (a
// Shutdown racing ListenAndServe, two Shutdowns) see exactly one winner.
//
//	new ──ListenAndServe──▶ starting ──loop reachable──▶ serving ──Shutdown──▶ draining
//	 │                        │  │                          │                      │
//	 │                        │  └──Shutdown──▶ draining    │ engine stopped       │ drained, or
//	 │                        │                             │ by itself            │ deadline passed
//	 │                        └──start failed───────────────┴──────────▶ stopping ◀┘
//	 └──Shutdown or Close before start──▶ stopped ◀──ListenAndServe returns── stopping
type serverState int32

const (
	// stateNew: created; routes and middleware may be added. Next: starting, or stopped
	// (Shutdown or Close before ListenAndServe: nothing to drain).
	stateNew serverState = iota
	// stateStarting: ListenAndServe was called; the loop is not reachable yet. Next:
	// serving, draining (Shutdown during start: the drain begins once the loop is up), or
	// stopping (the engine failed to start).
	stateStarting
	// stateServing: the loop runs posted functions and accepts connections; Ready is
	// closed. Next: draining, or stopping (the engine stopped without a Shutdown: an error).
	stateServing
	// stateDraining: Shutdown was called: no new work is admitted, work in flight
	// finishes. Next: stopping.
	stateDraining
	// stateStopping: the loop is unwinding: the scheduler is closed (parked tasks are
	// cancelled and their deferred functions run), connections are closing. Next: stopped.
	stateStopping
	// stateStopped: final. Done is closed once ListenAndServe has returned (at once, for a
	// server stopped before it started).
	stateStopped
)

var serverStateNames = [...]string{"new", "starting", "serving", "draining", "stopping", "stopped"}

// String returns the state's name, e.g. "serving".
func (st serverState) String() string {
	if int(st) < len(serverStateNames) {
		return serverStateNames[st]
	}
	return "serverState(?)"
}

// serverTransitions lists every allowed move; lifecycle.move refuses any other.
var serverTransitions = map[serverState][]serverState{
	stateNew:      {stateStarting, stateStopped},
	stateStarting: {stateServing, stateDraining, stateStopping},
	stateServing:  {stateDraining, stateStopping},
	stateDraining: {stateStopping},
	stateStopping: {stateStopped},
}

// allowedTransition reports whether from → to is in serverTransitions.
func allowedTransition(from, to serverState) bool {
	for _, t := range serverTransitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// lifecycle holds a Server's state. Safe for concurrent use.
type lifecycle struct{ v atomic.Int32 }

// load returns the current state.
func (l *lifecycle) load() serverState { return serverState(l.v.Load()) }

// move changes the state from from to to, reporting whether this call made the move (false
// if the state was not from). It panics on a transition serverTransitions does not list:
// that is a bug in the server, never a user error.
func (l *lifecycle) move(from, to serverState) bool {
	if !allowedTransition(from, to) {
		panic("loop: invalid server state transition " + from.String() + " → " + to.String())
	}
	return l.v.CompareAndSwap(int32(from), int32(to))
}

// advance moves the state to to from whichever earlier state allows it, reporting the
// state it left and whether it moved (false if the state was already at or past to, or no
// transition leads there from the current state).
func (l *lifecycle) advance(to serverState) (from serverState, moved bool) {
	for {
		from = l.load()
		if from >= to || !allowedTransition(from, to) {
			return from, false
		}
		if l.v.CompareAndSwap(int32(from), int32(to)) {
			return from, true
		}
	}
}

// draining reports whether Shutdown has begun (draining or later): responses written from
// now on close their connection.
func (l *lifecycle) draining() bool { return l.load() >= stateDraining }
