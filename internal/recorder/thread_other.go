//go:build !linux

package recorder

import (
	"errors"
	"time"
)

var errNoThreadClock = errors.New("recorder: per-thread clocks are read only on Linux")

// gettid returns 0: thread ids are read only on Linux. Any goroutine.
func gettid() int { return 0 }

// threadCPUOf returns an error: per-thread CPU clocks are read only on Linux. Any
// goroutine.
func threadCPUOf(tid int) (time.Duration, error) { return 0, errNoThreadClock }

// threadStateOf returns an error: thread states are read only on Linux. Any goroutine.
func threadStateOf(tid int) (byte, error) { return 0, errNoThreadClock }
