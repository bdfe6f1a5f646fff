package scheduler

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// waitFor polls cond on the loop until it holds or a generous deadline passes.
func (l *testLoop) waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ok bool
		l.do(func() { ok = cond() })
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// runAll runs the sync scheduler until no task is ready.
func runAll(s *Scheduler) {
	for s.Run() {
	}
}

// mustPanic runs fn and returns the panic message; it fails the test if fn does not panic.
func mustPanic(tb testing.TB, fn func()) (msg string) {
	tb.Helper()
	defer func() {
		v := recover()
		if v == nil {
			tb.Fatalf("no panic")
		}
		msg = fmt.Sprint(v)
	}()
	fn()
	return ""
}

func TestFIFO(t *testing.T) {
	s := newSync(t, Config{})
	var order []int
	for i := range 5 {
		s.Spawn(func(t *Task) { order = append(order, t.Arg().(int)) }, i)
	}
	if live, ready := s.Len(); live != 5 || ready != 5 {
		t.Fatalf("Len = %d, %d; want 5, 5", live, ready)
	}
	if s.Run() {
		t.Fatal("Run reported more ready tasks")
	}
	if got := fmt.Sprint(order); got != "[0 1 2 3 4]" {
		t.Fatalf("order %s", got)
	}
	if live, ready := s.Len(); live != 0 || ready != 0 {
		t.Fatalf("Len = %d, %d after Run", live, ready)
	}
}

func TestYieldInterleaving(t *testing.T) {
	s := newSync(t, Config{})
	var log []string
	body := func(t *Task) {
		for i := range 3 {
			log = append(log, fmt.Sprintf("%s%d", t.Label(), i))
			t.Yield()
		}
	}
	s.Go(body).SetLabel("A")
	s.Go(body).SetLabel("B")
	// Each Run runs only the tasks ready when it was called: one slice each.
	if !s.Run() {
		t.Fatal("Run should report the yielded tasks")
	}
	if got := strings.Join(log, " "); got != "A0 B0" {
		t.Fatalf("after one Run: %s", got)
	}
	runAll(s)
	if got := strings.Join(log, " "); got != "A0 B0 A1 B1 A2 B2" {
		t.Fatalf("interleaving: %s", got)
	}
}

func TestWokenDuringRunWaitsForNextRun(t *testing.T) {
	s := newSync(t, Config{})
	var log []string
	sleeper := s.Go(func(t *Task) {
		log = append(log, "park")
		t.Park(ReasonOther)
		log = append(log, "woken")
	})
	s.Run()
	s.Go(func(t *Task) {
		s.Wake(sleeper)
		log = append(log, "waker")
	})
	if !s.Run() {
		t.Fatal("the woken task should remain ready")
	}
	if got := strings.Join(log, " "); got != "park waker" {
		t.Fatalf("log %s", got)
	}
	if s.Run() {
		t.Fatal("nothing should remain")
	}
	if got := strings.Join(log, " "); got != "park waker woken" {
		t.Fatalf("log %s", got)
	}
}

// Sleepers are woken in the order of their deadlines (now + d, read when Sleep is called),
// whatever order they went to sleep in. The loop is driven by the test, and the timers are
// fired only once all are due, so the wake order is the heap's order and nothing else: a
// loaded machine that delays the loop between two Sleep calls moves the deadlines, and the
// expected order is taken from the deadlines themselves, each checked against the clock
// readings around its Sleep call.
func TestSleepOrderByDeadline(t *testing.T) {
	s := newSync(t, Config{})
	var order []int
	type sleeper struct {
		task   *Task
		d      time.Duration
		before int64 // clock reading before the Sleep call
	}
	var sl []*sleeper
	for i, ms := range []int{30, 10, 20, 1} {
		sp := &sleeper{d: time.Duration(ms) * time.Millisecond}
		sl = append(sl, sp)
		sp.task = s.Spawn(func(t *Task) {
			sp.before = s.Now()
			if err := t.Sleep(sp.d); err != nil {
				panic(err)
			}
			order = append(order, i)
		}, nil)
	}
	runAll(s) // every task parks in Sleep
	require.Equal(t, 4, s.Counters().Timers)
	last := int64(0)
	for _, sp := range sl {
		when := sp.task.sleep.when
		require.GreaterOrEqual(t, when, sp.before+int64(sp.d), "deadline before the call + d")
		require.LessOrEqual(t, when, sp.task.SliceEnd()+int64(sp.d), "deadline after the slice end + d")
		last = max(last, when)
	}
	for s.Now() < last { // wait until every deadline has passed
		time.Sleep(time.Millisecond)
	}
	runAll(s)
	require.Len(t, order, 4)
	want := []int{0, 1, 2, 3}
	sort.SliceStable(want, func(a, b int) bool { return sl[want[a]].task.sleep.when < sl[want[b]].task.sleep.when })
	// The task structs are recycled but not reused here (nothing was spawned since), so
	// their sleep.when still holds the deadline.
	assert.Equal(t, want, order, "wake order (task indices) by deadline")
}

func TestSleepWakesThroughPost(t *testing.T) {
	l := newLoop(t, Config{})
	const d = 20 * time.Millisecond
	var slept time.Duration
	var done atomic.Bool
	l.do(func() {
		l.s.Go(func(t *Task) {
			start := time.Now()
			if err := t.Sleep(d); err != nil {
				panic(err)
			}
			slept = time.Since(start)
			done.Store(true)
		})
	})
	posts := l.postCount()
	for !done.Load() {
		time.Sleep(time.Millisecond)
	}
	l.do(func() {
		if slept < d {
			t.Errorf("slept %v, want >= %v", slept, d)
		}
		if l.s.Counters().Timers != 0 {
			t.Errorf("timer heap not empty")
		}
	})
	// Nothing but the timer posts to the loop here, and the loop is otherwise idle: the
	// wake-up must have come through Post.
	if l.postCount() <= posts {
		t.Errorf("no Post from the timer (posts %d -> %d)", posts, l.postCount())
	}
}

