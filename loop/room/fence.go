//go:build !baton_nofencing

package room

// fencing says whether rooms check their ownership before each tick. Only the test build
// with the tag baton_nofencing turns it off, to show that the no-twins test catches a
// build without the check (docs/cluster.md).
const fencing = true
