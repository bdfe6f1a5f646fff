package loop

import (
	"time"

	"github.com/batonrt/baton/internal/alarm"
	"github.com/batonrt/baton/scheduler"
)

// newAlarm makes the scheduler's alarm (scheduler.Config.NewAlarm) unless
// Config.RuntimeTimers: a timerfd on Linux, so
// that a timer due while the loop is idle (a room's next tick, a Sleep) fires within
// microseconds of its deadline rather than up to a millisecond after it, as Go's runtime
// timers do (docs/rooms.md, "The alarm"). Off Linux it is a runtime timer. A variable so
// that BenchmarkTickLateness can compare it with the runtime timer.
var newAlarm = func(fire func()) scheduler.Alarm { return alarm.New(fire) }

// timerSlack is scheduler.Config.TimerSlack: when another timer is due within it after the
// earliest, the alarm goes off that much after the earliest and they fire in one wake-up
// of the loop. Half of the 1 ms the rooms' tick lateness must stay under, at most 2,000
// wake-ups a second however dense the deadlines (docs/rooms.md, "The alarm"). A variable
// for BenchmarkTickLateness.
var timerSlack = 500 * time.Microsecond

// alarmFor is scheduler.Config.NewAlarm for cfg: newAlarm, or nil (the scheduler's runtime
// timer) with Config.RuntimeTimers.
func alarmFor(cfg Config) func(fire func()) scheduler.Alarm {
	if cfg.RuntimeTimers {
		return nil
	}
	return newAlarm
}

// slackFor is scheduler.Config.TimerSlack for cfg: timerSlack, or 0 with
// Config.RuntimeTimers (the runtime timer's millisecond rounding coalesces by itself).
func slackFor(cfg Config) time.Duration {
	if cfg.RuntimeTimers {
		return 0
	}
	return timerSlack
}
