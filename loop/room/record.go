package room

import (
	"fmt"
	"slices"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/hdr"
)

// Room figures. A game room (package loop/room) ticks at a fixed rate; a record keeps what
// its ticks cost and how late they started, what its members' tasks cost, and its inputs.
// A server may hold thousands of rooms, so a record is small: two histograms of one
// significant digit and a ring of per-second loop times.
const (
	// roomHistogramDigits is the precision of a room's histograms: one significant digit
	// (buckets at most 1/16 of their value wide; 528 32-bit counters, about 2 KiB per
	// histogram over roomHistogramMax) rather than the routes' two (37 KiB): a server of
	// 1,000 rooms keeps 2,000 of them, and telling a 1.0 ms tick from a 1.06 ms one is
	// not the question a room's figures answer (is it over budget, is it late).
	roomHistogramDigits = 1

	// roomHistogramMax is the largest tick duration or lateness a room's histograms
	// track; longer ones count as this value (the exact maximum is kept beside them). A
	// tick of a minute is a hang, its exact length no longer matters.
	roomHistogramMax = time.Minute

	// roomRingSeconds is the number of one-second loop-time buckets a record keeps: the 60
	// complete seconds of the longest share window, the current one, and spare slots; a
	// power of two so the index is a mask.
	roomRingSeconds = 64
)

// nsPerSec is a second in the clock's unit.
const nsPerSec = int64(time.Second)

// roomLayout is the layout of every room histogram.
var roomLayout = hdr.NewLayout(int64(roomHistogramMax), roomHistogramDigits)

// roomCounts is roomLayout's number of counters, as a constant so that a room's counters
// are arrays inside the record: a tick then touches one allocation, not three (at 20 Hz a
// room's figures are out of cache, and out of the TLB, by its next tick).
const roomCounts = 528

func init() {
	if roomLayout.Len() != roomCounts {
		panic(fmt.Sprintf("room: roomCounts is %d, the room layout has %d counters", roomCounts, roomLayout.Len()))
	}
}

// record records one room's figures. The zero value is not usable: build it with newRecord
// or Init. Loop-confined (its owner's goroutine).
type record struct {
	// Touched by every tick: first, in as few cache lines as possible (a thousand rooms'
	// figures do not stay in cache between two ticks of a room).
	budget    time.Duration
	ticks     uint64
	overruns  uint64
	durSum    int64
	durMax    int64
	wallSum   int64 // ticks' wall time, parks included (no histogram: sum and max)
	wallMax   int64
	lateSum   int64
	lateMax   int64
	loopTotal int64
	cur       roomSec // the current second's loop time; moved into secs when it ends

	// The histograms' counters in roomLayout (32 bits: 2^32 ticks at 20 Hz is 6 years):
	// tick durations, then tick lateness. Their count is ticks.
	dur, late [roomCounts]uint32

	name     string
	start    int64 // newRoom's clock reading (ns since the owner's epoch)
	state    string
	period   time.Duration
	skipped  uint64
	caughtUp uint64
	panics   uint64
	inputs   uint64
	dropped  uint64
	refused  uint64
	members  int
	queued   int

	secs [roomRingSeconds]roomSec // complete seconds
}

type roomSec struct {
	sec  int64 // which second (now / 1 s) the bucket holds
	busy int64 // loop ns charged to the room in that second
}

// newRoom returns the recorder of a room named name, ticking every period with the
// given budget, created at clock reading now (ns since the owner's epoch). Any goroutine.
func newRecord(name string, period, budget time.Duration, now int64) *record {
	r := &record{}
	r.Init(name, period, budget, now)
	return r
}

// A room's states, as accounting.RoomSnapshot.State shows them.
const (
	roomRunning  = "running"  // ticking
	roomDraining = "draining" // ticking while the server drains (its drain callback ran)
	roomStopped  = "stopped"  // ended: its figures are kept for a while, then freed
)

// Init makes r (a zero record, for instance a field of its owner's struct, so that a tick
// touches one allocation) the recorder newRoom would return.
func (r *record) Init(name string, period, budget time.Duration, now int64) {
	*r = record{name: name, start: now, state: roomRunning, period: period, budget: budget}
	r.cur.sec = -1
	for i := range r.secs {
		r.secs[i].sec = -1
	}
}

// SetState records the room's state (roomRunning, roomDraining or roomStopped).
func (r *record) SetState(s string) { r.state = s }

