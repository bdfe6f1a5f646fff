package loop

import (
	"bytes"
	"net/http"
	"strconv"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/recorder"
)

// roomTable holds the server's rooms: running ones, and stopped ones until their slot is
// freed (roomRetain after they ended). Loop-owned.
type roomTable struct {
	all     []*roomCore
	stopped []*roomCore // ended rooms not freed yet, oldest first
	live    int         // rooms not ended
	log     *recorder.LogLimiter
	retain  time.Duration // roomRetain; tests shorten it
}

// add registers a new room. Loop-confined.
func (t *roomTable) add(c *roomCore, now int64) {
	if t.log == nil {
		// Server-wide cap on overrun lines: each room logs at most once per
		// roomOverrunLogEvery, and a thousand rooms overrunning at once log a sample.
		t.log = recorder.NewLogLimiter(10, time.Second)
		t.retain = roomRetain
	}
	t.sweep(now)
	c.slot = len(t.all)
	t.all = append(t.all, c)
	t.live++
}

// ended records that room c has ended: it is shown as stopped until its slot is freed.
// While the server drains, it counts as a room the drain ended. Loop-confined.
func (t *roomTable) ended(c *roomCore) {
	s := c.srv
	t.live--
	c.endedAt = s.nanotime()
	c.rec.SetState(accounting.RoomStopped)
	t.stopped = append(t.stopped, c)
	if s.life.load() == stateDraining {
		s.drain.report.RoomsEnded++
		s.checkDrained()
	}
}

// sweep frees the slots of rooms that ended more than retain ago. Loop-confined.
func (t *roomTable) sweep(now int64) {
	n := 0
	for _, c := range t.stopped {
		if now-c.endedAt < int64(t.retain) {
			break
		}
		last := len(t.all) - 1
		t.all[c.slot] = t.all[last]
		t.all[c.slot].slot = c.slot
		t.all[last] = nil
		t.all = t.all[:last]
		n++
	}
	if n > 0 {
		clear(t.stopped[:n])
		t.stopped = t.stopped[n:]
	}
}

// drainRooms runs when the drain begins: every running room's OnDrain runs with the
// drain deadline, and rooms without one are stopped. The drain then waits for the rooms
// to end (checkDrained). Loop-confined.
func (s *Server) drainRooms() {
	var deadline time.Time
	if ctx := s.shutdownContext(); ctx != nil {
		deadline, _ = ctx.Deadline()
	}
	rooms := append([]*roomCore(nil), s.rooms.all...) // callbacks may add or stop rooms
	for _, c := range rooms {
		if c.ended || c.stopping {
			continue
		}
		c.rec.SetState(accounting.RoomDraining)
		if c.onDrain == nil {
			c.stopOnLoop()
			continue
		}
		s.safely(func() { c.onDrain(deadline) })
	}
}

// handleRoomsPage mounts prefix/rooms (see HandleStats).
func (s *Server) handleRoomsPage(prefix string) {
	s.Handle("GET "+prefix+"/rooms", s.serveRooms, Exempt())
}

// serveRooms answers the rooms page: the top rooms by loop share (?top=N, default
// recorder.DefaultTopRooms) and an "other" row, as JSON or, with ?format=text, a table.
// Snapshotted on the loop, rendered off it.
func (s *Server) serveRooms(c *Ctx) {
	top, ok := roomsTop(c.Query("top"))
	if !ok {
		c.String(400, "400 Bad Request: top must be a non-negative integer\n")
		return
	}
	text := c.Query("format") == "text"
	var snap accounting.RoomsSnapshot
	s.mode.onLoop(c, func() { snap = s.snapshotRooms(top) })
	var buf bytes.Buffer
	var err error
	s.mode.offLoop(c, func() {
		if text {
			err = accounting.WriteRoomsText(&buf, snap)
		} else {
			err = accounting.WriteRoomsJSON(&buf, snap)
		}
	})
	switch {
	case err != nil:
		c.String(500, "500 Internal Server Error: "+err.Error()+"\n")
	case text:
		c.Bytes(200, "text/plain; charset=utf-8", buf.Bytes())
	default:
		c.Bytes(200, "application/json", buf.Bytes())
	}
}

// roomsTop reads ?top=N (default recorder.DefaultTopRooms).
func roomsTop(q string) (int, bool) {
	if q == "" {
		return recorder.DefaultTopRooms, true
	}
	n, err := strconv.Atoi(q)
	return n, err == nil && n >= 0
}

// serveRoomsHTTP is the rooms page for StatsHandler: snapshot through Post, render on the
// caller's goroutine. Any goroutine.
func (s *Server) serveRoomsHTTP(w http.ResponseWriter, r *http.Request) {
	top, ok := roomsTop(r.URL.Query().Get("top"))
	if !ok {
		http.Error(w, "top must be a non-negative integer", http.StatusBadRequest)
		return
	}
	snap, ok := askLoopHTTP(w, r, s, func() accounting.RoomsSnapshot { return s.snapshotRooms(top) })
	if !ok {
		return
	}
	var buf bytes.Buffer
	var err error
	if r.URL.Query().Get("format") == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		err = accounting.WriteRoomsText(&buf, snap)
	} else {
		w.Header().Set("Content-Type", "application/json")
		err = accounting.WriteRoomsJSON(&buf, snap)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(buf.Bytes())
}

// snapshotRooms takes the rooms page's figures. Loop-confined.
func (s *Server) snapshotRooms(top int) accounting.RoomsSnapshot {
	now := s.nanotime()
	s.rooms.sweep(now)
	recs := make([]*recorder.Room, len(s.rooms.all))
	for i, c := range s.rooms.all {
		c.sync()
		recs[i] = &c.rec
	}
	return recorder.TopRooms(recs, now, top)
}
