package loop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/batonrt/baton/accounting"
)

// wsServer is the server's WebSocket bookkeeping. Loop-confined.
type wsServer struct {
	nextID uint64
	open   int
	routes map[string]*wsRoute
	order  []*wsRoute // in order of first upgrade

	upgrades, slowConsumers, stalls, pingTimeouts, protocolErrors, inputOverflows uint64
	callbackPanics, saturatedRefusals                                             uint64

	later       []*WSConn // callback-form connections with work for wsRunLater
	laterPosted bool      // wsRunLater is posted to the door
	runLater    func()    // s.wsRunLater

	slowLog wsLogLimit
}

// wsLogLimit rate-limits the slow-consumer log line (one per second at most).
type wsLogLimit struct{ next int64 }

func (l *wsLogLimit) allow(s *Server) bool {
	now := s.now()
	if now < l.next {
		return false
	}
	l.next = now + int64(time.Second)
	return true
}

// wsRoute is the WebSocket figures of one route. Loop-confined.
type wsRoute struct {
	pattern                            string
	open                               int
	upgrades                           uint64
	msgsIn, bytesIn, msgsOut, bytesOut uint64
	slowConsumers, pingTimeouts        uint64
	peerCloses                         uint64
	onLoop                             *accounting.Histogram // nanoseconds per message read
	onLoopSum, onLoopMax               time.Duration
}

// wsOnLoopLimit is the largest per-message on-loop time the histogram tells apart (10 s).
const wsOnLoopLimit = int64(10 * time.Second)

func (r *wsRoute) recordOnLoop(d time.Duration) {
	if r.onLoop == nil {
		r.onLoop = accounting.NewHistogram(wsOnLoopLimit, 2)
	}
	r.onLoop.Record(int64(d))
	r.onLoopSum += d
	r.onLoopMax = max(r.onLoopMax, d)
}

// opened registers a new WebSocket of route pattern and gives it its id.
func (ws *wsServer) opened(w *WSConn, pattern string) {
	ws.nextID++
	w.id = ws.nextID
	r := ws.routes[pattern]
	if r == nil {
		if ws.routes == nil {
			ws.routes = map[string]*wsRoute{}
		}
		r = &wsRoute{pattern: pattern}
		ws.routes[pattern] = r
		ws.order = append(ws.order, r)
	}
	w.route = r
	r.open++
	r.upgrades++
	ws.open++
	ws.upgrades++
}

func (ws *wsServer) closed(w *WSConn) {
	w.route.open--
	ws.open--
}

// WebSocket stats page documents. Field names and units are defined in docs/accounting.md.
type (
	wsStatsDoc struct {
		Open                 int          `json:"open"`
		UpgradesTotal        uint64       `json:"upgrades_total"`
		SlowConsumerCloses   uint64       `json:"slow_consumer_closes_total"`
		StallCloses          uint64       `json:"stall_closes_total"`
		PingTimeouts         uint64       `json:"ping_timeouts_total"`
		ProtocolErrors       uint64       `json:"protocol_errors_total"`
		InputOverflows       uint64       `json:"input_overflow_closes_total"`
		CallbackPanics       uint64       `json:"callback_panics_total"`
		SaturatedRefusals    uint64       `json:"saturated_refusals_total"`
		QueuedBytes          int          `json:"queued_bytes"`
		Routes               []wsRouteDoc `json:"routes"`
		ConnectionsShown     int          `json:"connections_shown"`
		Connections          []wsConnDoc  `json:"connections"`
		MaxConnectionsListed int          `json:"max_connections_listed"`
		Config               wsConfigDoc  `json:"config"`
	}
	wsRouteDoc struct {
		Route              string    `json:"route"`
		Open               int       `json:"open"`
		Upgrades           uint64    `json:"upgrades_total"`
		MessagesIn         uint64    `json:"messages_in"`
		BytesIn            uint64    `json:"bytes_in"`
		MessagesOut        uint64    `json:"messages_out"`
		BytesOut           uint64    `json:"bytes_out"`
		QueuedBytes        int       `json:"queued_bytes"`
		SlowConsumerCloses uint64    `json:"slow_consumer_closes"`
		PingTimeouts       uint64    `json:"ping_timeouts"`
		PeerCloses         uint64    `json:"peer_closes"`
		OnLoop             wsSummary `json:"on_loop_per_message"`
	}
	wsSummary struct {
		Count uint64  `json:"count"`
		Mean  float64 `json:"mean_seconds"`
		P50   float64 `json:"p50_seconds"`
		P99   float64 `json:"p99_seconds"`
		Max   float64 `json:"max_seconds"`
	}
	wsConnDoc struct {
		ID          uint64  `json:"id"`
		Route       string  `json:"route"`
		Remote      string  `json:"remote"`
		State       string  `json:"state"`
		Form        string  `json:"form"`
		Subprotocol string  `json:"subprotocol"`
		Age         float64 `json:"age_seconds"`
		MessagesIn  uint64  `json:"messages_in"`
		BytesIn     uint64  `json:"bytes_in"`
		MessagesOut uint64  `json:"messages_out"`
		BytesOut    uint64  `json:"bytes_out"`
		QueuedBytes int     `json:"queued_bytes"`
		OnLoop      float64 `json:"on_loop_seconds"`
		OnLoopMax   float64 `json:"on_loop_max_seconds"`
	}
	wsConfigDoc struct {
		MaxMessageBytes int64   `json:"max_message_bytes"`
		MaxQueuedBytes  int     `json:"max_queued_bytes"`
		PingInterval    float64 `json:"ping_interval_seconds"`
		PongTimeout     float64 `json:"pong_timeout_seconds"`
		StallTimeout    float64 `json:"stall_timeout_seconds"`
		CloseTimeout    float64 `json:"close_timeout_seconds"`
	}
)

