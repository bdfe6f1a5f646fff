package accounting

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"time"
)

// Room figures. A game room (loop.Room) ticks at a fixed rate; a Room recorder keeps what
// its ticks cost and how late they started, what its members' tasks cost, and its inputs.
// A server may hold thousands of rooms, so a Room is small: two histograms of one
// significant digit and a ring of per-second loop times.
const (
	// RoomHistogramDigits is the precision of a room's histograms: one significant digit
	// (buckets at most 1/16 of their value wide; 528 32-bit counters, about 2 KiB per
	// histogram over RoomHistogramMax) rather than the routes' two (37 KiB): a server of
	// 1,000 rooms keeps 2,000 of them, and telling a 1.0 ms tick from a 1.06 ms one is
	// not the question a room's figures answer (is it over budget, is it late).
	RoomHistogramDigits = 1

	// RoomHistogramMax is the largest tick duration or lateness a room's histograms
	// track; longer ones count as this value (the exact maximum is kept beside them). A
	// tick of a minute is a hang, its exact length no longer matters.
	RoomHistogramMax = time.Minute

	// roomRingSeconds is the number of one-second loop-time buckets a Room keeps: the 60
	// complete seconds of the longest share window, the current one, and spare slots; a
	// power of two so the index is a mask.
	roomRingSeconds = 64
)

// roomLayout is the layout of every room histogram.
var roomLayout = newLayout(int64(RoomHistogramMax), RoomHistogramDigits)

// roomCounts is roomLayout's number of counters, as a constant so that a room's counters
// are arrays inside the Room: a tick then touches one allocation, not three (at 20 Hz a
// room's figures are out of cache, and out of the TLB, by its next tick).
const roomCounts = 528

func init() {
	if roomLayout.n != roomCounts {
		panic(fmt.Sprintf("accounting: roomCounts is %d, the room layout has %d counters", roomCounts, roomLayout.n))
	}
}

