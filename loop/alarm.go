package loop

import (
	"runtime"
	"time"

	"github.com/batonrt/baton/internal/alarm"
	"github.com/batonrt/baton/internal/scheduler"
)

// newAlarm makes the scheduler's alarm (scheduler.Config.NewAlarm) unless
// Config.RuntimeTimers: a timerfd on Linux, so
// that a timer due while the loop is idle (a room's next tick, a Sleep) fires within
// microseconds of its deadline rather than up to a millisecond after it, as Go's runtime
// timers do (docs/rooms.md, "The alarm"). Off Linux it is a runtime timer. spare reports
// that GOMAXPROCS leaves a P beside the event loops: then an idle thread waits in the
// netpoller and sees the timerfd at once, and the alarm does without the runtime-timer
// backstop, whose resets cost a thread wake-up per setting. A variable so that
// BenchmarkTickLateness can compare it with the runtime timer.
var newAlarm = func(fire func(), spare bool) scheduler.Alarm {
	if spare {
		return alarm.NewNoBackstop(fire)
	}
	return alarm.New(fire)
}

// timerSlack is scheduler.Config.TimerSlack: the alarm goes off at the earliest deadline,
// but not sooner than timerSlack after it last went off, so dense deadlines share wake-ups.
// Half of the 1 ms the rooms' tick lateness must stay under, at most 2,000 wake-ups a
// second however dense the deadlines (docs/rooms.md, "The alarm"). A variable for
// BenchmarkTickLateness.
var timerSlack = 500 * time.Microsecond

// alarmFor is scheduler.Config.NewAlarm for cfg: newAlarm, or nil (the scheduler's runtime
// timer) with Config.RuntimeTimers. The alarm is made when the first timer is armed,
// after ListenAndServe set GOMAXPROCS (procs.go), so whether a P is spare is judged then.
func alarmFor(cfg Config) func(fire func()) scheduler.Alarm {
	if cfg.RuntimeTimers {
		return nil
	}
	loops := max(cfg.Shards, 1)
	return func(fire func()) scheduler.Alarm { return newAlarm(fire, runtime.GOMAXPROCS(0) > loops) }
}

// slackFor is scheduler.Config.TimerSlack for cfg: timerSlack, or 0 with
// Config.RuntimeTimers (the runtime timer's millisecond rounding coalesces by itself).
func slackFor(cfg Config) time.Duration {
	if cfg.RuntimeTimers {
		return 0
	}
	return timerSlack
}
