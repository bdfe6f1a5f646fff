package promexport

import (
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonrt/baton/loop/stats"
)

// The handoff figures of a node of a room directory (loop/room's stats section
// "cluster", docs/handoff.md): handoffs begun, completed and failed as the source, rooms
// accepted as the target, and the freeze-to-first-tick gap of the rooms accepted, as a
// histogram (histogram_quantile gives its p50 and p99 across nodes) and the largest of
// the last 1,024 (a gauge). A server that is not a node exports none of them.
var (
	dHandoffStarted   = desc("cluster_handoffs_started_total", "Room handoffs this node began as the source (Room.Handoff and the handoff on drain).")
	dHandoffCompleted = desc("cluster_handoffs_completed_total", "Room handoffs this node began that moved the room to another node.")
	dHandoffFailed    = desc("cluster_handoffs_failed_total", "Room handoffs this node began that failed (the room carried on here, or stopped if its claim was lost).")
	dHandoffAccepted  = desc("cluster_handoffs_accepted_total", "Rooms this node took from another node's handoff.")
	dHandoffGap       = desc("cluster_handoff_gap_seconds", "Freeze-to-first-tick gap of the rooms this node accepted: from the source's freeze to the room's first tick here, by the two nodes' wall clocks.")
	dHandoffGapMax    = desc("cluster_handoff_gap_max_seconds", "Largest freeze-to-first-tick gap of the last 1,024 rooms this node accepted; 0 before the first.")

	clusterDescs = []*prometheus.Desc{dHandoffStarted, dHandoffCompleted, dHandoffFailed, dHandoffAccepted, dHandoffGap, dHandoffGapMax}
)

// clusterSection is the name of loop/room's cluster section.
const clusterSection = "cluster"

// handoffFigures are the handoff figures of the cluster section, as its page's JSON
// names them (loop/room keeps the section's type to itself: the page's JSON is the
// contract, as loop/stats reads the WebSocket section's).
type handoffFigures struct {
	Started   float64  `json:"started"`
	Completed float64  `json:"completed"`
	Failed    float64  `json:"failed"`
	Accepted  float64  `json:"accepted"`
	GapsTotal uint64   `json:"gaps_total"`
	GapSum    int64    `json:"gap_sum_ns"`
	GapBounds []int64  `json:"gap_bounds_ns"`
	GapLE     []uint64 `json:"gap_le"`
	GapMax    int64    `json:"gap_max_ns"`
}

// handoffsOf reads the handoff figures of snap's cluster section, or reports false when
// the server is not a node of a directory (no section, or one without handoff figures).
func handoffsOf(snap *stats.Snapshot) (handoffFigures, bool) {
	var page struct {
		Handoffs *handoffFigures `json:"handoffs"`
	}
	v, ok := snap.Sections[clusterSection]
	if !ok {
		return handoffFigures{}, false
	}
	b, err := json.Marshal(v)
	if err != nil || json.Unmarshal(b, &page) != nil || page.Handoffs == nil || len(page.Handoffs.GapLE) != len(page.Handoffs.GapBounds) {
		return handoffFigures{}, false
	}
	return *page.Handoffs, true
}

func collectHandoffs(ch chan<- prometheus.Metric, snap *stats.Snapshot) {
	h, ok := handoffsOf(snap)
	if !ok {
		return
	}
	counter(ch, dHandoffStarted, h.Started)
	counter(ch, dHandoffCompleted, h.Completed)
	counter(ch, dHandoffFailed, h.Failed)
	counter(ch, dHandoffAccepted, h.Accepted)
	buckets := make(map[float64]uint64, len(h.GapBounds))
	for i, b := range h.GapBounds {
		buckets[time.Duration(b).Seconds()] = h.GapLE[i]
	}
	ch <- prometheus.MustNewConstHistogram(dHandoffGap, h.GapsTotal, time.Duration(h.GapSum).Seconds(), buckets)
	gauge(ch, dHandoffGapMax, time.Duration(h.GapMax).Seconds())
}
