package loop

import (
	"io"
	"net/url"
)

// The WebSocket figures as a stats section, until WebSocket moves to package loop/ws and
// registers its own section (with AddStats, under the same name and the same JSON): this
// file, WebSocketsSnapshot and WebSocketRoute (which ws_stats.go's wsTotals still names)
// and the wsBridgeName entry in engine_stats.go go then.

// wsBridgeName is the WebSocket section's name; its page is prefix/websockets and its
// dashboard panel reads the same JSON.
const wsBridgeName = "websockets"

// wsBridgeSection is the "websockets" section: the websockets page (ws_stats.go), summed
// over the loops by sumWSDocs; the dashboard's panel is the page without its connection
// list.
func wsBridgeSection() StatsSection {
	return StatsSection{
		Name: wsBridgeName,
		Take: func(l *Loop, _ url.Values) (any, error) { return l.srv.wsSnapshot(), nil },
		Sum:  sumOf(sumWSDocs),
		JSON: func(w io.Writer, v any) error {
			out, err := renderWSStats(v.(wsStatsDoc), false)
			_, _ = w.Write(out)
			return err
		},
		Text: func(w io.Writer, v any) error {
			out, err := renderWSStats(v.(wsStatsDoc), true)
			_, _ = w.Write(out)
			return err
		},
		Panel: func(v any) any { // none (the dashboard hides its panel) before the first upgrade
			d := v.(wsStatsDoc)
			if d.UpgradesTotal == 0 {
				return nil
			}
			d.Connections, d.ConnectionsShown = nil, 0
			return d
		},
		Series: func(v any) map[string]float64 {
			d := v.(wsStatsDoc)
			out := map[string]float64{"open": float64(d.Open), "queued_bytes": float64(d.QueuedBytes)}
			var in, outMsgs float64
			for _, r := range d.Routes {
				in += float64(r.MessagesIn)
				outMsgs += float64(r.MessagesOut)
			}
			out["messages_in_total"], out["messages_out_total"] = in, outMsgs
			return out
		},
	}
}

// WebSocketsSnapshot is the websockets page's totals and per-route figures (without its
// per-connection list). Counters are since the server started. Plain data. It goes when
// WebSocket moves to package loop/ws.
type WebSocketsSnapshot struct {
	Open               int    // connections open now
	Upgrades           uint64 // upgrades accepted
	SlowConsumerCloses uint64 // closed for not reading (queue over MaxQueuedBytes, or stalled)
	StallCloses        uint64 // of SlowConsumerCloses, those whose output made no progress for StallTimeout
	PingTimeouts       uint64 // dropped for not answering a ping within PongTimeout
	ProtocolErrors     uint64 // closed for a protocol violation (1002, 1007, 1009)
	InputOverflows     uint64 // closed for sending more than the reader took (1008)
	CallbackPanics     uint64 // panics in callback-form handlers
	QueuedBytes        int    // output queued and not yet taken by the kernel, all connections
	Routes             []WebSocketRoute
}

// WebSocketRoute is one upgrade route's WebSocket figures. Plain data. It goes when
// WebSocket moves to package loop/ws.
type WebSocketRoute struct {
	Route                            string // the route pattern that upgraded
	Open                             int
	Upgrades                         uint64
	MessagesIn, BytesIn              uint64
	MessagesOut, BytesOut            uint64
	QueuedBytes                      int
	SlowConsumerCloses, PingTimeouts uint64
	PeerCloses                       uint64 // closes the client began
}

// ws_stats.go's own page handlers and Snapshot conversion are no longer reached (the page
// is the websockets section, served by package loop/stats); they go with ws_stats.go when
// WebSocket moves to loop/ws. Named here so that the build stays clean until then.
var _ = []any{(*Server).wsTotals, (*Server).serveWSStatsHTTP, (*Server).serveWSStats}
