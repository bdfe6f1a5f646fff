// Package recorder holds the loop's recorders: they note where a single-threaded loop's
// time goes (per task, per route and for the loop itself; a room's figures are package
// loop/room's own record) and give the plain
// figures of package accounting back as snapshots. Only loop imports it
// (internal/layout checks); users read the figures through accounting's types.
//
// It imports accounting (the figures it fills), internal/hdr (its histograms), the
// standard library and golang.org/x/sys/unix: the loop feeds it plain data (an
// accounting.TaskSample filled from the scheduler's raw counters, busy intervals, slice
// lengths), and the scheduler, the HTTP codec and the loop itself are never imported.
//
// # Goroutines
//
// Every type is either wholly loop-confined or wholly safe for concurrent use:
//
//   - Loop-confined ("call only from the loop goroutine", which includes a task running on
//     it): [Routes], [Route], [Loop], [Ring]. Their recording methods neither lock
//     nor allocate; their snapshots allocate and are meant to be taken on the loop and
//     rendered off it.
//   - Owned by one goroutine at a time: [RoutesCopy] (the loop's while Routes.CopyInto
//     fills it, then its reader's, which computes the percentiles off the loop).
//   - Safe for concurrent use: [Watchdog] (it runs its own goroutine and polls a probe),
//     [Current] (the slot the loop publishes the running task into, read by the watchdog),
//     [LoopThread] (the loop's OS thread, whose CPU clock and state the watchdog reads),
//     [LogLimiter] (rate-limits log lines about stalls, panics and other floods).
//   - Functions ([StacksOf], [ThreadCPU]) may be called from any goroutine.
//
// # Clock
//
// The hot-path methods take timestamps as int64 nanoseconds since [Config.Epoch] on the
// monotonic clock, the representation the scheduler already uses (pass its Epoch as
// Config.Epoch and its clock readings as timestamps). Snapshots take a time.Time and convert
// it with time.Time.Sub against the same epoch, so both must carry monotonic readings
// (time.Now does).
//
// # Counters and derived figures
//
// As in tokio-metrics, recorders keep raw monotonic counters (counts and nanosecond sums);
// means and rates are methods on accounting's snapshot types. Distributions are HDR
// histograms (internal/hdr) with two significant digits by default; exact count, sum and
// maximum are kept beside each histogram, so means and maxima are exact and only the
// percentiles are approximate.
//
// docs/accounting.md defines every figure, its unit, when it is recorded and how to read it.
package recorder