var errTest = errors.New("test cancel")

func TestCancelSleepingTaskStaleTimer(t *testing.T) {
	l := newLoop(t, Config{})
	var (
		a       *Task
		aErr    error
		aDone   bool
		bParked bool
		bErr    error
		bDone   bool
		reused  bool
	)
	l.do(func() {
		a = l.s.Go(func(t *Task) {
			aErr = t.Sleep(30 * time.Millisecond)
			// Sticky: later parks return at once.
			if err := t.Park(ReasonOther); err != errTest {
				panic(fmt.Sprint("park after cancel returned ", err))
			}
			aDone = true
		})
	})
	l.do(func() { l.s.Cancel(a, errTest) })
	l.waitFor(t, "cancelled task", func() bool { return aDone })
	l.do(func() {
		if aErr != errTest {
			t.Errorf("Sleep returned %v, want the cancel error", aErr)
		}
		if n := l.s.Counters().Timers; n != 0 {
			t.Errorf("%d timers left after cancel", n)
		}
		// The next task reuses a's struct (and coroutine) and parks: a's timer, had it
		// stayed in the heap, would fire during this park.
		b := l.s.Go(func(t *Task) {
			bParked = true
			bErr = t.Park(ReasonOther)
			bDone = true
		})
		reused = b == a
	})
	if !reused {
		t.Fatal("the Task struct was not reused")
	}
	time.Sleep(80 * time.Millisecond) // well past a's deadline
	l.do(func() {
		if !bParked || bDone {
			t.Errorf("b parked %v done %v: a stale timer resumed it", bParked, bDone)
			return // never Fatal on the loop goroutine
		}
		l.s.Wake(a) // a and b are the same struct: b is the live task now
	})
	l.waitFor(t, "b", func() bool { return bDone })
	l.do(func() {
		if bErr != nil {
			t.Errorf("b's Park returned %v", bErr)
		}
	})
}

func TestWakeEndsSleepAndRemovesTimer(t *testing.T) {
	l := newLoop(t, Config{})
	var task *Task
	var sleepErr error
	var phase int
	l.do(func() {
		task = l.s.Go(func(t *Task) {
			sleepErr = t.Sleep(40 * time.Millisecond)
			phase = 1
			t.Park(ReasonOther)
			phase = 2
		})
	})
	l.waitFor(t, "sleep", func() bool { return task.State() == Parked })
	l.do(func() { l.s.Wake(task) })
	l.waitFor(t, "phase 1", func() bool { return phase == 1 && task.State() == Parked })
	l.do(func() {
		if l.s.Counters().Timers != 0 {
			t.Error("sleep timer still pending after Wake")
		}
	})
	time.Sleep(80 * time.Millisecond)
	l.do(func() {
		if phase != 1 || sleepErr != nil {
			t.Errorf("phase %d err %v: stale timer woke the second park", phase, sleepErr)
			return // never Fatal on the loop goroutine
		}
		l.s.Wake(task)
	})
	l.waitFor(t, "phase 2", func() bool { return phase == 2 })
}

func TestWakerIsPerPark(t *testing.T) {
	s := newSync(t, Config{})
	var w1 Waker
	var log []string
	task := s.Go(func(t *Task) {
		w1 = t.Waker()
		t.Park(ReasonWrite)
		log = append(log, "first")
		t.Park(ReasonWrite)
		log = append(log, "second")
	})
	s.Run()
	if w := task.Waker(); w != w1 {
		t.Fatal("Waker of a parked task should refer to its current park")
	}
	if !w1.Wake() {
		t.Fatal("w1 should wake the first park")
	}
	s.Run()
	if w1.Wake() {
		t.Fatal("a stale Waker woke a later park")
	}
	s.Run()
	if got := strings.Join(log, " "); got != "first" {
		t.Fatalf("log %s", got)
	}
	w2 := task.Waker()
	ref := task.Ref()
	if !w2.Wake() {
		t.Fatal("w2")
	}
	s.Run()
	if ref.Task() != nil || task.State() != Done {
		t.Fatal("Ref should report the finished task")
	}
	// The struct is reused by a new task: old Waker and Ref must not reach it.
	n := s.Go(func(t *Task) { t.Park(ReasonOther) })
	s.Run()
	if n != task {
		t.Fatal("struct not reused")
	}
	if w2.Wake() || ref.Task() != nil {
		t.Fatal("stale Waker/Ref reached the new task")
	}
	if n.Ref().Task() != n {
		t.Fatal("fresh Ref")
	}
	s.Wake(n)
	runAll(s)
}