// wsMaxListed bounds the connections the page lists (the most queued output first): the
// page must stay small with 10,000 players online.
const wsMaxListed = 100

func seconds(d time.Duration) float64 { return d.Seconds() }

// wsTotals is the websockets page without its connection list, for Snapshot. Loop only.
func (s *Server) wsTotals() WebSocketsSnapshot {
	doc := s.wsSnapshot()
	out := WebSocketsSnapshot{Open: doc.Open, Upgrades: doc.UpgradesTotal, SlowConsumerCloses: doc.SlowConsumerCloses,
		StallCloses: doc.StallCloses, PingTimeouts: doc.PingTimeouts, ProtocolErrors: doc.ProtocolErrors,
		InputOverflows: doc.InputOverflows, CallbackPanics: doc.CallbackPanics, QueuedBytes: doc.QueuedBytes,
		Routes: make([]WebSocketRoute, len(doc.Routes))}
	for i, r := range doc.Routes {
		out.Routes[i] = WebSocketRoute{Route: r.Route, Open: r.Open, Upgrades: r.Upgrades, MessagesIn: r.MessagesIn,
			BytesIn: r.BytesIn, MessagesOut: r.MessagesOut, BytesOut: r.BytesOut, QueuedBytes: r.QueuedBytes,
			SlowConsumerCloses: r.SlowConsumerCloses, PingTimeouts: r.PingTimeouts, PeerCloses: r.PeerCloses}
	}
	return out
}

// wsSnapshot collects the WebSocket figures of the stats page. Loop-confined.
func (s *Server) wsSnapshot() wsStatsDoc {
	ws := &s.ws
	now := s.nanotime()
	cfg := s.cfg.WebSocket
	doc := wsStatsDoc{
		Open: ws.open, UpgradesTotal: ws.upgrades, SlowConsumerCloses: ws.slowConsumers, StallCloses: ws.stalls,
		PingTimeouts: ws.pingTimeouts, ProtocolErrors: ws.protocolErrors, InputOverflows: ws.inputOverflows,
		CallbackPanics:       ws.callbackPanics,
		SaturatedRefusals:    ws.saturatedRefusals,
		MaxConnectionsListed: wsMaxListed,
		Config: wsConfigDoc{MaxMessageBytes: cfg.MaxMessageBytes, MaxQueuedBytes: cfg.MaxQueuedBytes,
			PingInterval: seconds(cfg.PingInterval), PongTimeout: seconds(cfg.PongTimeout),
			StallTimeout: seconds(cfg.StallTimeout), CloseTimeout: seconds(cfg.CloseTimeout)},
		Routes:      []wsRouteDoc{},
		Connections: []wsConnDoc{},
	}
	queued := map[*wsRoute]int{}
	for _, cs := range s.conns.all {
		w := cs.ws
		if w == nil || w.state == wsDone || cs.state == connClosed {
			continue
		}
		q := w.queued()
		queued[w.route] += q
		doc.QueuedBytes += q
		form := "task"
		if w.h != nil {
			form = "callback"
		}
		doc.Connections = append(doc.Connections, wsConnDoc{
			ID: w.id, Route: w.route.pattern, Remote: addrString(w.remote), State: wsStateNames[w.state], Form: form,
			Subprotocol: w.proto, Age: seconds(time.Duration(now - w.since)),
			MessagesIn: w.st.msgsIn, BytesIn: w.st.bytesIn, MessagesOut: w.st.msgsOut, BytesOut: w.st.bytesOut,
			QueuedBytes: q, OnLoop: seconds(w.st.onLoop), OnLoopMax: seconds(w.st.onLoopMax),
		})
	}
	sort.Slice(doc.Connections, func(i, j int) bool {
		a, b := &doc.Connections[i], &doc.Connections[j]
		if a.QueuedBytes != b.QueuedBytes {
			return a.QueuedBytes > b.QueuedBytes
		}
		return a.ID < b.ID
	})
	if len(doc.Connections) > wsMaxListed {
		doc.Connections = doc.Connections[:wsMaxListed]
	}
	doc.ConnectionsShown = len(doc.Connections)
	for _, r := range ws.order {
		rd := wsRouteDoc{Route: r.pattern, Open: r.open, Upgrades: r.upgrades, MessagesIn: r.msgsIn, BytesIn: r.bytesIn,
			MessagesOut: r.msgsOut, BytesOut: r.bytesOut, QueuedBytes: queued[r], SlowConsumerCloses: r.slowConsumers,
			PingTimeouts: r.pingTimeouts, PeerCloses: r.peerCloses}
		if r.onLoop != nil {
			sm := accounting.SummaryOf(r.onLoop, 1, r.onLoopSum, r.onLoopMax)
			rd.OnLoop = wsSummary{Count: sm.Count, Mean: seconds(sm.Mean()), P50: seconds(sm.P50), P99: seconds(sm.P99), Max: seconds(sm.Max)}
		}
		doc.Routes = append(doc.Routes, rd)
	}
	return doc
}

