package scheduler

import "time"

// Alarm wakes the scheduler when its earliest timer is due. The scheduler keeps one alarm
// for the earliest deadline of its timer heap and re-arms it only when that deadline moves
// earlier; when the alarm goes off, its fire function (given to Config.NewAlarm) hands the
// work to the loop through Config.Post. The default is a runtime timer (time.AfterFunc);
// package loop supplies a more precise one on Linux (see docs/rooms.md, "The alarm").
//
// An alarm may fire late (that lateness is what a timer's lateness is made of when the
// loop is idle) and may fire spuriously (the scheduler then finds nothing due and re-arms,
// so a fire of an earlier setting that was under way when Arm ran is harmless). Apart from
// that it must not fire before the time its latest Arm gave, and it must fire at least
// once after each Arm unless re-armed or closed first.
type Alarm interface {
	// Arm (re)sets the alarm to call its fire function once, d from now (at once if
	// d <= 0), replacing any earlier setting. Called on the loop goroutine.
	Arm(d time.Duration)
	// Close disarms the alarm for good and releases what it holds (goroutines, file
	// descriptors) before returning; a fire already under way may still call the fire
	// function (the scheduler ignores it once closed). Arm is not called afterwards.
	// Called on the loop goroutine, once, from Scheduler.Close.
	Close()
}

// runtimeAlarm is the default Alarm: a runtime timer. Go's runtime sleeps in its netpoller
// with a millisecond timeout when idle (runtime/netpoll_epoll.go rounds a sub-millisecond
// wait up to 1 ms and truncates longer ones to whole milliseconds), so it fires up to about
// a millisecond after the deadline.
type runtimeAlarm struct {
	fire func()
	tmr  *time.Timer
}

// newRuntimeAlarm is the default Config.NewAlarm.
func newRuntimeAlarm(fire func()) Alarm { return &runtimeAlarm{fire: fire} }

func (a *runtimeAlarm) Arm(d time.Duration) {
	if a.tmr == nil {
		a.tmr = time.AfterFunc(d, a.fire)
		return
	}
	a.tmr.Reset(d)
}

func (a *runtimeAlarm) Close() {
	if a.tmr != nil {
		a.tmr.Stop()
	}
}