func TestFutureMultipleWaiters(t *testing.T) {
	s := newSync(t, Config{})
	f := NewFuture[int](s)
	var got []string
	for i := range 3 {
		s.Go(func(t *Task) {
			v, err := f.Await(t)
			got = append(got, fmt.Sprintf("%d:%d:%v", i, v, err))
		})
	}
	var cancelled *Task
	var cancelErr error
	cancelled = s.Go(func(t *Task) {
		_, cancelErr = f.Await(t)
	})
	s.Run()
	if f.Done() || len(got) != 0 {
		t.Fatal("resolved too early")
	}
	s.Cancel(cancelled, errTest)
	s.Run()
	if cancelErr != errTest {
		t.Fatalf("cancelled waiter got %v", cancelErr)
	}
	// A new task reusing the cancelled waiter's struct parks; Resolve must not wake it.
	other := s.Go(func(t *Task) { t.Park(ReasonOther) })
	s.Run()
	if other != cancelled {
		t.Fatal("struct not reused")
	}
	s.Go(func(t *Task) {
		if !f.Resolve(42, nil) {
			panic("first Resolve lost")
		}
		if f.Resolve(7, errTest) {
			panic("second Resolve won")
		}
	})
	runAll(s)
	if g := strings.Join(got, " "); g != "0:42:<nil> 1:42:<nil> 2:42:<nil>" {
		t.Fatalf("waiters got %s", g)
	}
	if other.State() != Parked {
		t.Fatal("Resolve woke a task that was not waiting")
	}
	// Await on a resolved future returns at once, even in a cancelled task.
	s.Cancel(other, errTest)
	runAll(s)
	var late int
	s.Go(func(t *Task) { late, _ = f.Await(t) })
	runAll(s)
	if late != 42 {
		t.Fatalf("late Await got %d", late)
	}
	if v, err, ok := f.Result(); !ok || v != 42 || err != nil {
		t.Fatal("Result")
	}
}

func TestFutureIgnoresPlainWake(t *testing.T) {
	s := newSync(t, Config{})
	f := NewFuture[string](s)
	var got string
	task := s.Go(func(t *Task) { got, _ = f.Await(t) })
	s.Run()
	s.Wake(task) // not resolved: Await parks again
	s.Run()
	if task.State() != Parked {
		t.Fatalf("state %s after spurious wake", task.State())
	}
	f.Resolve("ok", nil)
	runAll(s)
	if got != "ok" {
		t.Fatalf("got %q", got)
	}
}

func TestEvent(t *testing.T) {
	s := newSync(t, Config{})
	e := NewEvent(s)
	woken := 0
	for range 3 {
		s.Go(func(t *Task) {
			if err := e.Wait(t); err != nil {
				panic(err)
			}
			woken++
		})
	}
	c := s.Go(func(t *Task) {
		if err := e.Wait(t); err != errTest {
			panic(fmt.Sprint("cancelled Wait returned ", err))
		}
	})
	runAll(s)
	if woken != 0 || e.IsSet() {
		t.Fatal("woken before Set")
	}
	s.Cancel(c, errTest)
	runAll(s)
	e.Set()
	e.Set()
	runAll(s)
	if woken != 3 || !e.IsSet() {
		t.Fatalf("woken %d", woken)
	}
	s.Go(func(t *Task) {
		if e.Wait(t) != nil {
			panic("Wait on a set event")
		}
		woken++
	})
	runAll(s)
	if woken != 4 {
		t.Fatal("Wait on a set event should return at once")
	}
}

func TestEvery(t *testing.T) {
	l := newLoop(t, Config{})
	const d = 10 * time.Millisecond
	var ticks int
	var every *Task
	start := time.Now()
	l.do(func() {
		every = l.s.Every(d, func(t *Task) { ticks++ })
	})
	time.Sleep(200 * time.Millisecond)
	var n int
	l.do(func() {
		n = ticks
		l.s.Cancel(every, errTest)
	})
	elapsed := time.Since(start)
	// Fixed rate: at most elapsed/d ticks (no bursts); at least a few even on a slow machine.
	if max := int(elapsed / d); n < 3 || n > max {
		t.Fatalf("%d ticks in %v (want 3..%d)", n, elapsed, max)
	}
	l.waitFor(t, "every task to end", func() bool { live, _ := l.s.Len(); return live == 0 })
	time.Sleep(30 * time.Millisecond)
	l.do(func() {
		if ticks != n {
			t.Errorf("ticked after cancel: %d -> %d", n, ticks)
			return // never Fatal on the loop goroutine
		}
	})
}

func TestNextTickSkipsMissedTicks(t *testing.T) {
	for _, c := range []struct{ prev, now, d, want int64 }{
		{100, 105, 10, 110}, // on time
		{100, 110, 10, 120}, // exactly at the next deadline: it is missed
		{100, 135, 10, 140}, // three ticks late: skip to the next future one
		{100, 99, 10, 110},
	} {
		if got := nextTick(c.prev, c.now, c.d); got != c.want {
			t.Errorf("nextTick(%d, %d, %d) = %d, want %d", c.prev, c.now, c.d, got, c.want)
		}
	}
}

func TestEveryTickPanicKeepsTicking(t *testing.T) {
	var panics atomic.Int32
	l := newLoop(t, Config{OnPanic: func(*Task, any, []byte) { panics.Add(1) }})
	ticks := 0
	l.do(func() {
		l.s.Every(time.Millisecond, func(t *Task) {
			ticks++
			panic("tick")
		})
	})
	l.waitFor(t, "ticks", func() bool { return ticks >= 3 })
	if panics.Load() < 2 {
		t.Fatal("panics not reported")
	}
}

//go:noinline
func panickyHandler(t *Task) {
	panic(fmt.Sprintf("handler failed on task %d", t.ID()))
}

