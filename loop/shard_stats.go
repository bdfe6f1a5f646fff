package loop

import (
	"sort"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/render"
	"github.com/batonrt/baton/offload"
)

// The Sum functions of the engine's stats sections (engine_stats.go): with several loops,
// every page and snapshot shows the totals in the usual format, then each loop's own.
// Counters and times add up; percentiles cannot be merged from percentiles, so a total's
// percentiles are the worst loop's (an upper bound), while its histogram buckets, counts,
// sums and maxima are exact. docs/accounting.md, "Shards", lists how each figure is
// combined.

// sumSummary combines two distributions: counts, sums, maxima and buckets exactly, the
// percentiles as the larger of the two (an upper bound of the merged percentile).
func sumSummary(a, b accounting.Summary) accounting.Summary {
	a.Count += b.Count
	a.Sum += b.Sum
	a.P50, a.P90, a.P99, a.P999 = max(a.P50, b.P50), max(a.P90, b.P90), max(a.P99, b.P99), max(a.P999, b.P999)
	a.Max = max(a.Max, b.Max)
	for i := range a.Buckets {
		a.Buckets[i] += b.Buckets[i]
	}
	return a
}

func sumPair(a, b accounting.SummaryPair) accounting.SummaryPair {
	return accounting.SummaryPair{Cumulative: sumSummary(a.Cumulative, b.Cumulative), Recent: sumSummary(a.Recent, b.Recent)}
}

// sumLoops adds the loops up: busy time, slices, switches and tasks add; utilisation is
// busy over elapsed summed, so the mean over the shards; lag is combined by sumSummary;
// uptime and the ready-queue depths are the largest.
func sumLoops(ls []accounting.LoopSnapshot) accounting.LoopSnapshot {
	var t accounting.LoopSnapshot
	for i, l := range ls {
		if i == 0 {
			t.ArrivalClock = l.ArrivalClock
		}
		t.Uptime = max(t.Uptime, l.Uptime)
		t.BusyTotal += l.BusyTotal
		for w := range t.Utilisation {
			t.Utilisation[w].Length = l.Utilisation[w].Length
			t.Utilisation[w].Busy += l.Utilisation[w].Busy
			t.Utilisation[w].Elapsed += l.Utilisation[w].Elapsed
		}
		t.Lag = sumSummary(t.Lag, l.Lag)
		t.Slices.Count += l.Slices.Count
		t.Slices.Total += l.Slices.Total
		t.Slices.Max = max(t.Slices.Max, l.Slices.Max)
		t.Slices.Slow += l.Slices.Slow
		t.Slices.SlowTotal += l.Slices.SlowTotal
		t.ReadyDepth = max(t.ReadyDepth, l.ReadyDepth)
		t.ReadyDepthMax = max(t.ReadyDepthMax, l.ReadyDepthMax)
		t.Switches += l.Switches
		t.SwitchRate.Switches += l.SwitchRate.Switches
		t.SwitchRate.Elapsed = max(t.SwitchRate.Elapsed, l.SwitchRate.Elapsed)
		t.TasksStarted += l.TasksStarted
		t.TasksDone += l.TasksDone
		t.ArrivalBounded += l.ArrivalBounded
		t.ArrivalHidden += l.ArrivalHidden
		// The process's figures are the same process's, read at about the same time: the
		// largest reading.
		t.Goroutines = max(t.Goroutines, l.Goroutines)
		t.RSSBytes = max(t.RSSBytes, l.RSSBytes)
		t.OpenFDs = max(t.OpenFDs, l.OpenFDs)
		if st := l.Stalls; st != nil {
			if t.Stalls == nil {
				t.Stalls = &accounting.StallStats{Threshold: st.Threshold}
			}
			t.Stalls.Count += st.Count
			t.Stalls.Logged += st.Logged
			t.Stalls.Suppressed += st.Suppressed
			t.Stalls.Starved += st.Starved
			t.Stalls.Durations = sumSummary(t.Stalls.Durations, st.Durations)
			if st.InProgress && (!t.Stalls.InProgress || st.CurrentElapsed > t.Stalls.CurrentElapsed) {
				t.Stalls.InProgress, t.Stalls.CurrentTask, t.Stalls.CurrentElapsed = true, st.CurrentTask, st.CurrentElapsed
			}
		}
	}
	return t
}

