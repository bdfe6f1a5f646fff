package stats

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/render"
	"github.com/batonrt/baton/loop"
)

// The live dashboard: Mount and Handler serve prefix/ (one self-contained HTML page,
// embedded) and prefix/events (a Server-Sent Events stream of one JSON frame per
// FrameInterval). One hub per server samples the figures every FrameInterval from the
// time the server is ready until it stops, whether or not a page is open, so the charts
// have no gap for the time nobody watched; while someone watches it also renders a frame
// (tables and the newest point) once for every subscriber. When a loop does not answer (a stall),
// the frame says which task holds it, from the loop's Vitals, read without the loop.

//go:embed dashboard.html
var dashboardHTML []byte

const (
	// FrameInterval is how often the dashboard samples the server's figures and sends a
	// frame to its event streams.
	FrameInterval = time.Second
	// MaxStreams bounds the dashboard's event streams open at once per server (each frame
	// is rendered once for all of them); more are answered 503.
	MaxStreams = 8
	// dashTopTasks is how many live and finished tasks a frame lists (the busiest).
	dashTopTasks = 15
	// dashHistory is how many points the history keeps: five minutes.
	dashHistory = 300
	// dashStallAfter is how long the hub waits for the loops' figures before it sends a
	// frame that names the task holding a loop.
	dashStallAfter = 1500 * time.Millisecond
	// dashPing is the longest a stream stays silent: a comment line keeps proxies from
	// closing it while the hub has nothing.
	dashPing = 5 * time.Second
)

// dashStall is what a frame says while a loop does not answer.
type dashStall struct {
	Loop    int     `json:"loop"`
	Task    uint64  `json:"task"`
	Route   string  `json:"route"` // the route pattern or background task name
	Elapsed float64 `json:"elapsed_seconds"`
}

// dashFrame is one event of the stream.
type dashFrame struct {
	Time      float64                    `json:"time"`
	Loop      json.RawMessage            `json:"loop,omitempty"`
	Routes    json.RawMessage            `json:"routes,omitempty"`
	Tasks     json.RawMessage            `json:"tasks,omitempty"`
	Offload   any                        `json:"offload,omitempty"`
	Admission *accounting.AdmissionStats `json:"admission,omitempty"`
	// Point is the history's newest point (nil during a stall); a new subscriber gets the
	// whole history first, as a "history" event (an array of points).
	Point *dashPoint `json:"point"`
	Stall *dashStall `json:"stall"` // non-nil while a loop does not answer
	// Panels holds, by section name, what each feature's section shows on the dashboard
	// (its Panel of the totals); absent until the section exists.
	Panels map[string]any `json:"panels,omitempty"`
}

// hubs holds each server's hub, from the first Mount or Handler until the server stops.
var hubs sync.Map // *loop.Server -> *hub

// hub samples a server's figures and renders frames for the dashboard's subscribers.
// Safe for concurrent use.
type hub struct {
	srv *loop.Server

	mu      sync.Mutex
	subs    int
	seq     uint64                 // frames published
	last    []byte                 // the latest frame, for a new subscriber
	waiters []*loop.Future[[]byte] // resolved with the next frame
	wake    chan struct{}          // closed when a frame is published, then replaced
	history []dashPoint
	state   sampleState // the hub's goroutine only
}

// hubOf returns srv's hub, starting it on first use: it samples from the time srv is
// ready until it stops.
func hubOf(srv *loop.Server) *hub {
	if h, ok := hubs.Load(srv); ok {
		return h.(*hub)
	}
	h := &hub{srv: srv, wake: make(chan struct{})}
	if got, loaded := hubs.LoadOrStore(srv, h); loaded {
		return got.(*hub)
	}
	go h.run()
	return h
}

