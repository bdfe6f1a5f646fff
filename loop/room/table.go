package room

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/render"
	"github.com/batonrt/baton/loop"
)

// table holds one loop's rooms: running ones, and stopped ones until their slot is freed
// (retainStopped after they ended). One per loop, kept with Loop.Value. Loop-confined.
type table struct {
	l      *loop.Loop
	base   time.Time // the origin of the table's clock readings (int64 ns since base)
	acct   bool      // per-task figures are kept (not loop.Config.NoAccounting)
	logger *slog.Logger
	logN   int   // overrun lines logged in the second that began at logSec
	logSec int64 // table clock, the start of the current log second

	all     []*core
	stopped []*core // ended rooms not freed yet, oldest first
	live    int     // rooms not ended
	owner   map[*loop.Task]*core
	byName  map[string]*core // the latest room of each name (Admit finds it)
	node    *node            // the server's node in the directory
	figs    *tableFigures    // for the node's publisher
	retain  time.Duration    // retainStopped; tests shorten it

	drainEnded, drainForced int // rooms that ended during the drain, and at the final stop
}

type tableKey struct{}

// tableOf returns l's room table, making it (and registering the drain hook and the stats
// section) on first use. Loop-confined.
func tableOf(l *loop.Loop) *table {
	srv := l.Server()
	made := false
	t := l.Value(tableKey{}, func() any {
		made = true
		cfg := srv.Config()
		return &table{
			l: l, base: l.Now(), acct: !cfg.NoAccounting, logger: cfg.Logger,
			owner: map[*loop.Task]*core{}, byName: map[string]*core{}, node: nodeOf(srv), figs: &tableFigures{},
			retain: retainStopped,
		}
	}).(*table)
	if !made {
		return t
	}
	t.node.addTable(t.figs)
	l.OnDrain(t.drain)
	_ = srv.AddStats(Section) // once per server: a second loop's table finds it added
	return t
}

// logAllowed reports whether an overrun line may be logged at now: each room logs at most
// once per overrunLogEvery, and the loop's rooms together at most overrunLogBurst lines a
// second, so a thousand rooms overrunning at once log a sample. Loop-confined.
func (t *table) logAllowed(now int64) bool {
	if now-t.logSec >= int64(time.Second) {
		t.logSec, t.logN = now, 0
	}
	if t.logN >= overrunLogBurst {
		return false
	}
	t.logN++
	return true
}

// now is the loop's clock as the table counts it. Loop-confined.
func (t *table) now() int64 { return int64(t.l.Now().Sub(t.base)) }

// timeAt converts a table clock reading to a time.
func (t *table) timeAt(ns int64) time.Time { return t.base.Add(time.Duration(ns)) }

// add registers a new room. Loop-confined.
func (t *table) add(c *core, now int64) {
	t.sweep(now)
	c.slot = len(t.all)
	t.all = append(t.all, c)
	t.live++
	t.byName[c.name] = c
	t.figs.rooms.Add(1)
}

// ended records that room c has ended: it is shown as stopped until its slot is freed,
// and its hold on the drain is released. Loop-confined.
func (t *table) ended(c *core) {
	t.live--
	t.figs.rooms.Add(-1)
	if t.byName[c.name] == c {
		delete(t.byName, c.name)
	}
	c.unclaim()
	c.endedAt = t.now()
	c.rec.SetState(roomStopped)
	t.stopped = append(t.stopped, c)
	switch t.l.Phase() {
	case "draining":
		t.drainEnded++
	case "stopped":
		t.drainForced++ // unwound at the final stop: the drain deadline forced it
	}
	if c.release != nil {
		c.release()
	}
}

