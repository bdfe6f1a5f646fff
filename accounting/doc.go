// Package accounting holds the figures baton records about where a single-threaded loop's
// time goes (per task, per route, per room and for the loop itself) and renders them as
// JSON and as a top-style text view: the snapshot and summary types that
// stats.Take (package loop/stats), the stats pages and exporters (promexport) read.
//
// The recorders that fill these figures on the loop are not part of the API: they live in
// baton's internal/recorder, which only loop imports. accounting is a leaf: it imports the
// standard library only; the histograms (baton's internal/hdr), the scheduler, the
// recorders, the HTTP codec and the loop itself are never imported.
//
// # Goroutines
//
//   - Plain data, owned by whoever holds the value: [TaskSample], [TaskRecord],
//     [Summary], [RouteSnapshot], [LoopSnapshot], [StallStats], [TasksSnapshot],
//     [RoomSnapshot], [RoomsSnapshot]. Their methods (derived figures) may be called from
//     any goroutine that may read the value.
//   - Functions ([AppendServerTiming], [TaskJSON], [SortTasks], the Write* renderers) may
//     be called from any goroutine.
//
// # Counters and derived figures
//
// As in tokio-metrics, the recorders keep raw monotonic counters (counts and nanosecond
// sums); means and rates are methods on the snapshot types ([Summary.Mean],
// [Window.Utilisation], [SwitchRate.PerSecond]), and the JSON carries both the raw counts
// and the derived values. Distributions are HDR histograms with two significant digits;
// exact count, sum and maximum are kept beside each histogram, so means and maxima are
// exact and only the percentiles are approximate (within 1% relative error). The
// histograms are baton's own (internal/hdr), with hdrhistogram-go's layout and percentile
// definition, so the figures are those hdrhistogram-go would give without the module in
// the importer's module graph.
//
// docs/accounting.md defines every figure, its unit, when it is recorded and how to read it.
package accounting