// run samples every FrameInterval while the server runs. The hub's goroutine.
func (h *hub) run() {
	defer hubs.Delete(h.srv)
	select {
	case <-h.srv.Ready():
	case <-h.srv.Done():
		return
	}
	tick := time.NewTicker(FrameInterval)
	defer tick.Stop()
	for {
		h.sample()
		select {
		case <-tick.C:
		case <-h.srv.Done():
			return
		}
	}
}

// join adds a subscriber; it reports false when MaxStreams are open.
func (h *hub) join() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs >= MaxStreams {
		return false
	}
	h.subs++
	return true
}

func (h *hub) leave() {
	h.mu.Lock()
	h.subs--
	h.mu.Unlock()
}

// next returns a future of the first frame after the seq-th (resolved at once when there
// is one already) for a subscriber on l, and the frame's number.
func (h *hub) next(l *loop.Loop, seq uint64) (*loop.Future[[]byte], uint64) {
	f := loop.NewFuture[[]byte](l)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seq > seq && h.last != nil {
		f.Resolve(h.last, nil)
		return f, h.seq
	}
	h.waiters = append(h.waiters, f)
	return f, h.seq + 1
}

// latest returns the latest frame, its number, and a channel closed at the next.
func (h *hub) latest() ([]byte, uint64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, h.seq, h.wake
}

// sample takes the figures once: a history point always, and a frame for the
// subscribers when there are any. The hub's goroutine.
func (h *hub) sample() {
	h.mu.Lock()
	watched := h.subs > 0
	h.mu.Unlock()
	fr := dashFrame{Time: float64(time.Now().UnixMilli()) / 1e3}
	v := AllViews
	if !watched {
		v &^= ViewTasks // the tasks are for the table only: each is sampled on the loop
	}
	ctx, cancel := context.WithTimeout(context.Background(), dashStallAfter)
	snap, err := Take(ctx, h.srv, v)
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		fr.Stall = stallNow(h.srv)
	case err != nil:
		return
	default:
		p := h.state.point(fr.Time, &snap, h.srv)
		fr.Point = &p
		h.mu.Lock()
		if len(h.history) == dashHistory {
			copy(h.history, h.history[1:])
			h.history = h.history[:dashHistory-1]
		}
		h.history = append(h.history, p)
		h.mu.Unlock()
	}
	if !watched {
		h.mu.Lock()
		h.last = nil // a new subscriber waits for a fresh frame rather than see an old one
		h.mu.Unlock()
		return
	}
	if err == nil {
		fillFrame(&fr, h.srv, &snap)
	}
	out, err := json.Marshal(fr)
	if err != nil {
		return
	}
	h.publish(out)
}

