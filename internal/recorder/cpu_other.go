//go:build !linux

package recorder

import "time"

// ThreadCPUSupported reports whether ThreadCPU measures anything on this platform.
const ThreadCPUSupported = false

// ThreadCPU returns 0: the thread CPU clock is read only on Linux. Any goroutine.
func ThreadCPU() time.Duration { return 0 }