func TestPanicRecovery(t *testing.T) {
	var (
		gotTask  *Task
		gotValue any
		gotStack string
	)
	s := newSync(t, Config{OnPanic: func(t *Task, v any, stack []byte) {
		gotTask, gotValue, gotStack = t, v, string(stack)
	}})
	var deferred bool
	p := s.Go(func(t *Task) {
		defer func() { deferred = true }()
		panickyHandler(t)
	})
	runAll(s)
	if gotTask != p || gotValue == nil || !deferred {
		t.Fatalf("OnPanic got task %v value %v; defer ran %v", gotTask, gotValue, deferred)
	}
	if !strings.Contains(gotStack, "panickyHandler") {
		t.Fatalf("stack does not name the handler:\n%s", gotStack)
	}
	c := s.Counters()
	if c.Panics != 1 || c.Coroutines != 1 || c.Idle != 1 || c.Live != 0 {
		t.Fatalf("counters %+v", c)
	}
	// The coroutine is reused and works.
	ran := false
	s.Go(func(t *Task) { t.Yield(); ran = true })
	runAll(s)
	if c := s.Counters(); !ran || c.Coroutines != 1 {
		t.Fatalf("ran %v, coroutines %d", ran, c.Coroutines)
	}
	// A panicking AfterFunc callback is reported with a nil task.
	gotTask, gotValue = p, nil
	s.AfterFunc(0, func() { panic("timer") })
	runAll(s)
	if gotTask != nil || gotValue != "timer" {
		t.Fatalf("AfterFunc panic: task %v value %v", gotTask, gotValue)
	}
}

func TestCloseUnwinds(t *testing.T) {
	l := newLoop(t, Config{})
	var unwound []string
	var afterPark []string
	f := NewFuture[int](l.s)
	l.do(func() {
		s := l.s
		spawn := func(name string, body func(t *Task)) {
			s.Go(func(t *Task) {
				defer func() { unwound = append(unwound, name) }()
				body(t)
				afterPark = append(afterPark, name)
			})
		}
		spawn("park", func(t *Task) { t.Park(ReasonOffload) })
		spawn("sleep", func(t *Task) { t.Sleep(time.Hour) })
		spawn("await", func(t *Task) { f.Await(t) })
		spawn("yield", func(t *Task) {
			for {
				t.Yield()
			}
		})
		spawn("stubborn", func(t *Task) {
			// Recovers the unwind panic and tries to park again: it must still end.
			func() {
				defer func() { recover() }()
				t.Sleep(time.Hour)
			}()
			t.Sleep(time.Hour)
		})
		s.Every(time.Hour, func(*Task) {})
		s.AfterFunc(time.Hour, func() { panic("must not run") })
	})
	l.waitFor(t, "tasks to park", func() bool { _, ready := l.s.Len(); return ready <= 1 })
	l.do(func() {
		s := l.s
		neverRan := false
		s.Go(func(*Task) { neverRan = true })
		if c := s.Counters(); c.Live != 7 || c.Timers < 4 {
			t.Errorf("before Close: %+v", c)
			return // never Fatal on the loop goroutine
		}
		s.Close()
		s.Close() // idempotent
		if neverRan {
			t.Error("a task that never ran was started by Close")
		}
		if got := strings.Join(unwound, " "); got != "park sleep await yield stubborn" {
			t.Errorf("unwound %q", got)
		}
		if len(afterPark) != 0 {
			t.Errorf("code after a park ran: %v", afterPark)
		}
		if c := s.Counters(); c.Live != 0 || c.Ready != 0 || c.Idle != 0 || c.Timers != 0 {
			t.Errorf("after Close: %+v", c)
		}
		if s.Run() {
			t.Error("Run after Close")
		}
		if msg := mustPanic(t, func() { s.Go(func(*Task) {}) }); !strings.Contains(msg, "Spawn after Close") {
			t.Errorf("Spawn after Close: %s", msg)
		}
		if tm := s.AfterFunc(0, func() {}); tm.Stop() {
			t.Error("AfterFunc after Close is pending")
		}
	})
	l.close()
	goleak.VerifyNone(t, leakOpts...)
}

func TestLockFreeSharing(t *testing.T) {
	l := newLoop(t, Config{})
	const tasks, iters = 200, 50
	shared := map[int]int{}
	counter := 0
	finished := 0
	gate := NewEvent(l.s)
	l.do(func() {
		for i := range tasks {
			l.s.Spawn(func(t *Task) {
				gate.Wait(t)
				for j := range iters {
					shared[j%7]++
					counter++
					switch (i + j) % 4 {
					case 0:
						t.Yield()
					case 1:
						t.Sleep(time.Duration(j%3) * time.Millisecond)
					case 2:
						f := NewFuture[int](t.Scheduler())
						t.Scheduler().AfterFunc(0, func() { f.Resolve(1, nil) })
						f.Await(t)
					}
				}
				finished++
			}, nil)
		}
		gate.Set()
	})
	l.waitFor(t, "tasks", func() bool { return finished == tasks })
	l.do(func() {
		sum := 0
		for _, v := range shared {
			sum += v
		}
		if counter != tasks*iters || sum != tasks*iters {
			t.Errorf("counter %d sum %d, want %d", counter, sum, tasks*iters)
			return // never Fatal on the loop goroutine
		}
	})
}

