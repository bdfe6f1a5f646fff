// Package publish lets one goroutine publish words to others at the price of a plain store.
//
// sync/atomic's stores are sequentially consistent: on amd64 a locked exchange (XCHG),
// about 4.5 ns on its own and more behind a full store buffer, which it drains. The
// scheduler publishes up to three words per task switch for the stall detector, which
// only needs to see them in the order they were stored. amd64 keeps stores in order with
// stores and loads with loads, so a plain store is enough there: it is what the Go
// runtime's own release store is on amd64. Store is written in assembly so that the
// compiler can neither reorder nor drop it; on other architectures it is sync/atomic's.
package publish

import "sync/atomic"

// Int64 is a word that one goroutine stores and any goroutine loads. Store may be called
// by one goroutine at a time (the loop); Load from any goroutine. A Load sees the stores
// of the writer in the order they were made. The zero value is 0 and ready to use; like
// sync/atomic's types, it must not be copied after first use.
type Int64 struct {
	v atomic.Int64 // Load is sync/atomic's; Store writes its word directly on amd64
}

// Store publishes v. One writing goroutine at a time (loop-confined).
func (w *Int64) Store(v int64) { store(&w.v, v) }

// Load returns the value stored last. Any goroutine.
func (w *Int64) Load() int64 { return w.v.Load() }
