//go:build !invariants && !race

package invariants

// Enabled is false in a normal build: the checks compile to nothing.
const Enabled = false
