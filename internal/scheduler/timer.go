package scheduler

import (
	"runtime/debug"
	"time"
)

// timer is an entry of the loop's timer heap: a task's Sleep or timed wait, or an AfterFunc
// callback.
type timer struct {
	when int64  // deadline, ns since the scheduler's epoch
	seq  uint64 // insertion order: ties fire FIFO
	idx  int    // index in the heap, -1 when not in it
	task *Task  // Sleep timer: the task to wake
	fn   func() // AfterFunc timer: the callback
}

// Timer is a callback scheduled on the loop by AfterFunc. Loop-confined.
type Timer struct {
	s  *Scheduler
	tm timer
}

// AfterFunc runs fn on the loop (not in a task: fn must not park) once d has passed, from
// Run or from the timer function the scheduler posts. A panic in fn is recovered and
// reported to Config.OnPanic with a nil task. fn must not call runtime.Goexit: it runs on
// the loop goroutine itself, not in a coroutine, so nothing can contain the Goexit and the
// loop goroutine exits (after OnPanic received ErrGoexit). Spawn a task for code that may.
// After Close it returns a timer that never fires. Loop-confined.
func (s *Scheduler) AfterFunc(d time.Duration, fn func()) *Timer {
	t := &Timer{s: s, tm: timer{idx: -1, fn: fn}}
	t.Reset(d)
	return t
}

// Stop cancels the timer in O(log n) and reports whether it was pending. Loop-confined.
func (t *Timer) Stop() bool {
	if t.tm.idx < 0 {
		return false
	}
	t.s.delTimer(&t.tm)
	return true
}

// Reset (re)schedules the timer to fire once d from now, and reports whether it was pending.
// After Close it does nothing. Loop-confined.
func (t *Timer) Reset(d time.Duration) bool {
	active := t.Stop()
	s := t.s
	if s.closed {
		return active
	}
	now := s.clock()
	t.tm.when = now + int64(max(d, 0))
	s.addTimer(&t.tm, now)
	return active
}

// Every starts a background task that runs fn on the loop every d at a fixed rate: the
// k-th tick is due at start + k*d, where start is the time of the call. If a tick (or the
// loop) runs late past later deadlines, those ticks are skipped rather than run in a burst:
// the next tick is the first deadline still in the future. fn receives the Every task
// itself and may park. A panic in fn is reported to Config.OnPanic and the ticks go on; a
// runtime.Goexit in fn ends the task (see ErrGoexit). The task ends when cancelled
// (Scheduler.Cancel, CancelRef: the tick in progress finishes, and no tick starts after
// it) or at Close. The *Task is recycled when it ends: to stop it later, keep its Ref and
// use CancelRef. It panics if d <= 0 or after
// Close. Loop-confined.
func (s *Scheduler) Every(d time.Duration, fn func(t *Task)) *Task {
	if d <= 0 {
		panic("scheduler: Every with a non-positive interval")
	}
	if fn == nil {
		panic("scheduler: Every with a nil function")
	}
	if s.closed {
		panic("scheduler: Spawn after Close")
	}
	start := s.clock()
	return s.Spawn(func(t *Task) { s.every(t, start, int64(d), fn) }, nil)
}

func (s *Scheduler) every(t *Task, start, d int64, fn func(*Task)) {
	next := start + d
	for {
		if t.sleepUntil(next) != nil || t.err != nil { // no tick once cancelled
			return
		}
		s.tick(t, fn)
		next = nextTick(next, s.clock(), d)
	}
}

// nextTick returns the first deadline prev + k*d (k >= 1) that is after now.
func nextTick(prev, now, d int64) int64 {
	next := prev + d
	if next <= now {
		next += ((now-next)/d + 1) * d
	}
	return next
}

func (s *Scheduler) tick(t *Task, fn func(*Task)) {
	defer func() {
		if v := recover(); v != nil {
			if v == any(errUnwind) {
				panic(v)
			}
			s.reportPanic(t, v, debug.Stack())
		}
	}()
	fn(t)
}

// addTimer inserts tm into the heap and arms the alarm if tm is the new earliest, unless
// Run (or a timer callback inside it) is under way: Run arms the alarm once when its
// slices are done. now < 0: read the clock if needed.
func (s *Scheduler) addTimer(tm *timer, now int64) {
	s.tseq++
	tm.seq = s.tseq
	tm.idx = len(s.heap)
	s.heap = append(s.heap, tm)
	s.up(tm.idx)
	if tm.idx == 0 && !s.inRun {
		if now < 0 {
			now = s.clock()
		}
		s.arm(now)
	}
}

// delTimer removes tm (which is in the heap). The alarm is left armed: a spurious
// fire is harmless.
func (s *Scheduler) delTimer(tm *timer) {
	i := tm.idx
	last := len(s.heap) - 1
	if i != last {
		s.heap[i] = s.heap[last]
		s.heap[i].idx = i
	}
	s.heap[last] = nil
	s.heap = s.heap[:last]
	if i != last {
		if !s.down(i) {
			s.up(i)
		}
	}
	tm.idx = -1
}

func less(a, b *timer) bool {
	return a.when < b.when || (a.when == b.when && a.seq < b.seq)
}

func (s *Scheduler) up(i int) {
	h := s.heap
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		h[i].idx, h[p].idx = i, p
		i = p
	}
}

func (s *Scheduler) down(i int) bool {
	h := s.heap
	n := len(h)
	i0 := i
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && less(h[r], h[l]) {
			j = r
		}
		if !less(h[j], h[i]) {
			break
		}
		h[i], h[j] = h[j], h[i]
		h[i].idx, h[j].idx = i, j
		i = j
	}
	return i > i0
}