func TestMisusePanics(t *testing.T) {
	if msg := mustPanic(t, func() { New(Config{}) }); !strings.Contains(msg, "Post is required") {
		t.Errorf("New: %s", msg)
	}
	s := newSync(t, Config{})
	var fromTask []string
	a := s.Go(func(t *Task) { t.Park(ReasonOther) })
	if msg := mustPanic(t, func() { a.Park(ReasonOther) }); !strings.Contains(msg, "outside the task") {
		t.Errorf("Park from the loop: %s", msg)
	}
	s.Run()
	s.Go(func(t *Task) {
		catch := func(fn func()) {
			defer func() { fromTask = append(fromTask, fmt.Sprint(recover())) }()
			fn()
		}
		catch(func() { a.Park(ReasonOther) })
		catch(func() { a.Yield() })
		catch(func() { s.Run() })
		catch(func() { s.Close() })
		catch(func() { t.Park(NumReasons) })
	})
	runAll(s)
	for i, want := range []string{"called from task", "called from task", "Run called from inside task", "Close called from inside task", "invalid reason"} {
		if i >= len(fromTask) || !strings.Contains(fromTask[i], want) {
			t.Errorf("misuse %d: got %q, want %q", i, fromTask, want)
		}
	}
	if msg := mustPanic(t, func() { a.Sleep(time.Second) }); !strings.Contains(msg, "outside the task") {
		t.Errorf("Sleep from the loop: %s", msg)
	}
	if msg := mustPanic(t, func() { s.Cancel(a, nil) }); !strings.Contains(msg, "nil error") {
		t.Errorf("Cancel(nil): %s", msg)
	}
	// Run from a goroutine other than the loop (this test's goroutine ran it first).
	ch := make(chan string)
	go func() {
		defer func() { ch <- fmt.Sprint(recover()) }()
		s.Run()
	}()
	if msg := <-ch; !strings.Contains(msg, "only the loop goroutine") {
		t.Errorf("Run from another goroutine: %s", msg)
	}
	go func() {
		defer func() { ch <- fmt.Sprint(recover()) }()
		s.Close()
	}()
	if msg := <-ch; !strings.Contains(msg, "but the loop is goroutine") {
		t.Errorf("Close from another goroutine: %s", msg)
	}
	s.Wake(a)
	runAll(s)

	var reported string
	s2 := newSync(t, Config{OnPanic: func(_ *Task, v any, _ []byte) { reported = fmt.Sprint(v) }})
	s2.AfterFunc(0, s2.Close)
	s2.AfterFunc(0, func() { s2.Run() })
	s2.Run()
	if !strings.Contains(reported, "Run called re-entrantly") {
		t.Errorf("Run from an AfterFunc callback: %s", reported)
	}
	s2.AfterFunc(0, s2.Close)
	s2.Run()
	if !strings.Contains(reported, "Close called from inside Run") {
		t.Errorf("Close from an AfterFunc callback: %s", reported)
	}
}

func TestPoolBounded(t *testing.T) {
	s := newSync(t, Config{MaxIdle: 4})
	var tasks []*Task
	for range 10 {
		tasks = append(tasks, s.Go(func(t *Task) { t.Park(ReasonOther) }))
	}
	s.Run()
	if c := s.Counters(); c.Coroutines != 10 || c.Parked != 10 {
		t.Fatalf("%+v", c)
	}
	for _, task := range tasks {
		s.Wake(task)
	}
	s.Run()
	if c := s.Counters(); c.Idle != 4 || c.Live != 0 {
		t.Fatalf("idle %d live %d, want 4 0", c.Idle, c.Live)
	}
	for range 10 {
		s.Go(func(t *Task) {})
	}
	s.Run()
	// 4 reused, 6 new; still 4 idle.
	if c := s.Counters(); c.Coroutines != 16 || c.Idle != 4 || c.Completed != 20 {
		t.Fatalf("%+v", c)
	}
	// Sequential tasks reuse one coroutine.
	for range 100 {
		s.Go(func(t *Task) { t.Yield() })
		runAll(s)
	}
	if c := s.Counters(); c.Coroutines != 16 {
		t.Fatalf("sequential tasks created coroutines: %+v", c)
	}

	none := newSync(t, Config{MaxIdle: -1})
	none.Go(func(*Task) {})
	none.Run()
	if c := none.Counters(); c.Idle != 0 {
		t.Fatalf("MaxIdle -1 kept %d", c.Idle)
	}
}

func TestRunningWatchdogSeam(t *testing.T) {
	l := newLoop(t, Config{})
	var stop atomic.Bool
	var id uint64
	l.do(func() {
		id = l.s.Go(func(t *Task) {
			for !stop.Load() { // hog the loop until the watchdog has seen us
			}
		}).ID()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		gotID, elapsed, ok := l.s.Running()
		if ok && gotID == id && elapsed >= 2*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Running never reported the hog")
		}
		time.Sleep(100 * time.Microsecond)
	}
	stop.Store(true)
	l.waitFor(t, "hog to end", func() bool { live, _ := l.s.Len(); return live == 0 })
	if _, _, ok := l.s.Running(); ok {
		t.Fatal("Running reports a task on an idle loop")
	}
}

func TestStatsAndHooks(t *testing.T) {
	var log []string
	s := newSync(t, Config{Hooks: Hooks{
		OnReady: func(t *Task) { log = append(log, "ready") },
		OnRun:   func(t *Task) { log = append(log, "run") },
		OnStop: func(t *Task, st State, r Reason) {
			if st == Parked {
				log = append(log, "parked:"+r.String())
			} else {
				log = append(log, st.String())
			}
		},
	}})
	var inside Stats
	task := s.Go(func(t *Task) {
		t.Yield()
		t.Sleep(2 * time.Millisecond)
		t.Park(ReasonOffload)
		start := time.Now()
		for time.Since(start) < time.Millisecond {
		}
		inside = t.Stats()
	})
	task.SetLabel("GET /x")
	runAll(s)
	for task.Stats().Rounds < 3 {
		time.Sleep(time.Millisecond)
		s.Run()
	}
	runAll(s)
	if task.State() != Parked {
		t.Fatalf("state %s", task.State())
	}
	st := task.Stats()
	if st.Parked[ReasonSleep] < time.Millisecond || st.Rounds != 3 || st.OnLoop <= 0 || st.Spawned.IsZero() {
		t.Fatalf("stats %+v", st)
	}
	g := task.Goroutine()
	if g == 0 || g == goroutineID() {
		t.Fatalf("goroutine id %d", g)
	}
	s.Wake(task)
	runAll(s)
	want := "ready run ready ready run parked:sleep ready run parked:offload ready run done"
	if got := strings.Join(log, " "); got != want {
		t.Fatalf("hooks:\n got %s\nwant %s", got, want)
	}
	if inside.Rounds != 4 || inside.OnLoop < time.Millisecond || inside.MaxSlice < time.Millisecond ||
		inside.Parked[ReasonOffload] <= 0 || inside.QueueDelay <= 0 ||
		inside.FirstRunDelay <= 0 || inside.FirstRunDelay > inside.QueueDelay {
		t.Fatalf("stats from inside %+v", inside)
	}
	if inside.ParkedTotal() < inside.Parked[ReasonSleep] {
		t.Fatal("ParkedTotal")
	}
}

