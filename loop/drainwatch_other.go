//go:build !linux

package loop

import (
	"errors"
	"fmt"
	"runtime"
)

// hasDrainPoller says whether the platform has a drainPoller: not off Linux.
const hasDrainPoller = false

// drainPoller has no implementation off Linux (no epoll; a kqueue one is not written):
// newDrainPoller always fails, so the drain watch is unavailable and streams parked on
// backpressure poll (see drainWatch). Its methods are never called.
type drainPoller struct{}

// errNoDrainPoller is what newDrainPoller returns off Linux.
var errNoDrainPoller = fmt.Errorf("no epoll on %s: %w", runtime.GOOS, errors.ErrUnsupported)

func newDrainPoller() (*drainPoller, error) { return nil, errNoDrainPoller }

func (*drainPoller) run(*drainWatch) {}

func (*drainPoller) arm(int32, int32) error { return errNoDrainPoller }

func (*drainPoller) disarm(int32) {}

// stop does nothing: there is no goroutine. Safe for concurrent use.
func (*drainPoller) stop() {}
