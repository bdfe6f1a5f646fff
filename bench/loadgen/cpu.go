package loadgen

import (
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ProcessCPU returns the CPU time (user + system) this process has used so far.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

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
