package scheduler

import (
	"fmt"
	"runtime"
	"unsafe"
)

// goroutineID returns the current goroutine's id, parsed from runtime.Stack ("goroutine N
// [..."). It formats a stack trace, far too slow for a switch: used off the hot path only.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) < len(prefix) {
		return 0
	}
	var id uint64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}

// checkLoop panics unless the caller is the loop goroutine (the first caller of Run).
//
// The fast path compares the address of the caller's stack frame with the range of frame
// addresses already confirmed to belong to the loop: another goroutine's frames live in
// another stack, which cannot overlap the loop's live stack. When the frame is outside the
// range (first call, a deeper call site, or the loop's stack was moved when it grew) the
// goroutine id is checked exactly and the range updated.
func (s *Scheduler) checkLoop() {
	var marker byte
	// sp in [spLo, spLo+spSpan], written so that checkLoop is cheap enough to be inlined.
	if sp := uintptr(unsafe.Pointer(&marker)); sp-s.spLo > s.spSpan {
		s.checkLoopSlow(sp)
	}
}

// maxFrameSpread bounds the range of confirmed frame addresses; it stays well below the
// smallest goroutine stack (8 KiB on 64-bit) so that it never spans two stacks.
const maxFrameSpread = 2048

func (s *Scheduler) checkLoopSlow(sp uintptr) {
	g := goroutineID()
	if s.loopGID == 0 {
		s.loopGID = g
		s.addGID(g)
	} else if g != s.loopGID {
		panic(fmt.Sprintf("scheduler: Run called from goroutine %d, but the loop is goroutine %d: only the loop goroutine may run tasks", g, s.loopGID))
	}
	lo, hi := min(s.spLo, sp), max(s.spLo+s.spSpan, sp)
	if s.spLo == 0 || hi-lo > maxFrameSpread {
		lo, hi = sp, sp
	}
	s.spLo, s.spSpan = lo, hi-lo
}

// BindLoop records the calling goroutine as the loop's, as the first Run would: for a loop
// that runs other code (posted functions, callbacks) before its first Run, so that OnLoop
// knows it from the start. It panics when called from another goroutine than an earlier
// Run or BindLoop. Loop-confined.
func (s *Scheduler) BindLoop() {
	var marker byte
	s.checkLoopSlow(uintptr(unsafe.Pointer(&marker)))
}

// addGID records g as one of the loop's goroutines (the loop's own, or a coroutine's).
func (s *Scheduler) addGID(g uint64) {
	s.gidsMu.Lock()
	if s.gids == nil {
		s.gids = map[uint64]struct{}{}
	}
	s.gids[g] = struct{}{}
	s.gidsMu.Unlock()
}

// dropGID forgets a coroutine's goroutine when the coroutine ends.
func (s *Scheduler) dropGID(g uint64) {
	s.gidsMu.Lock()
	delete(s.gids, g)
	s.gidsMu.Unlock()
}

// OnLoop reports whether the caller runs on the loop: the loop goroutine itself (a
// callback, a posted function, a timer) or a task's coroutine (a handler, a background
// task, a tick). It reads the caller's goroutine id from a stack trace (about a
// microsecond): for checks at entry points that are not on a hot path (making a room), or
// in invariants builds. Any goroutine.
func (s *Scheduler) OnLoop() bool {
	g := goroutineID()
	s.gidsMu.Lock()
	_, ok := s.gids[g]
	s.gidsMu.Unlock()
	return ok
}
