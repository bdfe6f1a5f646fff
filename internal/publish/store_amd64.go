//go:build amd64 && !race

package publish

// plainStore reports that Store is the plain MOV of store_amd64.s (see the package doc).
const plainStore = true

// store is a plain 8-byte store of v to *p, in assembly so that the compiler can neither
// drop it nor move memory operations across it; x86-TSO keeps it in order with the
// writer's other stores.
//
//go:noescape
func store(p *int64, v int64)
