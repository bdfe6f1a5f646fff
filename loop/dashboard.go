package loop

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/render"
)

// The live dashboard: HandleStats mounts prefix/ (one self-contained HTML page, embedded)
// and prefix/events (a Server-Sent Events stream of one JSON frame per second). One hub
// per server takes the frames for every subscriber: a goroutine that, while anyone
// listens, takes a Snapshot each DashboardInterval (copied on the loop through Post),
// renders it off the loop and hands it to the subscribers. When the loop does not answer
// (a stall), the frame says which task holds it, from the stall detector, which reads
// without the loop.

//go:embed dashboard.html
var dashboardHTML []byte

const (
	// DashboardInterval is how often the dashboard's event stream sends a frame.
	DashboardInterval = time.Second
	// DashboardMaxSubscribers bounds the dashboard's event streams open at once (each
	// frame is rendered once for all of them); more are answered 503.
	DashboardMaxSubscribers = 8
	// dashTopTasks is how many live and finished tasks a frame lists (the busiest).
	dashTopTasks = 15
	// dashHistory is how many per-interval points of utilisation and lag a frame carries:
	// five minutes.
	dashHistory = 300
	// dashStallAfter is how long the hub waits for the loop's snapshot before it sends a
	// frame that names the task holding the loop.
	dashStallAfter = 1500 * time.Millisecond
	// dashPing is the longest a stream stays silent: a comment line keeps proxies from
	// closing it while the hub has nothing.
	dashPing = 5 * time.Second
)

// dashPoint is one interval of the history chart.
type dashPoint struct {
	Time        float64 `json:"t"`           // unix seconds
	Utilisation float64 `json:"utilisation"` // the loop's busy share over the last complete second
	LagMean     float64 `json:"lag_mean_seconds"`
	LagP99      float64 `json:"lag_p99_seconds"` // the bucket bound holding 99% of the interval's slices
	Slices      uint64  `json:"slices"`
}

// dashStall is what a frame says while the loop does not answer.
type dashStall struct {
	Task    uint64  `json:"task"`
	Route   string  `json:"route"` // the route pattern or background task name
	Elapsed float64 `json:"elapsed_seconds"`
}

// dashFrame is one event of the stream.
type dashFrame struct {
	Time      float64            `json:"time"`
	Loop      json.RawMessage    `json:"loop,omitempty"`
	Routes    json.RawMessage    `json:"routes,omitempty"`
	Tasks     json.RawMessage    `json:"tasks,omitempty"`
	Offload   *OffloadSnapshot   `json:"offload,omitempty"`
	Admission *AdmissionSnapshot `json:"admission,omitempty"`
	History   []dashPoint        `json:"history"`
	Stall     *dashStall         `json:"stall"` // non-nil while the loop does not answer
	// Panels holds, by section name, what each section added with AddStats shows on the
	// dashboard (its Panel of the totals); absent until the section exists.
	Panels map[string]any `json:"panels,omitempty"`
}

// dashHub renders frames for the dashboard's subscribers. Safe for concurrent use.
type dashHub struct {
	s *Server

	mu      sync.Mutex
	subs    int
	running bool
	next    *Future[[]byte] // resolved with the next frame
	last    []byte          // the latest frame, for a new subscriber
	history []dashPoint
	prevLag accounting.Summary
}

// dashboard returns the server's hub, creating it on first use.
func (s *Server) dashboard() *dashHub {
	s.dashOnce.Do(func() { s.dash = &dashHub{s: s, next: NewFuture[[]byte](s.loopRef)} })
	return s.dash
}

// join adds a subscriber and returns the latest frame (nil before the first) and the
// future of the next; ok is false when DashboardMaxSubscribers are open.
func (h *dashHub) join() (last []byte, next *Future[[]byte], ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs >= DashboardMaxSubscribers {
		return nil, nil, false
	}
	h.subs++
	if !h.running {
		h.running = true
		go h.run()
	}
	return h.last, h.next, true
}

func (h *dashHub) leave() {
	h.mu.Lock()
	h.subs--
	h.mu.Unlock()
}

// after returns the future of the frame after the one f carried (f itself while it is
// not resolved). Safe for concurrent use.
func (h *dashHub) after(f *Future[[]byte]) *Future[[]byte] {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.next == f {
		return f // not resolved yet
	}
	return h.next
}

// run publishes a frame each DashboardInterval while anyone listens and the server runs.
func (h *dashHub) run() {
	tick := time.NewTicker(DashboardInterval)
	defer tick.Stop()
	for {
		frame := h.frame()
		h.mu.Lock()
		f := h.next
		h.next, h.last = NewFuture[[]byte](h.s.loopRef), frame
		idle := h.subs == 0
		if idle {
			h.running = false
		}
		h.mu.Unlock()
		f.Resolve(frame, nil)
		if idle {
			return
		}
		select {
		case <-tick.C:
		case <-h.s.done:
			h.mu.Lock()
			h.running = false
			h.mu.Unlock()
			return
		}
	}
}