// sweep frees the slots of rooms that ended more than retain ago. Loop-confined.
func (t *table) sweep(now int64) {
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

// drain is the loop's OnDrain hook: every running room's OnDrain runs with the drain
// deadline, and rooms without one are stopped. The drain then waits for the rooms to end
// (each holds it until it has). Loop-confined.
func (t *table) drain(deadline time.Time) {
	rooms := append([]*core(nil), t.all...) // callbacks may add or stop rooms
	for _, c := range rooms {
		if c.ended || c.stopping {
			continue
		}
		c.rec.SetState(roomDraining)
		if c.handOffOnDrain(deadline) {
			continue // the room moves to another node, or drains below if it cannot
		}
		if c.onDrain == nil {
			c.stopOnLoop()
			continue
		}
		t.safely(c, func() { c.onDrain(deadline) })
	}
}

// drainAsBefore drains one room without a handoff: its OnDrain, or a stop. Loop-confined.
func (t *table) drainAsBefore(c *core, deadline time.Time) {
	if c.onDrain == nil {
		c.stopOnLoop()
		return
	}
	t.safely(c, func() { c.onDrain(deadline) })
}

// safely runs a room's OnDrain, containing a panic: logged, and the other rooms' hooks
// still run.
func (t *table) safely(c *core, fn func()) {
	defer func() {
		if v := recover(); v != nil {
			c.rec.Panicked()
			t.logger.Error("room: OnDrain panicked", "room", c.name, "panic", v)
		}
	}()
	fn()
}

// Drained returns what the drain did to the rooms of srv's loops: rooms that ended during
// the drain (stopped by it or by their OnDrain, their tasks finished), and rooms forced at
// the final stop (still running when the Shutdown deadline passed). It waits until srv has
// stopped (Server.Done). Any goroutine.
func Drained(srv *loop.Server) (ended, forced int) {
	<-srv.Done()
	for _, l := range srv.Loops() {
		if t, ok := l.Value(tableKey{}, nil).(*table); ok { // the loop is gone: nothing writes
			ended += t.drainEnded
			forced += t.drainForced
		}
	}
	return ended, forced
}

// Figures is the rooms section's value: Snapshot.Sections["rooms"] and the page
// /debug/baton/rooms. The busiest rooms by loop share in full, the rest summed into Other;
// with several loops, the rooms of every loop ranked together (a room's shares are of its
// own loop). Plain data.
type Figures struct {
	accounting.RoomsSnapshot
	top int // how many rooms were asked for (the sum over loops keeps as many)
}

// Section is the rooms' stats section, added to a server with its first room: the page
// prefix/rooms (?top=N rooms, default DefaultTop; ?format=text), the
// section "rooms" of Snapshot (a Figures) and the dashboard's rooms panel.
var Section = loop.StatsSection{
	Name: "rooms",
	Take: func(l *loop.Loop, q url.Values) (any, error) {
		top := DefaultTop
		if s := q.Get("top"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("top must be a non-negative integer")
			}
			top = n
		}
		t, ok := l.Value(tableKey{}, nil).(*table)
		if !ok {
			return Figures{top: top}, nil
		}
		return t.snapshot(top), nil
	},
	Sum: func(per []any) any {
		fs := make([]Figures, len(per))
		for i, v := range per {
			fs[i] = v.(Figures)
		}
		return sum(fs)
	},
	JSON:   func(w io.Writer, v any) error { return render.WriteRoomsJSON(w, v.(Figures).RoomsSnapshot) },
	Text:   func(w io.Writer, v any) error { return render.WriteRoomsText(w, v.(Figures).RoomsSnapshot) },
	Panel:  func(v any) any { return panel(v.(Figures).RoomsSnapshot) },
	Series: func(v any) map[string]float64 { return series(v.(Figures).RoomsSnapshot) },
}

// series returns what the dashboard charts of the rooms over time: ticks, overruns and
// skipped ticks of every room in the table (counters), and the worst tick lateness p99 of
// the listed rooms that run (a gauge; the "other" row keeps no percentiles).
func series(rs accounting.RoomsSnapshot) map[string]float64 {
	var ticks, overruns, skipped uint64
	var late time.Duration
	add := func(r *accounting.RoomSnapshot) {
		ticks += r.Ticks
		overruns += r.Overruns
		skipped += r.Skipped
	}
	for i := range rs.Rooms {
		add(&rs.Rooms[i])
		if rs.Rooms[i].State != roomStopped { // a stopped room's lateness is past
			late = max(late, rs.Rooms[i].TickLateness.P99)
		}
	}
	if rs.Other != nil {
		add(rs.Other)
	}
	return map[string]float64{"rooms": float64(rs.Total), "ticks_total": float64(ticks),
		"overruns_total": float64(overruns), "skipped_total": float64(skipped),
		"tick_lateness_p99_seconds": late.Seconds()}
}

// snapshot takes the rooms page's figures. Loop-confined.
func (t *table) snapshot(top int) Figures {
	now := t.now()
	t.sweep(now)
	recs := make([]*record, len(t.all))
	for i, c := range t.all {
		c.sync()
		recs[i] = &c.rec
	}
	return Figures{RoomsSnapshot: topRooms(recs, now, top), top: top}
}