func TestStatsSlowSlicesAndNoAccounting(t *testing.T) {
	s := newSync(t, Config{SlowSlice: time.Microsecond})
	var st Stats
	task := s.Go(func(t *Task) {
		time.Sleep(50 * time.Microsecond) // blocks the loop: a slow slice
		t.Yield()
		st = t.Stats()
	})
	runAll(s)
	_ = task
	if st.SlowSlices < 1 || st.SlowTime < 50*time.Microsecond {
		t.Fatalf("%+v", st)
	}

	n := newSync(t, Config{NoAccounting: true})
	n.Go(func(t *Task) {
		t.Yield()
		st = t.Stats()
	})
	runAll(n)
	if st.Rounds != 2 || st.OnLoop != 0 || st.QueueDelay != 0 || !st.Spawned.IsZero() {
		t.Fatalf("NoAccounting stats %+v", st)
	}
}

func TestAfterFuncStopReset(t *testing.T) {
	l := newLoop(t, Config{})
	var fired []string
	var a, b *Timer
	l.do(func() {
		a = l.s.AfterFunc(10*time.Millisecond, func() { fired = append(fired, "a") })
		b = l.s.AfterFunc(time.Hour, func() { fired = append(fired, "b") })
		l.s.AfterFunc(20*time.Millisecond, func() { fired = append(fired, "c") })
		if !a.Stop() || a.Stop() {
			t.Error("Stop")
		}
		if !b.Reset(time.Millisecond) {
			t.Error("Reset of a pending timer")
		}
	})
	l.waitFor(t, "timers", func() bool { return len(fired) == 2 })
	time.Sleep(20 * time.Millisecond)
	l.do(func() {
		if got := strings.Join(fired, " "); got != "b c" {
			t.Errorf("fired %s", got)
		}
		if a.Reset(0) {
			t.Error("Reset of a stopped timer reported pending")
		}
	})
	l.waitFor(t, "a", func() bool { return len(fired) == 3 })
}

func TestTasksIterAndCurrent(t *testing.T) {
	s := newSync(t, Config{})
	var cur *Task
	a := s.Go(func(t *Task) { cur = s.Current(); t.Park(ReasonOther) })
	b := s.Go(func(t *Task) { t.Park(ReasonOther) })
	s.Run()
	if cur != a || s.Current() != nil {
		t.Fatal("Current")
	}
	var ids []uint64
	for task := range s.Tasks() {
		ids = append(ids, task.ID())
	}
	if fmt.Sprint(ids) != fmt.Sprint([]uint64{a.ID(), b.ID()}) {
		t.Fatalf("Tasks %v", ids)
	}
	s.Cancel(a, errTest)
	s.Cancel(b, errTest)
	runAll(s)
}

func TestStringers(t *testing.T) {
	assert.Equal(t, "parked", Parked.String())
	assert.Equal(t, "State(9)", State(9).String())
	assert.Equal(t, "offload", ReasonOffload.String())
	assert.Equal(t, "Reason(99)", Reason(99).String())
	// The names, in order (accounting's parked_by_reason_seconds keys).
	var names []string
	for r := range NumReasons {
		names = append(names, r.String())
	}
	assert.Equal(t, []string{"other", "sleep", "wait", "offload", "write", "queue"}, names)
	var states []string
	for st := range numStates {
		states = append(states, st.String())
	}
	assert.Equal(t, []string{"ready", "running", "parked", "done"}, states)
}

func TestConfigValidate(t *testing.T) {
	post := func(func()) {}
	assert.NoError(t, Config{Post: post}.Validate())
	assert.NoError(t, Config{Post: post, MaxIdle: -1}.Validate(), "a negative MaxIdle keeps no idle coroutine")
	assert.EqualError(t, Config{}.Validate(), "scheduler: Config.Post is required")
	assert.EqualError(t, Config{Post: post, SlowSlice: -time.Millisecond}.Validate(),
		"scheduler: Config.SlowSlice (-1ms) must not be negative (0 means DefaultSlowSlice)")
	assert.Equal(t, "scheduler: Config.Post is required", mustPanic(t, func() { New(Config{}) }))
}