// frame takes a snapshot and renders it, or, when the loop does not answer within
// dashStallAfter, renders what the stall detector knows. The hub's goroutine.
func (h *dashHub) frame() []byte {
	s := h.s
	fr := dashFrame{Time: float64(time.Now().UnixMilli()) / 1e3}
	ctx, cancel := context.WithTimeout(context.Background(), dashStallAfter)
	snap, err := s.Snapshot(ctx, AllViews)
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		fr.Stall = s.stallNow()
	case err != nil:
		return nil
	default:
		var buf bytes.Buffer
		if render.WriteLoopJSON(&buf, snap.Loop) == nil {
			fr.Loop = slices.Clone(buf.Bytes())
		}
		buf.Reset()
		if render.WriteRoutesJSON(&buf, snap.Routes) == nil {
			fr.Routes = slices.Clone(buf.Bytes())
		}
		buf.Reset()
		tasks := snap.Tasks
		tasks.Live = tasks.Live[:min(len(tasks.Live), dashTopTasks)]
		render.SortTasks(tasks.Finished) // the busiest of the recently finished
		tasks.Finished = tasks.Finished[:min(len(tasks.Finished), dashTopTasks)]
		if render.WriteTasksJSON(&buf, tasks) == nil {
			fr.Tasks = buf.Bytes()
		}
		fr.Offload, fr.Admission = &snap.Offload, &snap.Admission
		fr.Panels = h.s.panels(snap.Sections)
		h.addPoint(fr.Time, &snap.Loop)
	}
	h.mu.Lock()
	fr.History = slices.Clone(h.history)
	h.mu.Unlock()
	out, err := json.Marshal(fr)
	if err != nil {
		return nil
	}
	return out
}

// addPoint appends one interval to the history: utilisation over the last complete
// second and the lag of the slices run since the previous point, from the cumulative
// lag histogram's buckets.
func (h *dashHub) addPoint(t float64, l *accounting.LoopSnapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := dashPoint{Time: t, Utilisation: l.Utilisation[0].Utilisation()}
	prev := h.prevLag
	if prev.Count > l.Lag.Count { // another server's figures cannot come here; be safe
		prev = accounting.Summary{}
	}
	if n := l.Lag.Count - prev.Count; n > 0 {
		p.Slices = n
		p.LagMean = (l.Lag.Sum - prev.Sum).Seconds() / float64(n)
		p.LagP99 = accounting.BucketBounds[accounting.NumBuckets-1].Seconds()
		for k, bound := range accounting.BucketBounds {
			if float64(l.Lag.Buckets[k]-prev.Buckets[k]) >= 0.99*float64(n) {
				p.LagP99 = bound.Seconds()
				break
			}
		}
	}
	h.prevLag = l.Lag
	if len(h.history) == dashHistory {
		copy(h.history, h.history[1:])
		h.history = h.history[:dashHistory-1]
	}
	h.history = append(h.history, p)
}

// stallNow describes the slice holding the loop, from the stall detector (nil without
// one). Any goroutine.
func (s *Server) stallNow() *dashStall {
	w := s.acct.watchdog
	if w == nil {
		return &dashStall{Route: "(the loop does not answer; the stall detector is off)"}
	}
	st := w.Stats()
	route, _ := s.acct.current.Describe(st.CurrentTask)
	return &dashStall{Task: st.CurrentTask, Route: route, Elapsed: st.CurrentElapsed.Seconds()}
}

// handleDashboard mounts the page and its event stream under prefix.
func (s *Server) handleDashboard(prefix string) {
	s.Handle("GET "+prefix+"/", func(c *Ctx) { c.Bytes(200, "text/html; charset=utf-8", dashboardHTML) }, Exempt())
	s.Handle("GET "+prefix+"/events", s.serveDashEvents, Exempt())
}

// sseEvent frames one JSON frame as a Server-Sent Event.
func sseEvent(frame []byte) []byte {
	out := make([]byte, 0, len(frame)+8)
	out = append(out, "data: "...)
	out = append(out, frame...)
	return append(out, "\n\n"...)
}

// serveDashEvents streams the hub's frames to one subscriber on the server itself.
func (s *Server) serveDashEvents(c *Ctx) {
	h := s.dashboard()
	last, next, ok := h.join()
	if !ok {
		c.String(503, "503 Service Unavailable: too many dashboard streams\n")
		return
	}
	defer h.leave()
	c.SetHeader("Cache-Control", "no-cache")
	st := c.Stream(200, "text/event-stream")
	if last != nil {
		if _, err := st.Write(sseEvent(last)); err != nil {
			return
		}
	} else if st.Flush() != nil {
		return
	}
	for {
		frame, err := next.AwaitTimeout(c, dashPing)
		switch {
		case errors.Is(err, ErrTimeout):
			_, err = st.Write([]byte(": ping\n\n"))
		case err == nil && frame != nil:
			_, err = st.Write(sseEvent(frame))
		}
		if err != nil {
			return
		}
		next = h.after(next)
	}
}

// serveDashboardHTTP serves the page and the event stream for StatsHandler; it reports
// whether the path was one of them.
func (s *Server) serveDashboardHTTP(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	switch {
	case len(p) > 0 && p[len(p)-1] == '/':
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(dashboardHTML)
		return true
	case len(p) >= len("/events") && p[len(p)-len("/events"):] == "/events":
	default:
		return false
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return true
	}
	h := s.dashboard()
	last, next, ok := h.join()
	if !ok {
		http.Error(w, "too many dashboard streams", http.StatusServiceUnavailable)
		return true
	}
	defer h.leave()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if last != nil {
		_, _ = w.Write(sseEvent(last))
	}
	fl.Flush()
	ping := time.NewTimer(dashPing)
	defer ping.Stop()
	for {
		select {
		case <-next.sig.channel():
			next.sig.mu.Lock() // pairs with Resolve's write under mu
			frame := next.v
			next.sig.mu.Unlock()
			if frame != nil {
				if _, err := w.Write(sseEvent(frame)); err != nil {
					return true
				}
				fl.Flush()
			}
			next = h.after(next)
			ping.Reset(dashPing)
		case <-ping.C:
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return true
			}
			fl.Flush()
			ping.Reset(dashPing)
		case <-r.Context().Done():
			return true
		case <-s.done:
			return true
		}
	}
}
