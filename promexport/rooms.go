package promexport

import (
	"sync"
	"time"

	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/stats"

	"github.com/batonrt/baton/accounting"
)

// The room counters. A room's figures (ticks, overruns, inputs dropped, ...) count from
// the room's start and leave the server's table a minute after it ends, and the snapshot
// has no server-wide totals, so the sum over the rooms in the table falls when a room
// leaves it: exported as it is, rate() would read each fall as a counter reset and count
// the whole sum again. roomCounters keeps, across scrapes, what the rooms that left
// counted, so the exported figures are counters that survive the rooms.
//
// It is exact while every room is listed by name in the snapshot (accounting.DefaultTopRooms
// rooms at most, stopped ones included) and scrapes come more often than a stopped room
// stays in the table (a minute): a listed room that is gone at the next scrape had its
// final figures in the previous one (a stopped room's figures no longer change). With
// more rooms, the rest are summed into one "other" row, and a room that leaves from there
// cannot be told from the others: the figures then never fall (each fall is absorbed
// into an offset) but may undercount by the growth of the other rooms in the interval
// where a room left. A server-wide total kept by the loop would make them exact in every
// case (docs/observability.md, "Rooms").

// figure indexes one room figure in figures.
const (
	figTicks = iota
	figOverruns
	figSkipped
	figTickNanos // time on the loop of the ticks, nanoseconds
	figLateNanos // tick lateness, nanoseconds
	figInputs
	figDropped // dropped and refused
	numFigures
)

// figures are the counted figures of a room, or of several summed. Plain data.
type figures [numFigures]uint64

func figuresOf(r *accounting.RoomSnapshot) figures {
	return figures{
		figTicks:     r.Ticks,
		figOverruns:  r.Overruns,
		figSkipped:   r.Skipped,
		figTickNanos: uint64(max(r.TickDuration.Sum, 0)),
		figLateNanos: uint64(max(r.TickLateness.Sum, 0)),
		figInputs:    r.Inputs,
		figDropped:   r.Dropped + r.Refused,
	}
}

func (f *figures) add(g figures) {
	for i := range f {
		f[i] += g[i]
	}
}

// covers reports whether every figure of f is at least g's: f can be a later reading of
// the room g was read from.
func (f figures) covers(g figures) bool {
	for i := range f {
		if f[i] < g[i] {
			return false
		}
	}
	return true
}

// seenRoom is a room listed by name in a snapshot.
type seenRoom struct {
	age time.Duration // the room's age at the snapshot
	f   figures
}

// sameRoomSlack is how far a room's age may move from the time between two snapshots
// for the two readings to be of the same room: the snapshot's time and the room's age
// come from two clocks read a moment apart. A room of the same name made again within
// this of the first is taken for it while its figures have not fallen.
const sameRoomSlack = time.Second

// roomCounters turns the rooms' figures into counters (see above). Safe for concurrent
// use.
type roomCounters struct {
	mu       sync.Mutex
	taken    time.Time             // the last snapshot taken into account
	seen     map[string][]seenRoom // its rooms listed by name
	hadOther bool                  // it had an "other" row
	retired  figures               // final figures of the rooms that left the table
	offset   figures               // falls absorbed (rooms that left from the "other" row)
	out      figures               // the figures last returned
}

// update takes the rooms of the snapshot taken at taken into account and returns the
// counters. A snapshot older than one already taken (two scrapes at once) changes
// nothing: its figures are in the later one.
func (c *roomCounters) update(taken time.Time, rs *accounting.RoomsSnapshot) figures {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.taken.IsZero() && !taken.After(c.taken) {
		return c.out
	}
	var sum figures
	seen := make(map[string][]seenRoom, len(rs.Rooms))
	for i := range rs.Rooms {
		r := &rs.Rooms[i]
		f := figuresOf(r)
		sum.add(f)
		seen[r.Name] = append(seen[r.Name], seenRoom{age: r.Age, f: f})
	}
	if rs.Other != nil {
		sum.add(figuresOf(rs.Other))
	}
	// A room listed last time and missing now left the table, unless it may have been
	// folded into the "other" row.
	if !c.taken.IsZero() && !c.hadOther && rs.Other == nil {
		elapsed := taken.Sub(c.taken) // monotonic: both readings come from time.Now
		for name, before := range c.seen {
			now := seen[name]
			used := make([]bool, len(now))
			for _, b := range before {
				found := false
				for k, n := range now {
					d := n.age - b.age - elapsed
					if !used[k] && d > -sameRoomSlack && d < sameRoomSlack && n.f.covers(b.f) {
						used[k], found = true, true
						break
					}
				}
				if !found {
					c.retired.add(b.f)
				}
			}
		}
	}
	sum.add(c.retired)
	sum.add(c.offset)
	for i := range sum {
		if sum[i] < c.out[i] {
			c.offset[i] += c.out[i] - sum[i]
			sum[i] = c.out[i]
		}
	}
	c.taken, c.seen, c.hadOther, c.out = taken, seen, rs.Other != nil, sum
	return sum
}

// roomsOf returns the rooms section of a snapshot (package loop/room's Figures), or an empty
// one when the server has made no room yet.
func roomsOf(snap *stats.Snapshot) *accounting.RoomsSnapshot {
	if f, ok := snap.Sections[room.Section.Name].(room.Figures); ok {
		return &f.RoomsSnapshot
	}
	return &accounting.RoomsSnapshot{}
}