// Tick records a tick that started late after its deadline, held the loop for dur (its
// on-loop time: parks not included) and took wall from start to return (parks included).
// A tick whose on-loop time is over the budget is an overrun, and Tick reports it: a tick
// that parks on a database for longer than its budget does not hold the loop. Its loop
// time is charged apart (LoopTime). It does not allocate.
func (r *record) Tick(late, dur, wall time.Duration) (overrun bool) {
	r.ticks++
	r.dur[roomIndex(int64(dur))]++
	r.durSum += int64(dur)
	r.durMax = max(r.durMax, int64(dur))
	wall = max(wall, 0)
	r.wallSum += int64(wall)
	r.wallMax = max(r.wallMax, int64(wall))
	late = max(late, 0)
	r.late[roomIndex(int64(late))]++
	r.lateSum += int64(late)
	r.lateMax = max(r.lateMax, int64(late))
	if dur > r.budget {
		r.overruns++
		return true
	}
	return false
}

// roomIndex returns the counter of value v in roomLayout.
func roomIndex(v int64) int { return roomLayout.Index(min(max(v, 0), roomLayout.Limit())) }

// roomSummary reads the percentiles of a room's counters (n values in all) as
// SummaryOf does, with the exact sum and maximum given.
func roomSummary(c *[roomCounts]uint32, n uint64, sum, maxV int64) accounting.Summary {
	s := accounting.Summary{Count: n, Sum: time.Duration(sum), Max: time.Duration(maxV)}
	if n == 0 {
		return s
	}
	var ranks [len(hdr.SummaryQuantiles)]uint64
	var idx [len(hdr.SummaryQuantiles)]int
	for k, q := range hdr.SummaryQuantiles {
		ranks[k] = hdr.Rank(q, n)
	}
	var acc uint64
	k := 0
	for i, v := range c {
		if v == 0 {
			continue
		}
		acc += uint64(v)
		for k < len(ranks) && acc >= ranks[k] {
			idx[k] = i
			k++
		}
		if k == len(ranks) {
			break
		}
	}
	q := func(k int) time.Duration { return min(time.Duration(roomLayout.Top(idx[k])), s.Max) }
	s.P50, s.P90, s.P99, s.P999 = q(0), q(1), q(2), q(3)
	return s
}

// LoopTime charges d of loop time to the room at clock reading now: a member's slices,
// or a tick's. It does not allocate.
func (r *record) LoopTime(now int64, d time.Duration) {
	if d <= 0 {
		return
	}
	r.loopTotal += int64(d)
	if sec := now / nsPerSec; sec != r.cur.sec {
		if r.cur.sec >= 0 {
			r.secs[r.cur.sec&(roomRingSeconds-1)] = r.cur
		}
		r.cur = roomSec{sec: sec}
	}
	r.cur.busy += int64(d)
}

// busyIn returns the loop time charged in second sec.
func (r *record) busyIn(sec int64) int64 {
	if r.cur.sec == sec {
		return r.cur.busy
	}
	if b := &r.secs[sec&(roomRingSeconds-1)]; b.sec == sec {
		return b.busy
	}
	return 0
}

// Skipped counts n tick deadlines that passed and were never run (the late policy
// skipped them).
func (r *record) Skipped(n uint64) { r.skipped += n }

// CaughtUp counts a tick run back to back after a late one, to catch up.
func (r *record) CaughtUp() { r.caughtUp++ }

// Panicked counts a tick that panicked.
func (r *record) Panicked() { r.panics++ }

// Input counts inputs offered to the room: queued, dropped (the queue was full and the
// policy drops) or refused (the queue was full and the caller was told).
func (r *record) Input(queued, dropped, refused uint64) {
	r.inputs += queued
	r.dropped += dropped
	r.refused += refused
}

// SetMembers records the number of member tasks and the current input queue length.
func (r *record) SetMembers(members, queued int) { r.members, r.queued = members, queued }

// Overruns returns the overruns so far.
func (r *record) Overruns() uint64 { return r.overruns }

