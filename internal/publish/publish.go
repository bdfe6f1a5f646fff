// Package publish lets one goroutine publish words to others at the price of a plain store.
//
// sync/atomic's stores are sequentially consistent: on amd64 each is a locked exchange
// (XCHG), which also drains the store buffer. The scheduler publishes up to three words per
// task switch for the stall detector, which needs only to see them in the order they were
// stored, never torn. On amd64 without the race detector, Int64.Store is therefore a plain
// 8-byte MOV written in assembly (store_amd64.s), and Int64.Load is sync/atomic's load (a
// plain MOV on amd64 too). That is sound because:
//
//   - the word is 8-byte aligned (checked at compile time below), and an aligned 8-byte
//     MOV is single-copy atomic on amd64, so a load sees either the old or the new value;
//   - x86-TSO keeps stores in order with other stores, and loads with other loads, so a
//     reader that loads b and then a sees a at least as new as the b it saw, if the writer
//     stored a before b;
//   - the compiler cannot reorder the store either: an assembly function is never inlined,
//     and the compiler moves no memory operation across a call; sync/atomic's loads keep
//     their order too.
//
// The precedent is the Go runtime's publicationBarrier (runtime/asm_amd64.s), which the
// memory allocator calls to order the stores that initialise an object before the store
// that publishes it: on amd64 it is an empty assembly function, a compiler barrier only,
// because the CPU already keeps stores in order. (The runtime's atomic StoreRel64 is no
// precedent: on amd64 it jumps to Store64, which is an XCHG, not a plain MOV.)
//
// The race detector cannot see stores made in assembly, so with -race (and on every other
// architecture) Store is sync/atomic's store to the same word; the race detector then sees
// the writes and their order.
package publish

import (
	"sync/atomic"
	"unsafe"
)

// Int64 is a word that one goroutine stores and any goroutine loads. Store may be called
// by one goroutine at a time (the loop); Load from any goroutine. A Load sees the stores
// of the writer in the order they were made. The zero value is 0 and ready to use; like
// sync/atomic's types, it must not be copied after first use (go vet reports copies).
type Int64 struct {
	// The zero-length array makes Int64 8-byte aligned on every architecture, as
	// sync/atomic aligns its own 64-bit types (its alignment is all this relies on), and
	// lets go vet's copylocks check report copies. It occupies no memory.
	_ [0]atomic.Int64
	v int64 // stored by store (a plain MOV or sync/atomic), loaded with sync/atomic
}

// The word must be 8-byte aligned for both the plain store and sync/atomic's 64-bit
// operations on 32-bit architectures: this constant does not compile otherwise.
const _ = 1 / (unsafe.Alignof(Int64{}) / 8)

// Store publishes v. One writing goroutine at a time (loop-confined).
func (w *Int64) Store(v int64) { store(&w.v, v) }

// Load returns the value stored last. Any goroutine.
func (w *Int64) Load() int64 { return atomic.LoadInt64(&w.v) }