// renderWSStats renders the page as indented JSON or, with text, as tables. Any goroutine.
func renderWSStats(doc wsStatsDoc, text bool) ([]byte, error) {
	if !text {
		return json.MarshalIndent(doc, "", "  ")
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "websockets open %d  upgrades %d  queued %d B  slow-consumer closes %d (stalled %d)  ping timeouts %d  protocol errors %d  input overflows %d  callback panics %d  saturated refusals %d\n\n",
		doc.Open, doc.UpgradesTotal, doc.QueuedBytes, doc.SlowConsumerCloses, doc.StallCloses, doc.PingTimeouts,
		doc.ProtocolErrors, doc.InputOverflows, doc.CallbackPanics, doc.SaturatedRefusals)
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ROUTE\tOPEN\tMSGS IN\tBYTES IN\tMSGS OUT\tBYTES OUT\tQUEUED\tSLOW\tPING TO\tON-LOOP P50\tP99\tMAX\t")
	for _, r := range doc.Routes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", r.Route, r.Open, r.MessagesIn, r.BytesIn,
			r.MessagesOut, r.BytesOut, r.QueuedBytes, r.SlowConsumerCloses, r.PingTimeouts,
			secs(r.OnLoop.P50), secs(r.OnLoop.P99), secs(r.OnLoop.Max))
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	fmt.Fprintf(&buf, "\nconnections (%d shown, most queued first)\n", doc.ConnectionsShown)
	tw = tabwriter.NewWriter(&buf, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ID\tROUTE\tREMOTE\tSTATE\tFORM\tAGE\tMSGS IN\tMSGS OUT\tBYTES OUT\tQUEUED\tON-LOOP\t")
	for _, c := range doc.Connections {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t\n", c.ID, c.Route, c.Remote, c.State, c.Form,
			secs(c.Age), c.MessagesIn, c.MessagesOut, c.BytesOut, c.QueuedBytes, secs(c.OnLoop))
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func secs(v float64) string { return time.Duration(v * float64(time.Second)).String() }

// serveWSStatsHTTP is the websockets page for StatsHandler: snapshot through Post, render
// on the caller's goroutine. Any goroutine.
func (s *Server) serveWSStatsHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.NoAccounting {
		http.NotFound(w, r)
		return
	}
	doc, ok := askLoopHTTP(w, r, s, s.wsSnapshot)
	if !ok {
		return
	}
	text := r.URL.Query().Get("format") == "text"
	out, err := renderWSStats(doc, text)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if text {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	_, _ = w.Write(out)
}

// serveWSStats answers GET prefix/websockets: snapshot on the loop, render off it.
func (s *Server) serveWSStats(c *Ctx) {
	text := c.Query("format") == "text"
	var doc wsStatsDoc
	s.mode.onLoop(c, func() { doc = s.wsSnapshot() })
	var out []byte
	var err error
	s.mode.offLoop(c, func() { out, err = renderWSStats(doc, text) })
	switch {
	case err != nil:
		c.String(500, "500 Internal Server Error: "+err.Error()+"\n")
	case text:
		c.Bytes(200, "text/plain; charset=utf-8", out)
	default:
		c.Bytes(200, "application/json", out)
	}
}
