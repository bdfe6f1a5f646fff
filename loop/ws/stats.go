package ws

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/klauspost/compress/flate"

	"github.com/batonrt/baton/internal/hdr"
	"github.com/batonrt/baton/loop"
)

// nextID numbers the connections of the process.
var nextID atomic.Uint64

// stateKey keys a loop's loopState (Loop.Value).
type stateKey struct{}

// loopState is the WebSocket bookkeeping of one loop, kept with Loop.Value.
// Loop-confined.
type loopState struct {
	l      *loop.Loop
	acct   bool // accounting is on: per-message on-loop time is measured
	logger *slog.Logger

	open   int
	conns  []*Conn // open connections, each knowing its index
	routes map[string]*route
	order  []*route // in order of first upgrade
	limits map[limits]*limits

	upgrades, slowConsumers, stalls, pingTimeouts, protocolErrors, inputOverflows uint64
	callbackPanics, saturatedRefusals                                             uint64

	later       []*Conn // callback-form connections with work for runLater
	laterPosted bool    // runLater is posted to the loop
	runLaterFn  func()  // st.runLater

	// fine sweeps the loop's connections at fineEvery when a Config's timeouts need a
	// finer grain than the loop's own connection sweep gives (OnSweep).
	fine      *loop.TaskHandle
	fineEvery time.Duration

	scratch  []byte       // a frame header or close frame being written
	listed   []queuedConn // take's ranking of the open connections, kept between samples
	deflated []byte       // a compressed frame being written (deflate.go)

	// permessage-deflate's compressor, shared by the loop's connections, and its output.
	deflater *flate.Writer
	windowed map[int]*flate.Writer // for clients that limit the window (server_max_window_bits)
	sw       sliceWriter

	// permessage-deflate's decompressor, shared by the loop's connections: a message is
	// decompressed whole when it has arrived (deflate.go).
	inflater io.ReadCloser
	src      inflateSrc
	inflated []byte
	slowLog  logLimit
	panicLog logLimit
}

// stateOf returns l's state, making it (and registering the stats section) on first use.
// Loop-confined.
func stateOf(l *loop.Loop) *loopState {
	made := false
	st := l.Value(stateKey{}, func() any {
		made = true
		cfg := l.Server().Config()
		st := &loopState{l: l, acct: !cfg.NoAccounting, logger: cfg.Logger, routes: map[string]*route{}, limits: map[limits]*limits{}}
		if st.logger == nil {
			st.logger = slog.Default()
		}
		return st
	}).(*loopState)
	if !made {
		return st
	}
	_ = l.Server().AddStats(Section) // once per server: another loop's state finds it added
	return st
}

// limitsOf returns the shared copy of cfg's limits. Loop-confined.
func (st *loopState) limitsOf(cfg *Config) *limits {
	lim := limitsOf(cfg)
	if p := st.limits[lim]; p != nil {
		return p
	}
	p := &lim
	if len(st.limits) < 64 { // a Config made per request must not grow the map
		st.limits[lim] = p
	}
	return p
}

// logLimit rate-limits a log line (one per second at most).
type logLimit struct{ next time.Time }

func (g *logLimit) allow(l *loop.Loop) bool {
	now := l.Now()
	if now.Before(g.next) {
		return false
	}
	g.next = now.Add(time.Second)
	return true
}

// route is the WebSocket figures of one route on one loop. Loop-confined.
type route struct {
	pattern                            string
	lim                                *limits // of the latest upgrade
	open                               int
	upgrades                           uint64
	msgsIn, bytesIn, msgsOut, bytesOut uint64
	slowConsumers, pingTimeouts        uint64
	peerCloses                         uint64
	zIn, zBytesIn, zOut, zBytesOut     uint64         // messages compressed (permessage-deflate) and their bytes on the wire
	onLoop                             *hdr.Histogram // nanoseconds per message read
	onLoopSum, onLoopMax               time.Duration
}

// onLoopLimit is the largest per-message on-loop time the histogram tells apart (10 s).
const onLoopLimit = int64(10 * time.Second)

// onLoopLayout is the routes' histograms' layout (shared: a Layout is immutable).
var onLoopLayout = hdr.NewLayout(onLoopLimit, 2)

func (r *route) recordOnLoop(d time.Duration) {
	if r.onLoop == nil {
		r.onLoop = hdr.New(onLoopLayout)
	}
	r.onLoop.Record(int64(d))
	r.onLoopSum += d
	r.onLoopMax = max(r.onLoopMax, d)
}

