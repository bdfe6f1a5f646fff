//go:build !amd64

package clock

// hasTSC reports that there is no rdtsc here.
const hasTSC = false

// rdtsc is not available off amd64; hasTSC and tscSupported keep it from being called.
func rdtsc() int64 { return 0 }

func tscSupported() bool { return false }
