package promexport

import (
	"encoding/json"

	"github.com/batonrt/baton/loop/stats"
)

// wsSection is the name of the WebSocket stats section.
const wsSection = "websockets"

// wsFigures is what a scrape reads of the WebSocket stats section: its page's JSON, whose
// fields docs/accounting.md defines, decoded here so that the exporter depends on the
// page's documented format rather than on the Go type of the package that registers the
// section.
type wsFigures struct {
	ProtocolErrors uint64        `json:"protocol_errors_total"`
	Routes         []wsRouteFigs `json:"routes"`
}

// wsRouteFigs is one upgrade route's WebSocket figures.
type wsRouteFigs struct {
	Route              string `json:"route"`
	Open               int    `json:"open"`
	Upgrades           uint64 `json:"upgrades_total"`
	MessagesIn         uint64 `json:"messages_in"`
	BytesIn            uint64 `json:"bytes_in"`
	MessagesOut        uint64 `json:"messages_out"`
	BytesOut           uint64 `json:"bytes_out"`
	QueuedBytes        int    `json:"queued_bytes"`
	SlowConsumerCloses uint64 `json:"slow_consumer_closes"`
	PingTimeouts       uint64 `json:"ping_timeouts"`
	PeerCloses         uint64 `json:"peer_closes"`
}

// wsOf returns the WebSocket section of a snapshot, or empty figures when the server has
// none.
func wsOf(snap *stats.Snapshot) wsFigures {
	var f wsFigures
	v, ok := snap.Sections[wsSection]
	if !ok {
		return f
	}
	if b, err := json.Marshal(v); err == nil {
		_ = json.Unmarshal(b, &f)
	}
	return f
}
