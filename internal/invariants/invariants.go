// Package invariants holds the checks that are too costly for a production build but catch
// misuse that would otherwise be a silent data race: a loop-confined object (a
// ratelimit.Limiter, a room) used from a goroutine that is not its loop's. They run when
// the build has the tag invariants or race (go test -race turns them on), as in pebble.
//
// A check is written so that the compiler drops it when Enabled is false:
//
//	if invariants.Enabled {
//		invariants.Assert(r.Loop().OnLoop(), "room: Room.Stats called off the room's loop")
//	}
package invariants

import "fmt"

// Assert panics with "invariant violated: " and the formatted message when ok is false.
// Call it under an Enabled check, so that neither the condition nor the arguments cost
// anything in a normal build. Any goroutine.
func Assert(ok bool, format string, args ...any) {
	if !ok {
		panic(Violation{Msg: fmt.Sprintf(format, args...)})
	}
}

// Violation is the value Assert panics with: a recover (a handler's containment, a test)
// can tell a broken invariant from other panics.
type Violation struct {
	Msg string
}

// Error returns the message, prefixed with "invariant violated: ".
func (v Violation) Error() string { return "invariant violated: " + v.Msg }
