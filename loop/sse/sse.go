// Package sse serves Server-Sent Events from baton's loop: a Broker fans published events
// out to every client of its event stream, keeps the latest ones so that a client that
// reconnects with Last-Event-ID gets what it missed, sends a heartbeat on a quiet stream
// (so proxies keep it open), and ends every stream with a final event when the server
// drains. Its figures are the stats section "sse" (the page /debug/baton/sse and
// Snapshot.Sections["sse"]).
//
// Each client is a request handler that parks between events, on the loop (single-thread
// mode) or on its goroutine (multi-thread mode). A Broker is safe for concurrent use:
// Publish from a handler, a room's tick or any goroutine. It is built on package loop's
// exported API only (Ctx.Stream, Event, Loop.Post, Loop.Value, Loop.OnDrain,
// Server.AddStats), as an example of a feature that needs no edit of the engine.
package sse

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/loop"
)

// Defaults of Config.
const (
	// DefaultHistory keeps the last 256 events for clients that reconnect: at 10 events a
	// second, 25 s of them, longer than a browser's reconnection takes.
	DefaultHistory = 256
	// DefaultHeartbeat sends a comment line after 15 s without an event: proxies and load
	// balancers close connections idle for 30-60 s (nginx's proxy_read_timeout is 60 s).
	DefaultHeartbeat = 15 * time.Second
	// DefaultRetry advises clients to reconnect after 2 s (EventSource's own default is
	// about 3 s; a server that restarts behind a load balancer is back sooner).
	DefaultRetry = 2 * time.Second
	// DefaultFinalEvent is the type of the event each stream ends with when the server
	// drains: a client can tell a restart from a dropped connection.
	DefaultFinalEvent = "close"
)

// Config configures a Broker. Name is required; zero fields take the defaults named, a
// negative duration or History turns the feature off.
type Config struct {
	// Name names the broker on the stats page ("chat", "scores").
	Name string
	// History is how many of the latest events are kept for Last-Event-ID resume.
	History int
	// Heartbeat is how long a stream may stay quiet before a comment line is sent.
	Heartbeat time.Duration
	// Retry is the reconnection delay sent to each client in a "retry:" field.
	Retry time.Duration
	// FinalEvent is the type of the event that ends every stream when the server drains
	// (its data is "draining"). Default DefaultFinalEvent.
	FinalEvent string
}

// Validate reports the first invalid field, naming it and its value. Any goroutine.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("sse: Config.Name is empty")
	case strings.ContainsAny(c.FinalEvent, "\r\n"):
		return fmt.Errorf("sse: Config.FinalEvent (%q) must not contain a line break", c.FinalEvent)
	case c.Heartbeat > 0 && c.Heartbeat < time.Millisecond:
		return fmt.Errorf("sse: Config.Heartbeat (%v) must be at least 1ms (0: default %v; negative: none)", c.Heartbeat, DefaultHeartbeat)
	}
	return nil
}

// Event is one Server-Sent Event.
type Event struct {
	// Type is the event's type (the "event:" field); empty is a plain message.
	Type string
	// Data is the event's data; each of its lines becomes a "data:" line.
	Data string
	// ID is the event's id, set by Publish: a number that grows by one per event of the
	// broker, which a reconnecting client sends back as Last-Event-ID.
	ID uint64
}

// Broker is one event stream that any number of clients follow. Safe for concurrent use.
type Broker struct {
	srv *loop.Server
	cfg Config

	mu   sync.Mutex // guards next and hist
	next uint64     // the id of the next event (the first is 1)
	hist []Event    // a ring of the latest events, hist[(id-1) % len]

	hubs   []atomic.Pointer[hub] // hubs[i]: loop i's clients, made on its first client
	events atomic.Int64          // events published
}

// hub is a broker's part on one loop: the Event its clients wait on and their figures.
// Safe for concurrent use (a multi-thread handler updates the figures off the loop).
type hub struct {
	b  *Broker
	l  *loop.Loop
	mu sync.Mutex
	ev *loop.Future[struct{}] // set by the next wake, then replaced; guarded by mu
	st counters
}

// next returns the Event the next wake sets. A client takes it before it looks for new
// events, so that a wake between the look and the wait is not missed (in either mode).
func (h *hub) next() *loop.Future[struct{}] {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ev
}

// wake sets the current Event, waking every client waiting on it, and puts a new one in
// its place. Any goroutine.
func (h *hub) wake() {
	h.mu.Lock()
	ev := h.ev
	h.ev = loop.NewFuture[struct{}](h.l)
	h.mu.Unlock()
	ev.Resolve(struct{}{}, nil)
}

// counters are a hub's figures. Safe for concurrent use.
type counters struct {
	clients, served, resumed, replayed, sent, heartbeats, drained, gaps atomic.Int64
}