// opened registers a new connection of route pattern and gives it its id.
func (st *loopState) opened(w *Conn, pattern string) {
	w.id = nextID.Add(1)
	r := st.routes[pattern]
	if r == nil {
		r = &route{pattern: pattern}
		st.routes[pattern] = r
		st.order = append(st.order, r)
	}
	r.lim = w.lim
	w.route = r
	w.idx = len(st.conns)
	st.conns = append(st.conns, w)
	r.open++
	r.upgrades++
	st.open++
	st.upgrades++
	if every := w.lim.sweepEvery(); every < 500*time.Millisecond && (st.fineEvery == 0 || every < st.fineEvery) {
		if st.fine != nil {
			st.fine.Stop()
		}
		st.fineEvery = every
		st.fine = st.l.Every("ws:sweep", every, func(t *loop.Task) { st.sweep(st.l.Now().UnixNano()) })
	}
}

// closed unregisters an ended connection.
func (st *loopState) closed(w *Conn) {
	if w.route == nil {
		return // ended before it was registered
	}
	w.route.open--
	st.open--
	if i := w.idx; i >= 0 {
		last := len(st.conns) - 1
		st.conns[i] = st.conns[last]
		st.conns[i].idx = i
		st.conns[last] = nil
		st.conns = st.conns[:last]
		w.idx = -1
	}
}

// sweep enforces the timeouts of every connection of the loop. Loop-confined.
func (st *loopState) sweep(now int64) {
	for i := 0; i < len(st.conns); i++ {
		w := st.conns[i]
		w.sweep(now)
		if i < len(st.conns) && st.conns[i] != w {
			i-- // it ended and another took its place
		}
	}
}

// Section is the stats section of WebSocket connections: the page prefix/websockets,
// Snapshot.Sections["websockets"] (a Stats) and a dashboard panel. The first upgrade on a
// server adds it; add it with Server.AddStats to have the page before the first.
var Section = loop.StatsSection{
	Name: "websockets",
	Take: func(l *loop.Loop, q url.Values) (any, error) { return take(l), nil },
	Sum: func(per []any) any {
		docs := make([]Stats, len(per))
		for i, v := range per {
			docs[i] = v.(Stats)
		}
		return sum(docs)
	},
	Text: func(w io.Writer, v any) error {
		out, err := render(v.(Stats))
		if err == nil {
			_, err = w.Write(out)
		}
		return err
	},
	Panel: func(v any) any {
		s := v.(Stats)
		return map[string]any{"open": s.Open, "upgrades_total": s.UpgradesTotal, "queued_bytes": s.QueuedBytes,
			"slow_consumer_closes_total": s.SlowConsumerCloses, "ping_timeouts_total": s.PingTimeouts,
			"protocol_errors_total": s.ProtocolErrors, "routes": s.Routes}
	},
}

// Stats is the WebSocket figures of a loop (or the sum over loops): the section's value.
// Counters are since the server started. Field names and units are defined in
// docs/accounting.md. Plain data.
type Stats struct {
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
	Routes               []RouteStats `json:"routes"`
	ConnectionsShown     int          `json:"connections_shown"`
	Connections          []ConnStats  `json:"connections"`
	MaxConnectionsListed int          `json:"max_connections_listed"`
}

// RouteStats is one upgrade route's figures. OnLoop summarises the on-loop time per
// message read (handling it, in either form), in seconds. Config is the configuration of
// the route's latest upgrade, with its defaults. Plain data.
type RouteStats struct {
	Route              string      `json:"route"`
	Open               int         `json:"open"`
	Upgrades           uint64      `json:"upgrades_total"`
	MessagesIn         uint64      `json:"messages_in"`
	BytesIn            uint64      `json:"bytes_in"`
	MessagesOut        uint64      `json:"messages_out"`
	BytesOut           uint64      `json:"bytes_out"`
	QueuedBytes        int         `json:"queued_bytes"`
	SlowConsumerCloses uint64      `json:"slow_consumer_closes"`
	PingTimeouts       uint64      `json:"ping_timeouts"`
	PeerCloses         uint64      `json:"peer_closes"`
	CompressedIn       uint64      `json:"compressed_messages_in"`
	CompressedBytesIn  uint64      `json:"compressed_bytes_in"`
	CompressedOut      uint64      `json:"compressed_messages_out"`
	CompressedBytesOut uint64      `json:"compressed_bytes_out"`
	OnLoop             perMessage  `json:"on_loop_per_message"`
	Config             routeConfig `json:"config"`
}

// perMessage summarises the on-loop time per message read, in seconds.
type perMessage struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_seconds"`
	P50   float64 `json:"p50_seconds"`
	P99   float64 `json:"p99_seconds"`
	Max   float64 `json:"max_seconds"`
}

