//go:build !linux

package accounting

import (
	"errors"
	"time"
)

var errNoThreadClock = errors.New("accounting: per-thread clocks are read only on Linux")

// Gettid returns 0: thread ids are read only on Linux. Any goroutine.
func Gettid() int { return 0 }

// ThreadCPUOf returns an error: per-thread CPU clocks are read only on Linux. Any
// goroutine.
func ThreadCPUOf(tid int) (time.Duration, error) { return 0, errNoThreadClock }

// ThreadStateOf returns an error: thread states are read only on Linux. Any goroutine.
func ThreadStateOf(tid int) (byte, error) { return 0, errNoThreadClock }