// A timer that fires late because the loop was busy counts the lateness as queue delay
// (the task was ready from its deadline on), not as a longer sleep. The parked time is
// measured from the end of the slice that called Sleep to the deadline (the Sleep call's
// reading + d): on a loaded machine the slice may end well after that reading, so the
// parked time is anywhere between 0 and d, and what the test checks exactly is that
// parked + the queue delay of the next slice cover the gap between the two slices.
func TestLateTimerIsQueueDelay(t *testing.T) {
	var waits []time.Duration // queue delay of each slice
	var ends, starts []int64  // clock readings at the end and start of each slice
	s := newSync(t, Config{Hooks: Hooks{
		OnRun: func(t *Task) { w, _ := t.LastSlice(); waits = append(waits, w) },
		OnStop: func(t *Task, _ State, _ Reason) {
			_, run := t.LastSlice()
			ends = append(ends, t.SliceEnd())
			starts = append(starts, t.SliceEnd()-int64(run))
		},
	}})
	const d = time.Millisecond
	var st Stats
	var before int64
	s.Go(func(t *Task) {
		before = s.Now()
		_ = t.Sleep(d)
		st = t.Stats()
	})
	runAll(s) // the task parks in Sleep
	require.Len(t, ends, 1)
	for s.Now() < ends[0]+int64(50*time.Millisecond) { // the loop is "busy" long past the deadline
		time.Sleep(time.Millisecond)
	}
	runAll(s) // fires the timer and runs the task
	require.Equal(t, uint64(2), st.Rounds)
	require.Len(t, waits, 2)
	p := st.Parked[ReasonSleep]
	// Parked from the slice end to the deadline: never more than d, and at least what is
	// left of d after the slice ended.
	assert.LessOrEqual(t, p, d, "parked longer than the sleep asked for")
	assert.GreaterOrEqual(t, p, max(0, time.Duration(before+int64(d)-ends[0])), "parked")
	// The rest of the gap between the slices is queue delay: at least the 49 ms the timer
	// was late, and the two add up to the gap exactly.
	require.Len(t, starts, 2)
	assert.GreaterOrEqual(t, waits[1], 49*time.Millisecond, "queue delay of the late wake")
	assert.Equal(t, time.Duration(starts[1]-ends[0]), p+waits[1], "parked + queue delay, against the gap between the slices")
	assert.Equal(t, st.QueueDelay, waits[0]+waits[1], "Stats.QueueDelay")
}

// SpawnNow runs the new task's first slice at once, ahead of tasks already ready, and a
// task that yields is not run again by it.
func TestSpawnNowRunsAheadOfReadyTasks(t *testing.T) {
	s := newSync(t, Config{})
	var order []string
	s.Go(func(t *Task) {
		for i := 0; i < 3; i++ {
			order = append(order, "hog")
			t.Yield()
		}
	})
	runAll(s) // the hog: first slice, then it yields... all its slices run here
	order = order[:0]
	s.Go(func(t *Task) { order = append(order, "queued") })
	s.SpawnNow(func(t *Task) {
		order = append(order, "now")
		t.Yield()
		order = append(order, "now-again")
	}, nil)
	if got := strings.Join(order, ","); got != "now" {
		t.Fatalf("SpawnNow ran %q, want only the new task's first slice", got)
	}
	runAll(s)
	if got := strings.Join(order, ","); got != "now,queued,now-again" {
		t.Fatalf("order %q", got)
	}
	if live, ready := s.Len(); live != 0 || ready != 0 {
		t.Fatalf("live %d ready %d", live, ready)
	}
}

func TestSpawnNowFromATaskPanics(t *testing.T) {
	var msg string
	s := newSync(t, Config{OnPanic: func(_ *Task, v any, _ []byte) { msg = fmt.Sprint(v) }})
	s.SpawnNow(func(t *Task) { t.s.SpawnNow(func(*Task) {}, nil) }, nil)
	if !strings.Contains(msg, "SpawnNow called from inside task") {
		t.Fatalf("misuse panic: %q", msg)
	}
}

// SpawnNowAt takes the caller's readings: the queue delay and first-run delay run from
// ready to start, the slice from start to the end it returns, and OnStop sees the final
// figures through Totals and SliceEnd.
func TestSpawnNowAtUsesTheCallersReadings(t *testing.T) {
	var stopEnd int64
	var onLoop, queue, parked time.Duration
	var st Stats
	s := newSync(t, Config{Hooks: Hooks{OnStop: func(t *Task, state State, _ Reason) {
		if state == Done {
			stopEnd = t.SliceEnd()
			onLoop, queue, parked = t.Totals()
			st = t.Stats()
		}
	}}})
	now := s.clock()
	ready, start := now-int64(3*time.Millisecond), now-int64(time.Millisecond)
	end := s.SpawnNowAt(func(t *Task) {}, nil, ready, start)
	if end < now || end != stopEnd {
		t.Fatalf("end %d, want the slice end seen in OnStop (%d), not before %d", end, stopEnd, now)
	}
	if queue != 2*time.Millisecond || st.FirstRunDelay != 2*time.Millisecond || st.QueueDelay != queue {
		t.Fatalf("queue delay %v, first run %v, want the 2 ms from ready to start", queue, st.FirstRunDelay)
	}
	if onLoop != time.Duration(end-start) || st.OnLoop != onLoop || parked != 0 || st.Rounds != 1 {
		t.Fatalf("on loop %v (stats %v), want %v from start to end; parked %v", onLoop, st.OnLoop, time.Duration(end-start), parked)
	}
	if got := st.Spawned; got.Sub(s.Epoch()) != time.Duration(ready) {
		t.Fatalf("spawned at %v, want ready", got.Sub(s.Epoch()))
	}

	// Without accounting the readings are ignored and no clock is read.
	off := newSync(t, Config{NoAccounting: true})
	ran := false
	if end := off.SpawnNowAt(func(t *Task) { ran = true }, nil, 5, 7); end != 0 || !ran {
		t.Fatalf("no accounting: end %d ran %v", end, ran)
	}
}

