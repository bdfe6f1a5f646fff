package clock

import (
	"bytes"
	"os"
)

// hasTSC reports that rdtsc reads the time-stamp counter.
const hasTSC = true

// rdtsc reads the time-stamp counter. It does not serialise: the reading may move by up to
// rdtscSkew ticks against the instructions around it, which the accuracy bound counts.
func rdtsc() int64

// clocksourcePath is where Linux names the clocksource it keeps time with.
const clocksourcePath = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

// tscSupported reports whether the kernel keeps time with the TSC. Linux chooses the TSC
// only after checking that it is invariant (constant rate, running in idle states) and
// synchronised across CPUs, and switches away from it when its watchdog finds it
// drifting; elsewhere (another kernel, a VM with kvm-clock) the OS clock is used.
func tscSupported() bool {
	b, err := os.ReadFile(clocksourcePath)
	return err == nil && string(bytes.TrimSpace(b)) == "tsc"
}