// New returns a Broker for srv's clients. It returns cfg.Validate's error. Any goroutine.
func New(srv *loop.Server, cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.History == 0 {
		cfg.History = DefaultHistory
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Retry == 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.FinalEvent == "" {
		cfg.FinalEvent = DefaultFinalEvent
	}
	b := &Broker{srv: srv, cfg: cfg, next: 1, hubs: make([]atomic.Pointer[hub], len(srv.Loops()))}
	if cfg.History > 0 {
		b.hist = make([]Event, cfg.History)
	}
	_ = srv.AddStats(Section) // once per server: a second broker finds it added
	return b, nil
}

// Publish sends ev to every client now following the stream and keeps it for those that
// reconnect; it sets ev's ID and returns it. Data and Type may hold any text; a line
// break in Type is replaced by a space. It never waits for a client. Any goroutine.
func (b *Broker) Publish(ev Event) uint64 {
	ev.Type = strings.NewReplacer("\r", " ", "\n", " ").Replace(ev.Type)
	b.mu.Lock()
	ev.ID = b.next
	b.next++
	if len(b.hist) > 0 {
		b.hist[(ev.ID-1)%uint64(len(b.hist))] = ev
	}
	b.mu.Unlock()
	b.events.Add(1)
	for i := range b.hubs {
		if h := b.hubs[i].Load(); h != nil {
			h.wake()
		}
	}
	return ev.ID
}

// since appends to dst the events after id still in the history and reports whether
// events after id were lost (no longer in the history). Any goroutine.
func (b *Broker) since(dst []Event, id uint64) ([]Event, uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	last := b.next - 1
	if id >= last {
		return dst, last, false
	}
	first := id + 1
	gap := false
	if n := uint64(len(b.hist)); last-id > n {
		first, gap = last-n+1, true
	}
	for x := first; x <= last; x++ {
		dst = append(dst, b.hist[(x-1)%uint64(len(b.hist))])
	}
	return dst, last, gap
}

// hubOf returns loop l's hub, making it (and the hook that wakes its clients when the
// server drains) on first use.
func (b *Broker) hubOf(l *loop.Loop) *hub {
	slot := &b.hubs[l.Index()]
	if h := slot.Load(); h != nil {
		return h
	}
	h := &hub{b: b, l: l, ev: loop.NewFuture[struct{}](l)}
	if slot.CompareAndSwap(nil, h) {
		l.OnDrain(func(time.Time) { h.wake() }) // clients wake, see the drain and end
		_ = l.Post(func() { addHub(l, h) })     // the stats section finds it there
		return h
	}
	return slot.Load()
}

// Serve is the handler of an event stream: it answers the request with text/event-stream
// and sends the broker's events as they are published, until the client goes away or the
// server drains (the stream then ends with the final event). A client that sends
// Last-Event-ID (the header, or a lastEventId query parameter for a first connection that
// cannot set headers) first gets the events after that id still in the history. Mount it
// with Server.Handle ("GET /events"). From the request's task.
func (b *Broker) Serve(c *loop.Ctx) {
	var last uint64
	resumed := false
	if v := c.Header("Last-Event-ID"); v != "" {
		last, resumed = parseID(v)
	} else if v := c.Query("lastEventId"); v != "" {
		last, resumed = parseID(v)
	}
	h := b.hubOf(c.Loop())
	c.SetHeader("Cache-Control", "no-store")
	c.SetHeader("X-Accel-Buffering", "no") // nginx: pass each event on at once
	st := c.Stream(200, "text/event-stream; charset=utf-8")
	h.st.clients.Add(1)
	h.st.served.Add(1)
	defer h.st.clients.Add(-1)
	buf := make([]byte, 0, 512)
	if b.cfg.Retry > 0 {
		buf = append(buf, "retry: "...)
		buf = strconv.AppendInt(buf, b.cfg.Retry.Milliseconds(), 10)
		buf = append(buf, "\n\n"...)
	}
	if !resumed {
		// A new client follows from now on: what was published before is not its.
		b.mu.Lock()
		last = b.next - 1
		b.mu.Unlock()
	} else {
		h.st.resumed.Add(1)
	}
	var evs []Event
	for {
		wake := h.next() // before the look: a later publish sets it
		var gap bool
		evs, last, gap = b.since(evs[:0], last)
		if gap {
			h.st.gaps.Add(1)
		}
		for i := range evs {
			buf = appendEvent(buf, &evs[i])
		}
		if resumed {
			h.st.replayed.Add(int64(len(evs)))
			resumed = false
		}
		h.st.sent.Add(int64(len(evs)))
		clear(evs) // the events' data is the history's
		draining := c.Loop().Phase() != "serving"
		if draining {
			buf = appendEvent(buf, &Event{Type: b.cfg.FinalEvent, Data: "draining", ID: last})
			h.st.drained.Add(1)
		}
		if len(buf) > 0 {
			if _, err := st.Write(buf); err != nil {
				return
			}
			buf = buf[:0] // Write handed it to the connection
		}
		if draining {
			return
		}
		_, err := wake.Await(c, b.cfg.Heartbeat)
		switch {
		case errors.Is(err, loop.ErrTimeout):
			buf = append(buf, ":\n\n"...) // a comment: keeps proxies from closing a quiet stream
			h.st.heartbeats.Add(1)
		case err != nil:
			return // the client went away, or the handler deadline passed
		}
	}
}

// parseID reads a Last-Event-ID: the broker's ids are decimal numbers.
func parseID(v string) (uint64, bool) {
	id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	return id, err == nil
}

// appendEvent appends ev in the event-stream format: id, event and one data line per line
// of its data, then a blank line.
func appendEvent(buf []byte, ev *Event) []byte {
	if ev.ID != 0 {
		buf = append(buf, "id: "...)
		buf = strconv.AppendUint(buf, ev.ID, 10)
		buf = append(buf, '\n')
	}
	if ev.Type != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, ev.Type...)
		buf = append(buf, '\n')
	}
	data := ev.Data
	for {
		line, rest, more := cutLine(data)
		buf = append(buf, "data: "...)
		buf = append(buf, line...)
		buf = append(buf, '\n')
		if !more {
			break
		}
		data = rest
	}
	return append(buf, '\n')
}

// cutLine splits s at its first line break (\r\n, \r or \n, as the event-stream format
// reads them).
func cutLine(s string) (line, rest string, more bool) {
	i := strings.IndexAny(s, "\r\n")
	if i < 0 {
		return s, "", false
	}
	if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
		return s[:i], s[i+2:], true
	}
	return s[:i], s[i+1:], true
}
