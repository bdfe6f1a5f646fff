//go:build !linux

package loadgen

import "runtime"

// UsableCPUs returns how many CPUs this process may run on: GOMAXPROCS (the affinity mask
// is read on Linux only).
func UsableCPUs() int { return runtime.GOMAXPROCS(0) }