// Room records one room's figures. The zero value is not usable: build it with NewRoom
// or Init. Loop-confined (its owner's goroutine).
type Room struct {
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
	start    int64 // NewRoom's clock reading (ns since the owner's epoch)
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

// NewRoom returns the recorder of a room named name, ticking every period with the
// given budget, created at clock reading now (ns since the owner's epoch). Any goroutine.
func NewRoom(name string, period, budget time.Duration, now int64) *Room {
	r := &Room{}
	r.Init(name, period, budget, now)
	return r
}

// Init makes r (a zero Room, for instance a field of its owner's struct, so that a tick
// touches one allocation) the recorder NewRoom would return.
func (r *Room) Init(name string, period, budget time.Duration, now int64) {
	*r = Room{name: name, start: now, state: RoomRunning, period: period, budget: budget}
	r.cur.sec = -1
	for i := range r.secs {
		r.secs[i].sec = -1
	}
}

// Room states, as RoomSnapshot.State shows them.
const (
	RoomRunning  = "running"  // ticking
	RoomDraining = "draining" // ticking while the server drains (its drain callback ran)
	RoomStopped  = "stopped"  // ended: its figures are kept for a while, then freed
)

// Name returns the room's name.
func (r *Room) Name() string { return r.name }

// SetState records the room's state (RoomRunning, RoomDraining or RoomStopped).
func (r *Room) SetState(s string) { r.state = s }

// State returns the state last set.
func (r *Room) State() string { return r.state }

// Tick records a tick that started late after its deadline, held the loop for dur (its
// on-loop time: parks not included) and took wall from start to return (parks included).
// A tick whose on-loop time is over the budget is an overrun, and Tick reports it: a tick
// that parks on a database for longer than its budget does not hold the loop. Its loop
// time is charged apart (LoopTime). It does not allocate.
func (r *Room) Tick(late, dur, wall time.Duration) (overrun bool) {
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
func roomIndex(v int64) int { return roomLayout.index(min(max(v, 0), roomLayout.limit)) }

// roomSummary reads the percentiles of a room's counters (n values in all) as
// SummaryOf does, with the exact sum and maximum given.
func roomSummary(c *[roomCounts]uint32, n uint64, sum, maxV int64) Summary {
	s := Summary{Count: n, Sum: time.Duration(sum), Max: time.Duration(maxV)}
	if n == 0 {
		return s
	}
	var ranks [len(summaryQuantiles)]uint64
	var idx [len(summaryQuantiles)]int
	for k, q := range summaryQuantiles {
		ranks[k] = rank(q, n)
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
	q := func(k int) time.Duration { return min(time.Duration(roomLayout.top(idx[k])), s.Max) }
	s.P50, s.P90, s.P99, s.P999 = q(0), q(1), q(2), q(3)
	return s
}

// LoopTime charges d of loop time to the room at clock reading now: a member's slices,
// or a tick's. It does not allocate.
func (r *Room) LoopTime(now int64, d time.Duration) {
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
func (r *Room) busyIn(sec int64) int64 {
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
func (r *Room) Skipped(n uint64) { r.skipped += n }

// CaughtUp counts a tick run back to back after a late one, to catch up.
func (r *Room) CaughtUp() { r.caughtUp++ }

// Panicked counts a tick that panicked.
func (r *Room) Panicked() { r.panics++ }

// Input counts inputs offered to the room: queued, dropped (the queue was full and the
// policy drops) or refused (the queue was full and the caller was told).
func (r *Room) Input(queued, dropped, refused uint64) {
	r.inputs += queued
	r.dropped += dropped
	r.refused += refused
}

// SetMembers records the number of member tasks and the current input queue length.
func (r *Room) SetMembers(members, queued int) { r.members, r.queued = members, queued }

// Overruns returns the overruns so far.
func (r *Room) Overruns() uint64 { return r.overruns }

// Share returns the share of the loop's time charged to the room over the last window
// (rounded to whole seconds, at least one) before clock reading now: the complete
// seconds, or fewer when the room is younger. It is 0 for a window with no complete
// second yet.
func (r *Room) Share(now int64, window time.Duration) float64 {
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

// RoomSnapshot is a room's figures at one instant. Plain data.
type RoomSnapshot struct {
	Name     string
	State    string        // RoomRunning, RoomDraining or RoomStopped
	Age      time.Duration // since the room was made
	Period   time.Duration // between tick deadlines
	Budget   time.Duration // a tick longer than this is an overrun
	Ticks    uint64        // ticks run
	Overruns uint64        // ticks whose on-loop time was over Budget
	Skipped  uint64        // deadlines passed and never run (late policy)
	CaughtUp uint64        // ticks run back to back to catch up (late policy)
	Panics   uint64        // ticks that panicked

	TickDuration Summary // on-loop time of a tick: its slices from start to return, parks not included
	TickWall     Summary // wall time of a tick, start to return, parks included: Count, Sum and Max only
	TickLateness Summary // deadline to tick start

	// Share of the loop's time spent on the room's ticks and its members' slices over the
	// last 1, 10 and 60 complete seconds (UtilisationWindows).
	Share    [3]float64
	LoopTime time.Duration // in total

	Inputs  uint64 // inputs queued
	Dropped uint64 // inputs dropped: the queue was full
	Refused uint64 // inputs refused: the queue was full, the caller answered 429
	Queued  int    // inputs waiting for the next tick
	Members int    // member tasks (the tick task not included)

	Rooms int // rooms this row stands for: 1, or how many the "other" row sums
}

// Snapshot returns the room's figures at clock reading now. It allocates nothing but
// the returned value.
func (r *Room) Snapshot(now int64) RoomSnapshot {
	s := RoomSnapshot{
		Name: r.name, State: r.state, Age: time.Duration(now - r.start), Period: r.period, Budget: r.budget,
		Ticks: r.ticks, Overruns: r.overruns, Skipped: r.skipped, CaughtUp: r.caughtUp, Panics: r.panics,
		TickDuration: roomSummary(&r.dur, r.ticks, r.durSum, r.durMax),
		TickWall:     Summary{Count: r.ticks, Sum: time.Duration(r.wallSum), Max: time.Duration(r.wallMax)},
		TickLateness: roomSummary(&r.late, r.ticks, r.lateSum, r.lateMax),
		LoopTime:     time.Duration(r.loopTotal),
		Inputs:       r.inputs, Dropped: r.dropped, Refused: r.refused, Queued: r.queued, Members: r.members,
		Rooms: 1,
	}
	for i, w := range UtilisationWindows {
		s.Share[i] = r.Share(now, w)
	}
	return s
}

// RoomsSnapshot is what the rooms page shows: the rooms with the largest loop share, and
// one row summing the rest. Plain data.
type RoomsSnapshot struct {
	Rooms []RoomSnapshot // the top rooms by 10 s loop share (then 60 s, then name)
	Other *RoomSnapshot  // the sum of the rooms not listed (counts and shares; no percentiles), nil if none
	Total int            // rooms in the table (stopped ones not yet freed included)
}

// DefaultTopRooms is how many rooms the rooms page lists by default: enough to see every
// room that matters on a busy server, small enough to read and to render at once.
const DefaultTopRooms = 20

// TopRooms snapshots rooms at clock reading now: the top n by loop share in full, the
// rest summed into one "other" row. Computing percentiles costs a pass over two
// histograms per listed room; the others cost their share and counters only.
func TopRooms(rooms []*Room, now int64, n int) RoomsSnapshot {
	type ranked struct {
		r        *Room
		s10, s60 float64
		name     string
	}
	rs := make([]ranked, len(rooms))
	for i, r := range rooms {
		rs[i] = ranked{r: r, s10: r.Share(now, 10*time.Second), s60: r.Share(now, time.Minute), name: r.name}
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
	out := RoomsSnapshot{Total: len(rooms)}
	n = max(n, 0)
	for i, x := range rs {
		if i < n {
			out.Rooms = append(out.Rooms, x.r.Snapshot(now))
			continue
		}
		if out.Other == nil {
			out.Other = &RoomSnapshot{Name: "other"}
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
		for k, w := range UtilisationWindows {
			o.Share[k] += r.Share(now, w)
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

// JSON documents of the rooms page. Field names and units are defined in docs/rooms.md.
type (
	roomsDoc struct {
		Total int       `json:"rooms_total"`
		Rooms []roomDoc `json:"rooms"`
		Other *roomDoc  `json:"other"`
	}

	roomDoc struct {
		Name         string     `json:"name"`
		State        string     `json:"state,omitempty"`
		Rooms        int        `json:"rooms"`
		Age          float64    `json:"age_seconds,omitempty"`
		Period       float64    `json:"period_seconds,omitempty"`
		Budget       float64    `json:"budget_seconds,omitempty"`
		Ticks        uint64     `json:"ticks"`
		Overruns     uint64     `json:"overruns"`
		Skipped      uint64     `json:"skipped"`
		CaughtUp     uint64     `json:"caught_up"`
		Panics       uint64     `json:"panics"`
		TickDuration summaryDoc `json:"tick_duration"`
		TickWall     wallDoc    `json:"tick_wall"`
		TickLateness summaryDoc `json:"tick_lateness"`
		Share1s      float64    `json:"loop_share_1s"`
		Share10s     float64    `json:"loop_share_10s"`
		Share60s     float64    `json:"loop_share_60s"`
		LoopTime     float64    `json:"loop_seconds"`
		Inputs       uint64     `json:"inputs"`
		Dropped      uint64     `json:"inputs_dropped"`
		Refused      uint64     `json:"inputs_refused"`
		Queued       int        `json:"inputs_queued"`
		Members      int        `json:"members"`
	}
	// wallDoc is a tick's wall time: count, mean and max (no percentiles are kept).
	wallDoc struct {
		Count uint64  `json:"count"`
		Mean  float64 `json:"mean_seconds"`
		Max   float64 `json:"max_seconds"`
	}
)

func roomJSON(r *RoomSnapshot) roomDoc {
	return roomDoc{
		Name: r.Name, State: r.State, Rooms: r.Rooms, Age: r.Age.Seconds(), Period: r.Period.Seconds(),
		Budget: r.Budget.Seconds(), Ticks: r.Ticks, Overruns: r.Overruns, Skipped: r.Skipped,
		CaughtUp: r.CaughtUp, Panics: r.Panics,
		TickDuration: summaryJSON(r.TickDuration), TickLateness: summaryJSON(r.TickLateness),
		TickWall: wallDoc{Count: r.TickWall.Count, Mean: r.TickWall.Mean().Seconds(), Max: r.TickWall.Max.Seconds()},
		Share1s:  r.Share[0], Share10s: r.Share[1], Share60s: r.Share[2], LoopTime: r.LoopTime.Seconds(),
		Inputs: r.Inputs, Dropped: r.Dropped, Refused: r.Refused, Queued: r.Queued, Members: r.Members,
	}
}

// WriteRoomsJSON writes s as JSON. Any goroutine.
func WriteRoomsJSON(w io.Writer, s RoomsSnapshot) error {
	doc := roomsDoc{Total: s.Total, Rooms: make([]roomDoc, len(s.Rooms))}
	for i := range s.Rooms {
		doc.Rooms[i] = roomJSON(&s.Rooms[i])
	}
	if s.Other != nil {
		o := roomJSON(s.Other)
		doc.Other = &o
	}
	return writeJSON(w, doc)
}

// roomColumns are the columns of the rooms text view; times in milliseconds.
const roomColumns = "SHARE_1S\tSHARE_10S\tSHARE_60S\tTICKS\tOVERRUN\tSKIPPED\tCAUGHT_UP\tPANICS\tTICK_P50\tTICK_P99\tTICK_MAX\tWALL_MAX\tLATE_P50\tLATE_P99\tLATE_MAX\tINPUTS\tDROPPED\tREFUSED\tMEMBERS\tSTATE\tROOM"

// WriteRoomsText writes s as a text table, one line per listed room and one for the
// others (percentiles are not summed: "-"). Any goroutine.
func WriteRoomsText(w io.Writer, s RoomsSnapshot) error {
	t := &textWriter{bw: bufio.NewWriter(w)}
	t.printf("baton rooms: %d (top %d by 10 s loop share; times in ms)\n\n", s.Total, len(s.Rooms))
	pct := func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
	row := func(r *RoomSnapshot, full bool) []string {
		p := func(d time.Duration) string {
			if !full {
				return "-"
			}
			return ms(d)
		}
		name := r.Name
		if !full {
			name = fmt.Sprintf("(other: %d rooms)", r.Rooms)
		}
		return []string{
			pct(r.Share[0]), pct(r.Share[1]), pct(r.Share[2]), fmt.Sprint(r.Ticks), fmt.Sprint(r.Overruns),
			fmt.Sprint(r.Skipped), fmt.Sprint(r.CaughtUp), fmt.Sprint(r.Panics),
			p(r.TickDuration.P50), p(r.TickDuration.P99), ms(r.TickDuration.Max), ms(r.TickWall.Max),
			p(r.TickLateness.P50), p(r.TickLateness.P99), ms(r.TickLateness.Max),
			fmt.Sprint(r.Inputs), fmt.Sprint(r.Dropped), fmt.Sprint(r.Refused), fmt.Sprint(r.Members),
			r.State, name,
		}
	}
	rows := make([][]string, 0, len(s.Rooms)+1)
	for i := range s.Rooms {
		rows = append(rows, row(&s.Rooms[i], true))
	}
	if s.Other != nil {
		rows = append(rows, row(s.Other, false))
	}
	t.table(roomColumns, rows)
	return t.flush()
}