// routeConfig is the configuration of a route's latest upgrade, with its defaults.
type routeConfig struct {
	MaxMessageBytes int64   `json:"max_message_bytes"`
	MaxQueuedBytes  int     `json:"max_queued_bytes"`
	PingInterval    float64 `json:"ping_interval_seconds"`
	PongTimeout     float64 `json:"pong_timeout_seconds"`
	StallTimeout    float64 `json:"stall_timeout_seconds"`
	CloseTimeout    float64 `json:"close_timeout_seconds"`
	Compression     bool    `json:"compression"`
	Threshold       int     `json:"compression_threshold_bytes"`
	Takeover        bool    `json:"compression_context_takeover"`
}

// ConnStats is one open connection's figures. Plain data.
type ConnStats struct {
	ID          uint64  `json:"id"`
	Route       string  `json:"route"`
	Remote      string  `json:"remote"`
	State       string  `json:"state"`
	Form        string  `json:"form"`
	Subprotocol string  `json:"subprotocol"`
	Compression string  `json:"compression"`
	Age         float64 `json:"age_seconds"`
	MessagesIn  uint64  `json:"messages_in"`
	BytesIn     uint64  `json:"bytes_in"`
	MessagesOut uint64  `json:"messages_out"`
	BytesOut    uint64  `json:"bytes_out"`
	QueuedBytes int     `json:"queued_bytes"`
	OnLoop      float64 `json:"on_loop_seconds"`
	OnLoopMax   float64 `json:"on_loop_max_seconds"`
}

// queuedConn is an open connection and its queued output, as take ranks them.
type queuedConn struct {
	w *Conn
	q int
}

// maxListed bounds the connections the page lists (the most queued output first): the
// page must stay small with 10,000 players online.
const maxListed = 100

func seconds(d time.Duration) float64 { return d.Seconds() }

// take collects l's figures. Loop-confined (the section's Take).
func take(l *loop.Loop) Stats {
	doc := Stats{MaxConnectionsListed: maxListed, Routes: []RouteStats{}, Connections: []ConnStats{}}
	st, ok := l.Value(stateKey{}, nil).(*loopState)
	if !ok {
		return doc
	}
	now := l.Now()
	doc.Open, doc.UpgradesTotal, doc.SlowConsumerCloses, doc.StallCloses = st.open, st.upgrades, st.slowConsumers, st.stalls
	doc.PingTimeouts, doc.ProtocolErrors, doc.InputOverflows = st.pingTimeouts, st.protocolErrors, st.inputOverflows
	doc.CallbackPanics, doc.SaturatedRefusals = st.callbackPanics, st.saturatedRefusals
	queued := map[*route]int{}
	// Only the maxListed most queued connections are listed: the others are ranked
	// without being described, so that a sample (the dashboard's history takes one every
	// second) costs no string per player.
	list := st.listed[:0]
	for _, w := range st.conns {
		if w.state == stateDone || w.gone {
			continue
		}
		q := w.rc.Queued()
		queued[w.route] += q
		doc.QueuedBytes += q
		list = append(list, queuedConn{w, q})
	}
	slices.SortFunc(list, func(a, b queuedConn) int {
		if a.q != b.q {
			return cmp.Compare(b.q, a.q)
		}
		return cmp.Compare(a.w.id, b.w.id)
	})
	for _, c := range list[:min(len(list), maxListed)] {
		w := c.w
		form := "task"
		if w.h != nil {
			form = "callback"
		}
		remote := ""
		if w.remote != nil {
			remote = w.remote.String()
		}
		comp := ""
		if d := w.dfl; d != nil {
			comp = d.terms()
		}
		doc.Connections = append(doc.Connections, ConnStats{
			ID: w.id, Route: w.route.pattern, Remote: remote, State: stateNames[w.state], Form: form,
			Subprotocol: w.proto, Compression: comp, Age: seconds(now.Sub(w.since)),
			MessagesIn: w.fig.msgsIn, BytesIn: w.fig.bytesIn, MessagesOut: w.fig.msgsOut, BytesOut: w.fig.bytesOut,
			QueuedBytes: c.q, OnLoop: seconds(w.fig.onLoop), OnLoopMax: seconds(w.fig.onLoopMax),
		})
	}
	clear(list) // keep no ended connection alive until the next sample
	st.listed = list[:0]
	doc.ConnectionsShown = len(doc.Connections)
	for _, r := range st.order {
		rd := RouteStats{Route: r.pattern, Open: r.open, Upgrades: r.upgrades, MessagesIn: r.msgsIn, BytesIn: r.bytesIn,
			MessagesOut: r.msgsOut, BytesOut: r.bytesOut, QueuedBytes: queued[r], SlowConsumerCloses: r.slowConsumers,
			PingTimeouts: r.pingTimeouts, PeerCloses: r.peerCloses,
			CompressedIn: r.zIn, CompressedBytesIn: r.zBytesIn, CompressedOut: r.zOut, CompressedBytesOut: r.zBytesOut}
		if r.onLoop != nil {
			sm := hdr.SummaryOf(r.onLoop, 1, r.onLoopSum, r.onLoopMax)
			rd.OnLoop = perMessage{Count: sm.Count, Mean: seconds(sm.Mean()), P50: seconds(sm.P50), P99: seconds(sm.P99), Max: seconds(sm.Max)}
		}
		if lim := r.lim; lim != nil {
			rd.Config = routeConfig{MaxMessageBytes: lim.maxMessage, MaxQueuedBytes: lim.maxQueued,
				PingInterval: seconds(lim.pingInterval), PongTimeout: seconds(lim.pongTimeout),
				StallTimeout: seconds(lim.stall), CloseTimeout: seconds(lim.closeAfter),
				Compression: lim.compress, Threshold: lim.compressThreshold, Takeover: lim.takeover}
		}
		doc.Routes = append(doc.Routes, rd)
	}
	return doc
}

