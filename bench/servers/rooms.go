package servers

import (
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// The rooms scenario: game rooms ticking at a fixed rate, each tick a small simulation step
// of calibrated CPU work, with players' inputs queued per room and drained by the tick.
// Both targets create the rooms on POST /rooms/setup, staggered over one period (rooms
// created at different times tick at different phases), and measure their own tick
// lateness the same way: the time from a tick's scheduled deadline (start + k*period) to
// the moment its tick function starts.
const (
	// RoomPeriod is the tick period of every room (20 Hz).
	RoomPeriod = 50 * time.Millisecond
	// RoomBudget is the tick budget: a tick longer than this is an overrun (half the period,
	// the rooms issue's default).
	RoomBudget = RoomPeriod / 2
	// RoomInputQueue bounds each room's queue of inputs; past it an input gets 429.
	RoomInputQueue = 64
	// PlayersPerRoom is how many players each room has (they send the inputs).
	PlayersPerRoom = 4
	// HeavyRoomName names the heavy room of the heavy phase (rooms are named room-N).
	HeavyRoomName = "heavy"
	// HeavyTick is the CPU the heavy room's tick burns.
	HeavyTick = 30 * time.Millisecond
)

// RoomSetup is the JSON body of POST /rooms/setup.
type RoomSetup struct {
	Rooms int `json:"rooms"` // light rooms, named room-0 ... room-(N-1)
	// Iters is the simulation iterations of a light tick (see SimStep), calibrated by the
	// harness so that a tick takes about the scenario's tick work on this machine.
	Iters int `json:"iters"`
	// HeavyIters, when positive, adds the room HeavyRoomName whose ticks run this many.
	HeavyIters int `json:"heavy_iters,omitempty"`
	// PaceUs, when positive, keeps a light tick near this many µs as the server runs: the
	// iterations start at Iters and follow the host's speed (see pacer); the heavy
	// room's keep their ratio to them. Zero keeps Iters fixed.
	PaceUs int `json:"pace_us,omitempty"`
}

// Validate reports the first invalid field. Any goroutine.
func (s RoomSetup) Validate() error {
	switch {
	case s.Rooms <= 0 || s.Rooms > 100_000:
		return errors.New("servers: RoomSetup.Rooms must be in 1..100000, got " + strconv.Itoa(s.Rooms))
	case s.Iters <= 0:
		return errors.New("servers: RoomSetup.Iters must be positive, got " + strconv.Itoa(s.Iters))
	case s.HeavyIters < 0:
		return errors.New("servers: RoomSetup.HeavyIters must not be negative, got " + strconv.Itoa(s.HeavyIters))
	case s.PaceUs < 0:
		return errors.New("servers: RoomSetup.PaceUs must not be negative, got " + strconv.Itoa(s.PaceUs))
	}
	return nil
}

// RoomStats is the JSON body of GET /rooms/stats: the figures since the last
// POST /rooms/reset (or the setup).
type RoomStats struct {
	Rooms    int     `json:"rooms"`     // light rooms
	ElapsedS float64 `json:"elapsed_s"` // since the reset
	// Light is the light rooms' figures, Heavy the heavy room's (nil without one).
	Light RoomFigures  `json:"light"`
	Heavy *RoomFigures `json:"heavy,omitempty"`
	// InputsQueued counts inputs accepted, InputsRefused inputs answered 429 (queue full),
	// InputsApplied inputs drained by ticks.
	InputsQueued  uint64 `json:"inputs_queued"`
	InputsRefused uint64 `json:"inputs_refused"`
	InputsApplied uint64 `json:"inputs_applied"`
	// Iters is a light tick's simulation iterations now (RoomSetup.Iters unless paced).
	Iters int64 `json:"iters"`
}

// RoomFigures are tick figures of a set of rooms.
type RoomFigures struct {
	Ticks    uint64  `json:"ticks"`
	Overruns uint64  `json:"overruns"` // ticks longer than RoomBudget
	Skipped  uint64  `json:"skipped"`  // deadlines missed without a tick
	TickUs   float64 `json:"tick_us"`  // mean tick duration
	// Lateness is the lateness histogram (µs) in HdrHistogram's compressed encoding
	// (hdrhistogram.Histogram.Encode, V2 compressed): decode with hdrhistogram.Decode.
	Lateness string `json:"lateness"`
}

// Input is a player's input: a move.
type Input struct {
	Player uint8
	DX, DY int8
}

// ParseInput parses an input body "p=2&dx=1&dy=-1".
func ParseInput(b []byte) (Input, bool) {
	var in Input
	var seen int
	for len(b) > 0 {
		var kv []byte
		if i := indexByte(b, '&'); i >= 0 {
			kv, b = b[:i], b[i+1:]
		} else {
			kv, b = b, nil
		}
		eq := indexByte(kv, '=')
		if eq < 0 {
			return Input{}, false
		}
		n, err := strconv.Atoi(string(kv[eq+1:]))
		if err != nil {
			return Input{}, false
		}
		switch string(kv[:eq]) {
		case "p":
			if n < 0 || n >= PlayersPerRoom {
				return Input{}, false
			}
			in.Player = uint8(n)
		case "dx":
			in.DX = int8(max(-1, min(1, n)))
		case "dy":
			in.DY = int8(max(-1, min(1, n)))
		default:
			return Input{}, false
		}
		seen++
	}
	return in, seen == 3
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// simEntities is the number of entities a room simulates besides its players.
const simEntities = 32

// RoomState is a room's simulation state. Not safe for concurrent use: baton touches it
// only on the loop, net/http behind the room's mutex.
type RoomState struct {
	Tick    uint64
	players [PlayersPerRoom]struct{ x, y int32 }
	ents    [simEntities]struct{ x, y, vx, vy int32 }
	seed    uint64
}

// NewRoomState returns a room's initial state; seed varies the entities.
func NewRoomState(seed uint64) *RoomState {
	s := &RoomState{seed: seed*0x9E3779B97F4A7C15 + 1}
	for i := range s.ents {
		s.seed = s.seed*6364136223846793005 + 1442695040888963407
		e := &s.ents[i]
		e.x, e.y = int32(s.seed>>40)%1000, int32(s.seed>>20)%1000
		e.vx, e.vy = int32(s.seed>>10)%7-3, int32(s.seed>>5)%7-3
	}
	return s
}

// Apply applies one input.
func (s *RoomState) Apply(in Input) {
	p := &s.players[in.Player%PlayersPerRoom]
	p.x += int32(in.DX)
	p.y += int32(in.DY)
}

// SimStep runs one tick of the simulation: iters passes over the entities (move, bounce off
// the walls, a pseudo-random nudge). The work is deterministic CPU (no sleep, no
// allocation), so its cost per iteration is the same on both targets.
func (s *RoomState) SimStep(iters int) {
	seed := s.seed
	for range iters {
		for i := range s.ents {
			e := &s.ents[i]
			e.x += e.vx
			e.y += e.vy
			if e.x < 0 || e.x > 1000 {
				e.vx = -e.vx
			}
			if e.y < 0 || e.y > 1000 {
				e.vy = -e.vy
			}
			seed = seed*6364136223846793005 + 1442695040888963407
			e.vx += int32(seed>>62) - 1
			e.vy += int32(seed>>61&1) - int32(seed>>60&1)
			e.vx = max(-5, min(5, e.vx))
			e.vy = max(-5, min(5, e.vy))
		}
	}
	s.seed = seed
	s.Tick++
}

// Checksum folds the state into a number (keeps the simulation from being optimised away).
func (s *RoomState) Checksum() uint64 {
	var b [8]byte
	h := s.seed
	for _, e := range s.ents {
		binary.LittleEndian.PutUint32(b[:4], uint32(e.x))
		binary.LittleEndian.PutUint32(b[4:], uint32(e.y))
		h ^= binary.LittleEndian.Uint64(b[:])
		h *= 1099511628211
	}
	return h
}

// CalibrateSim returns the simulation iterations per tick that take about d of CPU on
// this machine (the best of a few timings, so that a preempted one does not count).
func CalibrateSim(d time.Duration) int {
	s := NewRoomState(1)
	const probe = 2000
	best := time.Duration(1<<63 - 1)
	for range 7 {
		t0 := time.Now()
		s.SimStep(probe)
		best = min(best, time.Since(t0))
	}
	sink.Add(s.Checksum())
	return max(1, int(float64(probe)*float64(d)/float64(max(best, 1))))
}

// tickRecorder gathers tick figures and paces the simulation. Both targets use it the same
// way (one mutex; baton would not need it, but the cost is the same for both).
type tickRecorder struct {
	mu                       sync.Mutex
	since                    time.Time
	light, heavy             recorderSet
	queued, refused, applied uint64
	pace                     pacer

	// The iterations of a light and of the heavy tick now: read by the ticks without the
	// mutex, written by the pacer under it.
	lightIters, heavyIters atomic.Int64
}

// pacer holds a light tick near a target duration while the host's speed drifts: this
// shared VM ran the same iterations 0.6-1.6 times as long as calibrated before the run
// (calibration takes the best of a few timings on an idle CPU; the server then shares its
// CPU with the kernel's network work, and the host's speed drifts within minutes).
// Every paceWindow light ticks it scales the iterations by the target over the window's
// median tick (a median, so that a tick the OS preempted does not count), by at most
// paceMaxStep either way. Guarded by tickRecorder.mu.
type pacer struct {
	target time.Duration // 0: not pacing
	base   [2]int64      // RoomSetup.Iters and HeavyIters: the heavy room keeps their ratio
	window []time.Duration
}

const (
	paceWindow  = 1000
	paceMaxStep = 1.25
)

type recorderSet struct {
	lateness                 *hdrhistogram.Histogram
	ticks, overruns, skipped uint64
	tickNs                   int64
}

func newRecorderSet() recorderSet {
	return recorderSet{lateness: hdrhistogram.New(1, 60_000_000, 3)}
}

func newTickRecorder() *tickRecorder {
	r := &tickRecorder{}
	r.reset()
	return r
}

// setup sets the iterations of s, and paces them if s asks for it.
func (r *tickRecorder) setup(s RoomSetup) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pace = pacer{target: time.Duration(s.PaceUs) * time.Microsecond, base: [2]int64{int64(s.Iters), int64(s.HeavyIters)}}
	if r.pace.target > 0 {
		r.pace.window = make([]time.Duration, 0, paceWindow)
	}
	r.lightIters.Store(int64(s.Iters))
	r.heavyIters.Store(int64(s.HeavyIters))
}

// iters returns the iterations a tick runs now: the heavy room's or a light one's.
func (r *tickRecorder) iters(heavy bool) int {
	if heavy {
		return int(r.heavyIters.Load())
	}
	return int(r.lightIters.Load())
}

// paced notes a light tick's duration; every paceWindow of them it sets the iterations.
// r.mu is held.
func (r *tickRecorder) paced(d time.Duration) {
	p := &r.pace
	if p.target <= 0 {
		return
	}
	if p.window = append(p.window, d); len(p.window) < paceWindow {
		return
	}
	slices.Sort(p.window)
	median := p.window[len(p.window)/2]
	p.window = p.window[:0]
	f := min(max(float64(p.target)/float64(max(median, 1)), 1/paceMaxStep), paceMaxStep)
	light := max(int64(float64(r.lightIters.Load())*f), 1)
	r.lightIters.Store(light)
	if p.base[0] > 0 {
		r.heavyIters.Store(p.base[1] * light / p.base[0])
	}
}

func (r *tickRecorder) reset() {
	r.mu.Lock()
	r.since = time.Now()
	r.light, r.heavy = newRecorderSet(), newRecorderSet()
	r.queued, r.refused, r.applied = 0, 0, 0
	r.mu.Unlock()
}

// tick records one tick: its lateness, its duration, deadlines skipped before it and the
// inputs it applied.
func (r *tickRecorder) tick(heavy bool, late, dur time.Duration, skipped uint64, applied int) {
	r.mu.Lock()
	set := &r.light
	if heavy {
		set = &r.heavy
	}
	_ = set.lateness.RecordValue(max(1, min(60_000_000, late.Microseconds())))
	set.ticks++
	set.skipped += skipped
	set.tickNs += int64(dur)
	if dur > RoomBudget {
		set.overruns++
	}
	if !heavy {
		r.paced(dur)
	}
	r.applied += uint64(applied)
	r.mu.Unlock()
}

func (r *tickRecorder) input(ok bool) {
	r.mu.Lock()
	if ok {
		r.queued++
	} else {
		r.refused++
	}
	r.mu.Unlock()
}

func (r *tickRecorder) stats(rooms int, heavy bool) RoomStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := RoomStats{Rooms: rooms, ElapsedS: time.Since(r.since).Seconds(), Light: r.light.figures(),
		InputsQueued: r.queued, InputsRefused: r.refused, InputsApplied: r.applied, Iters: r.lightIters.Load()}
	if heavy {
		h := r.heavy.figures()
		st.Heavy = &h
	}
	return st
}

func (s *recorderSet) figures() RoomFigures {
	f := RoomFigures{Ticks: s.ticks, Overruns: s.overruns, Skipped: s.skipped}
	if s.ticks > 0 {
		f.TickUs = float64(s.tickNs) / float64(s.ticks) / 1e3
	}
	if b, err := s.lateness.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
		f.Lateness = string(b)
	}
	return f
}

// roomName returns the name of light room i.
func roomName(i int) string { return "room-" + strconv.Itoa(i) }

// firstTick is RoomConfig.FirstTick for room i of n made at began (now or a moment ago):
// its first deadline is one period plus its stagger after began, however long making
// the rooms before it took.
func firstTick(i, n int, began time.Time) time.Duration {
	return max(RoomPeriod+stagger(i, n)-time.Since(began), time.Microsecond)
}

// stagger returns when room i of n starts ticking, relative to the setup: rooms are spread
// evenly over one period, as rooms created at different times would be.
func stagger(i, n int) time.Duration { return time.Duration(int64(RoomPeriod) * int64(i) / int64(n)) }
