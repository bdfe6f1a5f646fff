package promexport

import (
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonrt/baton/loop/stats"
)

// The handoff and seat figures of a node of a room directory (loop/room's stats section
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

	// Players' seats (docs/client-protocol.md): taken back with a resume token, held
	// after a drop or a move, removed when the hold ran out, live connections replaced by
	// a newer one of the same player, resume tokens refused.
	dSeatsResumed  = desc("cluster_seats_resumed_total", "Seats taken back with a resume token, after a dropped connection or a move.")
	dSeatsHeld     = desc("cluster_seats_held_total", "Seats held for their player after the connection ended (Config.Reconnect).")
	dSeatsRemoved  = desc("cluster_seats_removed_total", "Held seats whose hold ran out: the player was removed from the room.")
	dSeatsReplaced = desc("cluster_seats_replaced_total", "Live connections replaced by a newer connection of the same player (closed with 4002).")
	dSeatsRefused  = desc("cluster_seats_refused_total", "Resume tokens refused: forged, for another room, spent, or their seat gone.")

	clusterDescs = []*prometheus.Desc{dHandoffStarted, dHandoffCompleted, dHandoffFailed, dHandoffAccepted, dHandoffGap, dHandoffGapMax,
		dSeatsResumed, dSeatsHeld, dSeatsRemoved, dSeatsReplaced, dSeatsRefused}
)

// seatFigures are the seat figures of the cluster section, as its page's JSON names them.
type seatFigures struct {
	Resumed  float64 `json:"resumed"`
	Held     float64 `json:"held"`
	Removed  float64 `json:"removed"`
	Replaced float64 `json:"replaced"`
	Refused  float64 `json:"refused"`
}

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
func handoffsOf(snap *stats.Snapshot) (handoffFigures, seatFigures, bool) {
	var page struct {
		Handoffs *handoffFigures `json:"handoffs"`
		Seats    seatFigures     `json:"seats"`
	}
	v, ok := snap.Sections[clusterSection]
	if !ok {
		return handoffFigures{}, seatFigures{}, false
	}
	b, err := json.Marshal(v)
	if err != nil || json.Unmarshal(b, &page) != nil || page.Handoffs == nil || len(page.Handoffs.GapLE) != len(page.Handoffs.GapBounds) {
		return handoffFigures{}, seatFigures{}, false
	}
	return *page.Handoffs, page.Seats, true
}

func collectHandoffs(ch chan<- prometheus.Metric, snap *stats.Snapshot) {
	h, st, ok := handoffsOf(snap)
	if !ok {
		return
	}
	counter(ch, dSeatsResumed, st.Resumed)
	counter(ch, dSeatsHeld, st.Held)
	counter(ch, dSeatsRemoved, st.Removed)
	counter(ch, dSeatsReplaced, st.Replaced)
	counter(ch, dSeatsRefused, st.Refused)
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
