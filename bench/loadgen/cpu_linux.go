package loadgen

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// UsableCPUs returns how many CPUs this process may run on: its affinity mask, bounded by
// GOMAXPROCS.
func UsableCPUs() int {
	n := runtime.GOMAXPROCS(0)
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil {
		if c := set.Count(); c > 0 && c < n {
			n = c
		}
	}
	return n
}