// TestNowFollowsTheOSClock checks the scheduler's clock against time.Since(Epoch()), with
// the time-stamp counter (where this machine has a usable one) and with Config.OSClock,
// and that a slice's measured length covers what the task itself timed with the OS clock.
func TestNowFollowsTheOSClock(t *testing.T) {
	const tolerance = 50 * time.Microsecond // the design error is well under a microsecond
	for _, osClock := range []bool{false, true} {
		t.Run(fmt.Sprintf("OSClock=%v", osClock), func(t *testing.T) {
			s := newSync(t, Config{OSClock: osClock})
			epoch := s.Epoch()
			prev := int64(0)
			for end := time.Now().Add(30 * time.Millisecond); time.Now().Before(end); {
				a := int64(time.Since(epoch))
				r := s.Now()
				b := int64(time.Since(epoch))
				if r < prev || r < a-int64(tolerance) || r > b+int64(tolerance) {
					t.Fatalf("Now = %d after %d; OS clock %d before, %d after", r, prev, a, b)
				}
				prev = r
			}
			var inner time.Duration
			task := s.Go(func(t *Task) {
				start := time.Now()
				for time.Since(start) < 2*time.Millisecond {
				}
				inner = time.Since(start)
				t.Park(ReasonOther)
			})
			runAll(s)
			if st := task.Stats(); st.OnLoop < inner-tolerance || st.OnLoop > inner+100*time.Millisecond {
				t.Fatalf("on-loop %v for a slice that timed itself at %v", st.OnLoop, inner)
			}
			s.Wake(task)
			runAll(s)
		})
	}
}

// TestOnCoroutineAndOnSlices: OnCoroutine fires when a slice runs on another goroutine
// than the slice before (or on a coroutine that has not run yet), not for consecutive
// slices on one coroutine; OnSlices receives every slice's wait and the totals of their
// lengths, in batches, and FlushSlices delivers the rest.
func TestOnCoroutineAndOnSlices(t *testing.T) {
	var coroutines []uint64 // Goroutine() at each OnCoroutine
	var waits []int64
	var got SliceTotals
	var runs []time.Duration // each slice's length, from OnStop
	s := newSync(t, Config{SlowSlice: time.Millisecond, Hooks: Hooks{
		OnCoroutine: func(t *Task) { coroutines = append(coroutines, t.Goroutine()) },
		OnStop: func(t *Task, _ State, _ Reason) {
			_, run := t.LastSlice()
			runs = append(runs, run)
		},
		OnSlices: func(w []int64, st SliceTotals) {
			waits = append(waits, w...)
			got.Count += st.Count
			got.Total += st.Total
			got.Max = max(got.Max, st.Max)
			got.Slow += st.Slow
			got.SlowTotal += st.SlowTotal
		},
	}})
	// One task yielding three times: four slices on one coroutine, nothing else between.
	a := s.Go(func(t *Task) {
		for range 3 {
			t.Yield()
		}
		// One slow slice, measured with the clock the scheduler measures slices with.
		start := s.Now()
		for s.Now()-start < int64(2*time.Millisecond) {
		}
		t.Park(ReasonOther)
	})
	runAll(s)
	// The first slice starts on a new coroutine (id unknown yet); the second learns its
	// id, and from then on the goroutine does not change.
	require.Len(t, coroutines, 2, "OnCoroutine calls: %v, want [0 <id>]", coroutines)
	require.Zero(t, coroutines[0])
	require.NotZero(t, coroutines[1])
	gA := coroutines[1]
	// Two tasks alternating on two coroutines: every slice changes goroutine.
	b := s.Go(func(t *Task) { t.Yield(); t.Park(ReasonOther) })
	runAll(s)
	s.Wake(a)
	s.Wake(b)
	runAll(s)
	n := len(coroutines)
	require.GreaterOrEqual(t, n, 5, "OnCoroutine calls: %v", coroutines)
	require.Equal(t, gA, coroutines[n-2], "OnCoroutine %v: want the switch back to %d", coroutines, gA)
	require.NotEqual(t, gA, coroutines[n-1], "OnCoroutine %v: want the switch away from %d", coroutines, gA)
	require.Empty(t, waits, "OnSlices called before a batch was full")
	s.FlushSlices()
	sw := s.Switches()
	require.Len(t, waits, int(sw), "OnSlices waits, against the slices run")
	require.Equal(t, sw, got.Count, "OnSlices count, against the slices run")
	stA, stB := a.Stats(), b.Stats()
	var queue time.Duration
	for _, w := range waits {
		queue += time.Duration(w)
	}
	assert.Equal(t, stA.OnLoop+stB.OnLoop, got.Total, "slice total, against the tasks' on-loop times")
	assert.Equal(t, stA.QueueDelay+stB.QueueDelay, queue, "waits, against the tasks' queue delays")
	// Which slices are slow depends on the machine (a loaded one may stretch any slice past
	// the threshold): the figures must match the slices' own lengths, and a's busy slice is
	// always among them.
	require.Len(t, runs, int(sw))
	var slow uint64
	var slowTotal, longest time.Duration
	for _, r := range runs {
		longest = max(longest, r)
		if r > time.Millisecond {
			slow++
			slowTotal += r
		}
	}
	assert.GreaterOrEqual(t, slow, uint64(1), "a's 2 ms slice is slow")
	assert.Equal(t, slow, got.Slow, "slow slices")
	assert.Equal(t, slowTotal, got.SlowTotal, "slow slices' total")
	assert.GreaterOrEqual(t, got.SlowTotal, 2*time.Millisecond)
	assert.Equal(t, longest, got.Max, "longest slice")
	assert.GreaterOrEqual(t, stA.MaxSlice, 2*time.Millisecond, "a's busy slice")
	s.FlushSlices() // nothing new: no call
	assert.Equal(t, sw, got.Count, "an empty flush reported slices")
	// More slices than a batch: OnSlices is called without a flush.
	c := s.Go(func(t *Task) {
		for range sliceBatch + 10 {
			t.Yield()
		}
	})
	runAll(s)
	_ = c
	assert.GreaterOrEqual(t, len(waits), int(sw)+sliceBatch, "a full batch was not delivered without a flush")

	n2 := newSync(t, Config{NoAccounting: true, Hooks: Hooks{OnSlices: func([]int64, SliceTotals) { t.Error("OnSlices without accounting") }}})
	n2.Go(func(t *Task) { t.Yield() })
	runAll(n2)
	n2.FlushSlices()
}
