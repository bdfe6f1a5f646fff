// Package scheduler runs cooperative tasks as pooled coroutines on a single loop goroutine.
//
// A task is plain sequential Go code (a func(*Task)) that may park — sleep, wait for another
// task, wait for work done elsewhere — while other tasks run. Only one task runs at any
// instant and every task runs on behalf of the loop goroutine, so tasks share state with no
// locks. Tasks are built on [iter.Pull] coroutines, which are kept in a pool and reused.
//
// # Goroutines
//
// Every method says which goroutine may call it:
//
//   - "Loop-confined": the loop goroutine (the one that calls [Scheduler.Run]) or a task
//     running on it. A task runs only while the loop has switched into it, so for ownership
//     purposes code in a task is code on the loop.
//   - "Loop only": the loop goroutine itself, not from inside a task.
//   - "Task only": the task itself, from inside its own function.
//   - "Any goroutine": safe for concurrent use.
//
// The only way for another goroutine to get code run on the loop is [Config.Post], which
// the loop supplies. To resolve a [Future] from another goroutine, Post a function that
// resolves it.
//
// The first goroutine that calls [Scheduler.Run] becomes the loop; Run and Close panic if
// called from another goroutine afterwards. The check is cheap (it compares the address of
// Run's stack frame with the range seen before and confirms the goroutine id only when the
// frame moved), so it is always on. Wake, Cancel, Spawn and the other loop-confined methods
// are not checked: calling them from another goroutine is a data race that -race reports.
//
// # States
//
// A task moves through these states ([State]):
//
//	Spawn                      -> Ready
//	Ready   -> Running         Run picked it from the ready queue; SpawnNow, SpawnNowAt or a
//	                           chain (Task.Chain) ran it at once
//	Running -> Parked          Park, Sleep, Future.Await, Event.Wait (and their Timeout forms)
//	Running -> Ready           Yield
//	Running -> Done            its function returned, panicked or called runtime.Goexit
//	Parked  -> Ready           Wake, Cancel, its Sleep timer or deadline, Future.Resolve, Event.Set
//
// A chain: a task whose function returns after calling [Task.Chain] is Done as any other,
// and the task its chain function names is spawned and runs at once on the same coroutine,
// with no switch back to the loop in between (one switch pair serves the whole chain).
//
// # Panics and runtime.Goexit
//
// A panic in a task is recovered on the task's coroutine and reported to [Config.OnPanic];
// the coroutine is reused. A task that calls [runtime.Goexit] (testing's FailNow does) is
// reported the same way with the value [ErrGoexit], and the loop goes on; the goroutine
// that ran it ends (see [Config.LockedOSThread] for a loop locked to its thread). An
// [Scheduler.AfterFunc] callback runs on the loop goroutine itself: a Goexit there is
// reported and then ends the loop goroutine.
//
// # Task reuse
//
// A *Task is recycled as soon as its function returns: the same struct may be handed out
// by a later Spawn. Do not use a *Task after its function has returned. Code that may
// outlive the task should keep a [Ref] (which reports when the task is gone) or a [Waker]
// (which wakes one specific park of one specific task and nothing else).
//
// # Stale wakes
//
// A wake meant for an earlier park never resumes a later one. Every wake source the
// scheduler owns (the task's Sleep timer, the waiter lists of Future and Event) is
// unregistered when the task is woken by anything, and [Waker] carries the task id and the
// park sequence number it was made for. A plain [Scheduler.Wake] wakes whatever park the
// task is in right now; use a Waker when the waking side may run late.
//
// # Accounting
//
// Every switch updates the task's [Stats] (raw counters, no allocation, no lock) using the
// monotonic clock, one read per switch edge, and calls [Hooks] if set. In a chain
// ([Task.Chain]) the one reading that ends a task's slice also starts the next task's.
// [Scheduler.Running] lets a watchdog on another goroutine see the slice in progress.
package scheduler
