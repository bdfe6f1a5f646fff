// Package accounting records where a single-threaded loop's time goes — per task, per
// route and for the loop itself — and renders it as JSON and as a top-style text view.
//
// It is a leaf: it imports only the standard library and golang.org/x/sys/unix. The loop feeds it plain data (a [TaskSample] filled from the scheduler's
// raw counters, busy intervals, slice lengths) and reads snapshots back; the scheduler, the
// HTTP codec and the loop itself are never imported.
//
// # Goroutines
//
// Every type is either wholly loop-confined or wholly safe for concurrent use:
//
//   - Loop-confined ("call only from the loop goroutine", which includes a task running on
//     it): [Routes], [Route], [Loop], [Ring]. Their recording methods neither lock nor
//     allocate; their snapshots allocate and are meant to be taken on the loop and rendered
//     off it.
//   - Safe for concurrent use: [Watchdog] (it runs its own goroutine and polls a probe),
//     [Current] (the slot the loop publishes the running task into, read by the watchdog),
//     [LoopThread] (the loop's OS thread, whose CPU clock and state the watchdog reads),
//     [LogLimiter] (rate-limits log lines about stalls, panics and other floods).
//   - Plain data, owned by whoever holds the value: [TaskSample], [TaskRecord], [Summary],
//     [RouteSnapshot], [LoopSnapshot], [StallStats], [TasksSnapshot].
//   - Owned by whoever holds it, not safe for concurrent use: [Histogram] (for packages that
//     keep distributions of their own, such as offload; read with [SummaryOf]).
//   - Functions ([AppendServerTiming], [TaskJSON], [SortTasks], the Write* renderers,
//     [StackOf], [ThreadCPU], [ThreadCPUOf], [ThreadStateOf], [Gettid]) may be called from
//     any goroutine.
//
// # Clock
//
// The hot-path methods take timestamps as int64 nanoseconds since [Config.Epoch] on the
// monotonic clock — the representation the scheduler already uses (pass its Epoch as
// Config.Epoch and its clock readings as timestamps). Snapshots take a time.Time and convert
// it with time.Time.Sub against the same epoch, so both must carry monotonic readings
// (time.Now does).
//
// # Counters and derived figures
//
// As in tokio-metrics, recorders keep raw monotonic counters (counts and nanosecond sums);
// means and rates are methods on the snapshot types ([Summary.Mean], [Window.Utilisation],
// [SwitchRate.PerSecond]), and the JSON carries both the raw counts and the derived values.
// Distributions are HDR histograms with [DefaultHistogramDigits] significant digits; exact
// count, sum and maximum are kept beside each histogram, so means and maxima are exact and
// only the percentiles are approximate (within 10^-digits relative error). The histograms
// are accounting's own ([Histogram]), with hdrhistogram-go's layout and percentile
// definition, so the figures are those hdrhistogram-go would give without the module in
// the importer's module graph.
//
// docs/accounting.md defines every figure, its unit, when it is recorded and how to read it.
package accounting
