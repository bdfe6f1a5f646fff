package publish

import "sync/atomic"

// store is a plain 8-byte store to p's word (an atomic.Int64 is its word, at offset 0), in
// assembly: release order comes with amd64's memory model, and the compiler cannot move
// memory operations across the call.
//
//go:noescape
func store(p *atomic.Int64, v int64)