// sum ranks every loop's listed rooms together, keeps as many as were asked for and sums
// the rest, with every loop's "other" row, into one "other" row. A room's shares are of its
// own loop.
func sum(per []Figures) Figures {
	n := 0
	for _, p := range per {
		n = max(n, p.top)
	}
	var t accounting.RoomsSnapshot
	var all []accounting.RoomSnapshot
	var other *accounting.RoomSnapshot
	addOther := func(r *accounting.RoomSnapshot) {
		if other == nil {
			other = &accounting.RoomSnapshot{Name: "other"}
		}
		other.Ticks += r.Ticks
		other.Overruns += r.Overruns
		other.Skipped += r.Skipped
		other.CaughtUp += r.CaughtUp
		other.Panics += r.Panics
		for _, s := range []struct{ dst, src *accounting.Summary }{{&other.TickDuration, &r.TickDuration}, {&other.TickWall, &r.TickWall}, {&other.TickLateness, &r.TickLateness}} {
			s.dst.Count += s.src.Count
			s.dst.Sum += s.src.Sum
			s.dst.Max = max(s.dst.Max, s.src.Max)
		}
		for w := range other.Share {
			other.Share[w] += r.Share[w]
		}
		other.LoopTime += r.LoopTime
		other.Inputs += r.Inputs
		other.Dropped += r.Dropped
		other.Refused += r.Refused
		other.Queued += r.Queued
		other.Members += r.Members
		other.Rooms += r.Rooms
	}
	for _, p := range per {
		t.Total += p.Total
		all = append(all, p.Rooms...)
		if p.Other != nil {
			addOther(p.Other)
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := &all[i], &all[j]
		if a.Share[1] != b.Share[1] {
			return a.Share[1] > b.Share[1]
		}
		if a.Share[2] != b.Share[2] {
			return a.Share[2] > b.Share[2]
		}
		return a.Name < b.Name
	})
	if len(all) > n {
		for i := n; i < len(all); i++ {
			addOther(&all[i])
		}
		all = all[:n]
	}
	t.Rooms, t.Other = all, other
	return Figures{RoomsSnapshot: t, top: n}
}

// panelTop is how many rooms the dashboard lists: the busiest by loop share; the rest are
// one "other" row.
const panelTop = 10

// panelRow is one row of the dashboard's rooms table: flat, in the page's units
// (milliseconds, percent), busiest first.
type panelRow struct {
	Room     string  `json:"room"`
	State    string  `json:"state"`
	Share10s float64 `json:"loop_share_10s_pct"`
	Ticks    uint64  `json:"ticks"`
	Overruns uint64  `json:"overruns"`
	Skipped  uint64  `json:"skipped"`
	TickP99  float64 `json:"tick_p99_ms"`
	LateP99  float64 `json:"lateness_p99_ms"`
	Inputs   uint64  `json:"inputs"`
	Dropped  uint64  `json:"dropped"`
	Members  int     `json:"members"`
}

// panel returns the dashboard's rooms table (the panelTop busiest rooms that have not
// stopped, then the rest as one row), or nil when the server has no rooms. The dashboard hub's goroutine.
func panel(snap accounting.RoomsSnapshot) json.RawMessage {
	rs := &snap
	if rs.Total == 0 {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	row := func(r *accounting.RoomSnapshot, name string) panelRow {
		return panelRow{Room: name, State: r.State, Share10s: 100 * r.Share[1], Ticks: r.Ticks,
			Overruns: r.Overruns, Skipped: r.Skipped, TickP99: ms(r.TickDuration.P99),
			LateP99: ms(r.TickLateness.P99), Inputs: r.Inputs, Dropped: r.Dropped, Members: r.Members}
	}
	// Stopped rooms stay on the rooms page for a minute (retainStopped); the dashboard
	// shows the rooms that run.
	live := make([]accounting.RoomSnapshot, 0, len(rs.Rooms))
	for _, r := range rs.Rooms {
		if r.State != roomStopped {
			live = append(live, r)
		}
	}
	stopped := len(rs.Rooms) - len(live)
	top := live[:min(len(live), panelTop)]
	rows := make([]panelRow, 0, len(top)+1)
	for i := range top {
		rows = append(rows, row(&top[i], top[i].Name))
	}
	if rest := rs.Total - stopped - len(top); rest > 0 {
		other := panelRow{Room: fmt.Sprintf("other (%d rooms)", rest)} // percentiles do not sum: left 0
		add := func(r *accounting.RoomSnapshot) {
			x := row(r, "")
			other.Share10s += x.Share10s
			other.Ticks += x.Ticks
			other.Overruns += x.Overruns
			other.Skipped += x.Skipped
			other.Inputs += x.Inputs
			other.Dropped += x.Dropped
			other.Members += x.Members
		}
		for i := len(top); i < len(live); i++ {
			add(&live[i])
		}
		if rs.Other != nil {
			add(rs.Other)
		}
		rows = append(rows, other)
	}
	b, err := json.Marshal(rows)
	if err != nil {
		return nil
	}
	return b
}
