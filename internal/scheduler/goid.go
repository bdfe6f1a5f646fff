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
	} else if g != s.loopGID {
		panic(fmt.Sprintf("scheduler: Run called from goroutine %d, but the loop is goroutine %d: only the loop goroutine may run tasks", g, s.loopGID))
	}
	lo, hi := min(s.spLo, sp), max(s.spLo+s.spSpan, sp)
	if s.spLo == 0 || hi-lo > maxFrameSpread {
		lo, hi = sp, sp
	}
	s.spLo, s.spSpan = lo, hi-lo
}
