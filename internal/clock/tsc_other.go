//go:build !amd64

package clock

// rdtsc is not available off amd64; tscSupported keeps it from being called.
func rdtsc() int64 { return 0 }

func tscSupported() bool { return false }
