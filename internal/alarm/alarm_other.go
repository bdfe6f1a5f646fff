//go:build !linux

package alarm

import (
	"errors"
	"time"
)

// open leaves the alarm a runtime timer: there is no timerfd off Linux.
func (a *Alarm) open() {}

func (a *Alarm) set(time.Duration) error { return errors.New("alarm: no timerfd") }

func (a *Alarm) shutdown() {}