// fireDue fires the timers due at now that existed when it was called (so a callback that
// re-adds a zero-delay timer cannot loop forever) and reports whether any callback ran.
func (s *Scheduler) fireDue(now int64) (ranFn bool) {
	limit := s.tseq
	for len(s.heap) > 0 {
		tm := s.heap[0]
		if tm.when > now || tm.seq > limit {
			break
		}
		s.delTimer(tm)
		if t := tm.task; t != nil {
			// The task was ready from the deadline on: a timer fired late (the loop was
			// busy) shows as queue delay, not as a longer sleep.
			var err error
			if t.timed {
				err = ErrTimeout // a timed wait's deadline, not a Sleep's end
			}
			s.wake(t, err, max(tm.when, t.parkedAt))
		} else {
			s.runTimerFn(tm.fn)
			ranFn = true
		}
	}
	return ranFn
}

func (s *Scheduler) runTimerFn(fn func()) {
	ok := false
	defer func() {
		if ok {
			return
		}
		v := recover()
		if v == nil {
			// runtime.Goexit on the loop itself: it cannot be stopped, the loop goroutine
			// exits after this. Report it so that the cause is known, and leave Run so
			// that the loop's own deferred functions may Close the scheduler.
			v = ErrGoexit
			s.inRun = false
		}
		s.reportPanic(nil, v, debug.Stack())
	}()
	fn()
	ok = true
}

// arm makes sure the alarm goes off by the earliest deadline, or Config.TimerSlack after
// it last went off if that is later: when deadlines are dense the loop is woken at most
// once per TimerSlack and the timers due meanwhile share the wake-up; a timer due after a
// quiet spell is not delayed. It runs on the loop. The alarm is re-armed when that moment
// moves earlier, or half a slack or more later (RunTimers fired the timers it was set
// for, and it would go off for nothing); a moment a little later is met by the alarm
// going off early, finding nothing due and re-arming.
func (s *Scheduler) arm(now int64) {
	if len(s.heap) == 0 || s.closed {
		return
	}
	w := s.heap[0].when
	if s.slack > 0 && s.firedAt != 0 {
		w = max(w, s.firedAt+s.slack)
	}
	if s.armed && s.armedAt <= w && (s.slack == 0 || w-s.armedAt < s.slack/2) {
		return
	}
	s.armed, s.armedAt = true, w
	if s.alarm == nil {
		if s.newAlarm != nil {
			s.alarm = s.newAlarm(s.timerCB)
		} else {
			s.alarm = newRuntimeAlarm(s.timerCB)
		}
	}
	s.alarm.Arm(time.Duration(w - now))
}

// RunTimers is Run for a loop kept busy by input: the loop calls it at the end of a
// connection callback that left no task ready, with now, a clock reading taken on the
// loop (the callback's start). When the earliest timer is due at now and half of
// TimerSlack has passed since the alarm or RunTimers last fired timers (a whole
// TimerSlack when that timer is more than a slack late), it fires the timers due and runs
// the tasks they woke, as the alarm's wake-up would, and reports ran and Run's more; the
// alarm then moves on (arm). Otherwise it does nothing and reports false: with tasks
// ready (the caller has a Run coming for them) or with TimerSlack 0 (the runtime timer's
// own rounding paces it). Why: the alarm's wake-up costs a second thread and a post
// through the loop's door, while a loop that input keeps turning can fire its timers for
// nothing; at half the slack because that path is cheap. A loop that is behind fires its
// backlog here too, but at most once a slack, so that input gets at least a slack of the
// loop between two batches of ticks: left to the alarm instead, the backlog waited for
// the door's byte behind a whole epoll batch of input (gnet takes up to 1,024 events a
// wait), and the ticks of a loaded loop came tens of milliseconds late in bursts and
// stayed late. A loop far behind (farBehind) still leaves its backlog to the door's turn,
// so that the input queued behind a long tick is served first (docs/rooms.md, "The
// alarm"). Loop only, like Run.
func (s *Scheduler) RunTimers(now int64) (ran, more bool) {
	if s.slack == 0 || len(s.heap) == 0 || s.nready > 0 || s.closed {
		return false, false
	}
	w := s.heap[0].when
	if w > now {
		return false, false
	}
	late := now - w
	if late > farBehind*s.slack {
		return false, false
	}
	if s.firedAt != 0 {
		gap := s.slack / 2
		if late > s.slack {
			gap = s.slack
		}
		if now < s.firedAt+gap {
			return false, false
		}
	}
	s.firedAt = now
	return true, s.Run()
}

// farBehind is how many slacks late the earliest timer may be for RunTimers to fire it:
// later than that the loop is far behind (a long tick or a stall held it), and the
// backlog waits for the door's turn, after the input that queued meanwhile.
const farBehind = 8

// onTimerFired runs on the alarm's goroutine: it hands the work to the loop.
func (s *Scheduler) onTimerFired() { s.post(s.fireFn) }

// onTimerPosted runs on the loop (posted by onTimerFired); the loop calls Run afterwards.
func (s *Scheduler) onTimerPosted() {
	s.armed = false
	if s.closed || s.inRun || s.cur != nil {
		return
	}
	s.inRun = true // AfterFunc callbacks may not call Run or Close
	now := s.clock()
	s.firedAt = now
	if s.fireDue(now) {
		now = s.clock()
	}
	s.inRun = false
	if s.nready == 0 {
		s.arm(now)
	}
	// Otherwise the Run that runs the woken tasks arms the alarm once they have added
	// their next timers (a room's next tick): one setting instead of two.
}
