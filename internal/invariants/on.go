//go:build invariants || race

package invariants

// Enabled is true in builds with the tag invariants or race: the checks run.
const Enabled = true