// sumRoutes merges the routes of every shard by route key (every shard has the same
// routes), sorted by key like one shard's.
func sumRoutes(per [][]accounting.RouteSnapshot) []accounting.RouteSnapshot {
	var out []accounting.RouteSnapshot
	at := map[string]int{}
	for _, rs := range per {
		for _, r := range rs {
			i, ok := at[r.Route]
			if !ok {
				at[r.Route] = len(out)
				out = append(out, r)
				continue
			}
			t := &out[i]
			t.Count += r.Count
			t.Errors += r.Errors
			t.ClientErrors += r.ClientErrors
			t.InFlight += r.InFlight
			t.Recent.Count += r.Recent.Count
			t.Recent.Errors += r.Recent.Errors
			t.Recent.ClientErrors += r.Recent.ClientErrors
			t.Recent.Span = max(t.Recent.Span, r.Recent.Span)
			t.Latency = sumPair(t.Latency, r.Latency)
			t.OnLoop = sumPair(t.OnLoop, r.OnLoop)
			t.QueueDelay = sumPair(t.QueueDelay, r.QueueDelay)
			t.Parked = sumPair(t.Parked, r.Parked)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Route < out[j].Route })
	return out
}

// sumTasks lists every shard's live tasks (busiest first) and finished ones.
func sumTasks(per []accounting.TasksSnapshot) accounting.TasksSnapshot {
	var t accounting.TasksSnapshot
	for _, p := range per {
		t.Live = append(t.Live, p.Live...)
		t.Finished = append(t.Finished, p.Finished...)
		t.FinishedTotal += p.FinishedTotal
	}
	render.SortTasks(t.Live)
	return t
}

// sumOffload is the one shared pool and every shard's gates, by name.
func sumOffload(per []offload.Report) offload.Report {
	var t offload.Report
	for i, p := range per {
		if i == 0 {
			t.Pool = p.Pool
		}
		t.Gates = append(t.Gates, p.Gates...)
	}
	sort.SliceStable(t.Gates, func(i, j int) bool { return t.Gates[i].Name < t.Gates[j].Name })
	return t
}

// sumAdmission adds the shards' admission figures (limits are per shard, so they add
// too); the mean service time is the mean weighted by admissions, Retry-After the largest.
func sumAdmission(per []accounting.AdmissionStats) accounting.AdmissionStats {
	var t accounting.AdmissionStats
	var weighted float64
	for _, p := range per {
		t.Limit += p.Limit
		t.QueueLimit += p.QueueLimit
		t.Active += p.Active
		t.Queued += p.Queued
		t.AdmittedTotal += p.AdmittedTotal
		t.QueuedTotal += p.QueuedTotal
		t.RefusedTotal += p.RefusedTotal
		weighted += p.MeanServiceSeconds * float64(p.AdmittedTotal)
		t.RetryAfterSeconds = max(t.RetryAfterSeconds, p.RetryAfterSeconds)
		t.InFlight += p.InFlight
		t.Parsed += p.Parsed
		t.PanicsTotal += p.PanicsTotal
		t.Accept.Accepted += p.Accept.Accepted
		t.Accept.ResourceErrors += p.Accept.ResourceErrors
		t.Accept.Shed += p.Accept.Shed
		t.Accept.OtherErrors += p.Accept.OtherErrors
		t.Accept.RegisterErrored += p.Accept.RegisterErrored
	}
	if t.AdmittedTotal > 0 {
		t.MeanServiceSeconds = weighted / float64(t.AdmittedTotal)
	}
	return t
}