// sortConns orders connections by queued output, most first, then by id.
func sortConns(cs []ConnStats) {
	sort.Slice(cs, func(i, j int) bool {
		a, b := &cs[i], &cs[j]
		if a.QueuedBytes != b.QueuedBytes {
			return a.QueuedBytes > b.QueuedBytes
		}
		return a.ID < b.ID
	})
}

// sum adds the loops' figures: counters and routes add (a route's on-loop time per
// message: counts add, the mean is weighted, percentiles are the worst loop's), and the
// connections most queued are listed up to the page's bound. Any goroutine.
func sum(per []Stats) Stats {
	t := Stats{MaxConnectionsListed: maxListed, Routes: []RouteStats{}, Connections: []ConnStats{}}
	at := map[string]int{}
	for _, p := range per {
		t.Open += p.Open
		t.UpgradesTotal += p.UpgradesTotal
		t.SlowConsumerCloses += p.SlowConsumerCloses
		t.StallCloses += p.StallCloses
		t.PingTimeouts += p.PingTimeouts
		t.ProtocolErrors += p.ProtocolErrors
		t.InputOverflows += p.InputOverflows
		t.CallbackPanics += p.CallbackPanics
		t.SaturatedRefusals += p.SaturatedRefusals
		t.QueuedBytes += p.QueuedBytes
		for _, r := range p.Routes {
			j, ok := at[r.Route]
			if !ok {
				at[r.Route] = len(t.Routes)
				t.Routes = append(t.Routes, r)
				continue
			}
			d := &t.Routes[j]
			d.Open += r.Open
			d.Upgrades += r.Upgrades
			d.MessagesIn += r.MessagesIn
			d.BytesIn += r.BytesIn
			d.MessagesOut += r.MessagesOut
			d.BytesOut += r.BytesOut
			d.QueuedBytes += r.QueuedBytes
			d.SlowConsumerCloses += r.SlowConsumerCloses
			d.PingTimeouts += r.PingTimeouts
			d.PeerCloses += r.PeerCloses
			d.CompressedIn += r.CompressedIn
			d.CompressedBytesIn += r.CompressedBytesIn
			d.CompressedOut += r.CompressedOut
			d.CompressedBytesOut += r.CompressedBytesOut
			if n := d.OnLoop.Count + r.OnLoop.Count; n > 0 {
				d.OnLoop.Mean = (d.OnLoop.Mean*float64(d.OnLoop.Count) + r.OnLoop.Mean*float64(r.OnLoop.Count)) / float64(n)
			}
			d.OnLoop.Count += r.OnLoop.Count
			d.OnLoop.P50, d.OnLoop.P99 = max(d.OnLoop.P50, r.OnLoop.P50), max(d.OnLoop.P99, r.OnLoop.P99)
			d.OnLoop.Max = max(d.OnLoop.Max, r.OnLoop.Max)
		}
		t.Connections = append(t.Connections, p.Connections...)
	}
	sortConns(t.Connections)
	if len(t.Connections) > maxListed {
		t.Connections = t.Connections[:maxListed]
	}
	t.ConnectionsShown = len(t.Connections)
	sort.Slice(t.Routes, func(i, j int) bool { return t.Routes[i].Route < t.Routes[j].Route })
	return t
}

// render renders the figures as tables (the page's ?format=text). Any goroutine.
func render(doc Stats) ([]byte, error) {
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