// historyEvent renders the history so far as the "history" event a new subscriber gets
// first.
func (h *hub) historyEvent() []byte {
	h.mu.Lock()
	b, err := json.Marshal(h.history)
	h.mu.Unlock()
	if err != nil || len(b) == 0 {
		b = []byte("[]")
	}
	out := make([]byte, 0, len(b)+24)
	out = append(out, "event: history\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

// fillFrame renders the snapshot's tables into the frame.
func fillFrame(fr *dashFrame, srv *loop.Server, snap *Snapshot) {
	var buf bytesBuffer
	if render.WriteLoopJSON(&buf, snap.Loop) == nil {
		fr.Loop = buf.take()
	}
	if render.WriteRoutesJSON(&buf, snap.Routes) == nil {
		fr.Routes = buf.take()
	}
	tasks := snap.Tasks
	tasks.Live = tasks.Live[:min(len(tasks.Live), dashTopTasks)]
	render.SortTasks(tasks.Finished) // the busiest of the recently finished
	tasks.Finished = tasks.Finished[:min(len(tasks.Finished), dashTopTasks)]
	if render.WriteTasksJSON(&buf, tasks) == nil {
		fr.Tasks = buf.take()
	}
	fr.Offload, fr.Admission = snap.Offload, &snap.Admission
	fr.Panels = panels(srv, snap.Sections)
}

// publish hands a frame to every subscriber.
func (h *hub) publish(frame []byte) {
	h.mu.Lock()
	h.seq++
	h.last = frame
	ws := h.waiters
	h.waiters = nil
	close(h.wake)
	h.wake = make(chan struct{})
	h.mu.Unlock()
	for _, f := range ws {
		f.Resolve(frame, nil)
	}
}

// panels returns what the dashboard shows of each feature section with a Panel.
func panels(srv *loop.Server, sections map[string]any) map[string]any {
	var out map[string]any
	for _, sec := range srv.StatsSections() {
		v, ok := sections[sec.Name]
		if !ok || sec.Panel == nil {
			continue
		}
		if out == nil {
			out = map[string]any{}
		}
		out[sec.Name] = sec.Panel(v)
	}
	return out
}

// stallNow names the slice holding a loop, from the loops' Vitals (read without the
// loops); the longest-running one when several are held. Any goroutine.
func stallNow(srv *loop.Server) *dashStall {
	var st *dashStall
	for _, l := range srv.Loops() {
		v := l.Vitals()
		if !v.Running || (st != nil && v.SliceFor.Seconds() <= st.Elapsed) {
			continue
		}
		route := v.Task
		if route == "" {
			route = "(unnamed: accounting is off)"
		}
		st = &dashStall{Loop: l.Index(), Task: v.TaskID, Route: route, Elapsed: v.SliceFor.Seconds()}
	}
	if st == nil {
		st = &dashStall{Route: "(a loop does not answer; no task is running on it)"}
	}
	return st
}

// sseEvent frames one JSON frame as a Server-Sent Event.
func sseEvent(frame []byte) []byte {
	out := make([]byte, 0, len(frame)+8)
	out = append(out, "data: "...)
	out = append(out, frame...)
	return append(out, "\n\n"...)
}

// serveLoop streams the hub's frames to one subscriber on the server itself.
func (h *hub) serveLoop(c *loop.Ctx) {
	if !h.join() {
		c.String(503, "503 Service Unavailable: too many dashboard streams\n")
		return
	}
	defer h.leave()
	c.SetHeader("Cache-Control", "no-cache")
	st := c.Stream(200, "text/event-stream")
	if _, err := st.Write(h.historyEvent()); err != nil {
		return
	}
	last, seq, _ := h.latest()
	if last != nil {
		if _, err := st.Write(sseEvent(last)); err != nil {
			return
		}
	} else if _, err := st.Write(nil); err != nil { // the head now: the client sees the stream open
		return
	}
	f, seq := h.next(c.Loop(), seq)
	for {
		frame, err := f.Await(c, dashPing)
		switch {
		case errors.Is(err, loop.ErrTimeout):
			_, err = st.Write([]byte(": ping\n\n"))
		case err == nil:
			if frame != nil {
				_, err = st.Write(sseEvent(frame))
			}
			f, seq = h.next(c.Loop(), seq)
		}
		if err != nil {
			return
		}
	}
}

// serveHTTP streams the hub's frames to one subscriber of Handler.
func (h *hub) serveHTTP(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	if !h.join() {
		http.Error(w, "too many dashboard streams", http.StatusServiceUnavailable)
		return
	}
	defer h.leave()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(h.historyEvent())
	last, seq, wake := h.latest()
	if last != nil {
		_, _ = w.Write(sseEvent(last))
	}
	fl.Flush()
	ping := time.NewTimer(dashPing)
	defer ping.Stop()
	for {
		select {
		case <-wake:
			var frame []byte
			var now uint64
			frame, now, wake = h.latest()
			if frame != nil && now != seq {
				if _, err := w.Write(sseEvent(frame)); err != nil {
					return
				}
				fl.Flush()
			}
			seq = now
			ping.Reset(dashPing)
		case <-ping.C:
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return
			}
			fl.Flush()
			ping.Reset(dashPing)
		case <-r.Context().Done():
			return
		case <-h.srv.Done():
			return
		}
	}
}