// share returns the share of the loop's time charged to the room over the last window
// (rounded to whole seconds, at least one) before clock reading now: the complete
// seconds, or fewer when the room is younger. It is 0 for a window with no complete
// second yet.
func (r *record) share(now int64, window time.Duration) float64 {
	n := max(int64(window/time.Second), 1)
	cur := now / nsPerSec // the current, incomplete second
	from := max((cur-n)*nsPerSec, r.start)
	to := cur * nsPerSec
	if to <= from {
		return 0
	}
	var busy int64
	for sec := max(cur-n, 0); sec < cur; sec++ {
		busy += r.busyIn(sec)
	}
	return min(float64(busy)/float64(to-from), 1)
}

// Snapshot returns the room's figures at clock reading now. It allocates nothing but
// the returned value.
func (r *record) Snapshot(now int64) accounting.RoomSnapshot {
	s := accounting.RoomSnapshot{
		Name: r.name, State: r.state, Age: time.Duration(now - r.start), Period: r.period, Budget: r.budget,
		Ticks: r.ticks, Overruns: r.overruns, Skipped: r.skipped, CaughtUp: r.caughtUp, Panics: r.panics,
		TickDuration: roomSummary(&r.dur, r.ticks, r.durSum, r.durMax),
		TickWall:     accounting.Summary{Count: r.ticks, Sum: time.Duration(r.wallSum), Max: time.Duration(r.wallMax)},
		TickLateness: roomSummary(&r.late, r.ticks, r.lateSum, r.lateMax),
		LoopTime:     time.Duration(r.loopTotal),
		Inputs:       r.inputs, Dropped: r.dropped, Refused: r.refused, Queued: r.queued, Members: r.members,
		Rooms: 1,
	}
	for i, w := range accounting.UtilisationWindows {
		s.Share[i] = r.share(now, w)
	}
	return s
}

// DefaultTop is how many rooms the rooms page lists by default: enough to see every
// room that matters on a busy server, small enough to read and to render at once.
const DefaultTop = 20

// TopRooms snapshots rooms at clock reading now: the top n by loop share in full, the
// rest summed into one "other" row. Computing percentiles costs a pass over two
// histograms per listed room; the others cost their share and counters only.
func topRooms(rooms []*record, now int64, n int) accounting.RoomsSnapshot {
	type ranked struct {
		r        *record
		s10, s60 float64
		name     string
	}
	rs := make([]ranked, len(rooms))
	for i, r := range rooms {
		rs[i] = ranked{r: r, s10: r.share(now, 10*time.Second), s60: r.share(now, time.Minute), name: r.name}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		switch {
		case a.s10 != b.s10:
			return cmpDesc(a.s10, b.s10)
		case a.s60 != b.s60:
			return cmpDesc(a.s60, b.s60)
		case a.r.loopTotal != b.r.loopTotal:
			return cmpDesc(float64(a.r.loopTotal), float64(b.r.loopTotal))
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	out := accounting.RoomsSnapshot{Total: len(rooms)}
	n = max(n, 0)
	for i, x := range rs {
		if i < n {
			out.Rooms = append(out.Rooms, x.r.Snapshot(now))
			continue
		}
		if out.Other == nil {
			out.Other = &accounting.RoomSnapshot{Name: "other"}
		}
		o, r := out.Other, x.r
		o.Rooms++
		o.Ticks += r.ticks
		o.Overruns += r.overruns
		o.Skipped += r.skipped
		o.CaughtUp += r.caughtUp
		o.Panics += r.panics
		o.LoopTime += time.Duration(r.loopTotal)
		o.Inputs += r.inputs
		o.Dropped += r.dropped
		o.Refused += r.refused
		o.Queued += r.queued
		o.Members += r.members
		o.TickDuration.Count += r.ticks
		o.TickDuration.Sum += time.Duration(r.durSum)
		o.TickDuration.Max = max(o.TickDuration.Max, time.Duration(r.durMax))
		o.TickWall.Count += r.ticks
		o.TickWall.Sum += time.Duration(r.wallSum)
		o.TickWall.Max = max(o.TickWall.Max, time.Duration(r.wallMax))
		o.TickLateness.Count += r.ticks
		o.TickLateness.Sum += time.Duration(r.lateSum)
		o.TickLateness.Max = max(o.TickLateness.Max, time.Duration(r.lateMax))
		for k, w := range accounting.UtilisationWindows {
			o.Share[k] += r.share(now, w)
		}
	}
	return out
}

func cmpDesc(a, b float64) int {
	if a > b {
		return -1
	}
	if a < b {
		return 1
	}
	return 0
}
