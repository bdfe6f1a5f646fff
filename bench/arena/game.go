// Package arena is the game of the arena scenario, the same as the shared rig's
// (../shared/peers/arena, game/game.go: same formats, same steps, so that figures from
// both can be set side by side): the wire formats of an input (16 bytes, client to
// server) and of a room's state (120 bytes, server to its 4 players, once per 50 ms
// tick), and the simulation a tick runs. The bench servers (package servers) and the
// load generator (package arenaload) share it. Nothing here is safe for concurrent use
// unless it says so: a Sim belongs to its room.
package arena

import (
	"encoding/binary"
	"math"
	"time"
)

// Sizes and timing of the game.
const (
	Players   = 4                     // players per room
	Period    = 50 * time.Millisecond // room tick: 20 Hz
	InputSize = 16                    // bytes of one input message
	StateSize = 120                   // bytes of one state message

	// State layout (little endian). The player block repeats Players times.
	offRoom    = 0  // u32 room number
	offTick    = 4  // u32 tick counter
	offStamp   = 8  // u64 server wall clock at encoding, Unix ns
	offPlayers = 16 // Players x 24 bytes
	playerSize = 24 // x, y, vx, vy f32; ack u32 (last input seq applied); inputs u32 (applied so far)
	offApplied = 112
	offCheck   = 116

	speed = 200 // units per second at full stick
	size  = 1000
)

// Input is what a player sends: its sequence number (from 1) and its stick.
// Wire: seq u32, dx f32, dy f32, buttons u32.
type Input struct {
	Slot    int // the player's slot in its room (0..Players-1); not on the wire
	Seq     uint32
	DX, DY  float32
	Buttons uint32
}

// AppendInput appends in's 16 wire bytes to b.
func AppendInput(b []byte, in Input) []byte {
	b = binary.LittleEndian.AppendUint32(b, in.Seq)
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(in.DX))
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(in.DY))
	return binary.LittleEndian.AppendUint32(b, in.Buttons)
}

// ParseInput reads an input message (stick clamped to -1..1, NaN to -1); ok is false
// when p is not InputSize bytes.
func ParseInput(p []byte) (in Input, ok bool) {
	if len(p) != InputSize {
		return in, false
	}
	in.Seq = binary.LittleEndian.Uint32(p)
	in.DX = clamp(math.Float32frombits(binary.LittleEndian.Uint32(p[4:])), -1, 1)
	in.DY = clamp(math.Float32frombits(binary.LittleEndian.Uint32(p[8:])), -1, 1)
	in.Buttons = binary.LittleEndian.Uint32(p[12:])
	return in, true
}

func clamp(v, lo, hi float32) float32 {
	if v != v || v < lo { // NaN too
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

type player struct {
	x, y, vx, vy float32
	dx, dy       float32
	ack, inputs  uint32
}

// Sim is one room's game state. Not safe for concurrent use: the servers own it on
// their loop (baton), under the room's mutex (gorilla).
type Sim struct {
	Room    uint32
	Tick    uint32
	applied uint32
	p       [Players]player
}

// NewSim places the players of room number room at their start.
func NewSim(room uint32) *Sim {
	s := &Sim{Room: room}
	for i := range s.p {
		s.p[i].x = float32(100 + 200*i)
		s.p[i].y = 500
	}
	return s
}

// Apply takes an input: the player's stick and its acknowledged sequence number.
func (s *Sim) Apply(in Input) {
	if in.Slot < 0 || in.Slot >= Players {
		return
	}
	p := &s.p[in.Slot]
	p.dx, p.dy = in.DX, in.DY
	if in.Seq > p.ack {
		p.ack = in.Seq
	}
	p.inputs++
	s.applied++
}

// Step advances the game by one fixed period.
func (s *Sim) Step() {
	s.Tick++
	const dt = float32(Period) / float32(time.Second)
	for i := range s.p {
		p := &s.p[i]
		p.vx, p.vy = p.dx*speed, p.dy*speed
		p.x = wrap(p.x + p.vx*dt)
		p.y = wrap(p.y + p.vy*dt)
	}
}

func wrap(v float32) float32 {
	for v < 0 {
		v += size
	}
	for v >= size {
		v -= size
	}
	return v
}

// Encode writes the state message into b (at least StateSize bytes) stamped with now
// and returns b[:StateSize].
func (s *Sim) Encode(b []byte, now time.Time) []byte {
	b = b[:StateSize]
	le := binary.LittleEndian
	le.PutUint32(b[offRoom:], s.Room)
	le.PutUint32(b[offTick:], s.Tick)
	le.PutUint64(b[offStamp:], uint64(now.UnixNano()))
	for i := range s.p {
		p, o := &s.p[i], offPlayers+i*playerSize
		le.PutUint32(b[o:], math.Float32bits(p.x))
		le.PutUint32(b[o+4:], math.Float32bits(p.y))
		le.PutUint32(b[o+8:], math.Float32bits(p.vx))
		le.PutUint32(b[o+12:], math.Float32bits(p.vy))
		le.PutUint32(b[o+16:], p.ack)
		le.PutUint32(b[o+20:], p.inputs)
	}
	le.PutUint32(b[offApplied:], s.applied)
	var sum uint32
	for _, c := range b[:offCheck] {
		sum = sum*31 + uint32(c)
	}
	le.PutUint32(b[offCheck:], sum)
	return b
}

// State is what a client reads from a state message.
type State struct {
	Room, Tick uint32
	Stamp      int64 // server wall clock at encoding, Unix ns
	Ack        [Players]uint32
}

// ParseState reads a state message; ok is false when p is not StateSize bytes.
func ParseState(p []byte) (st State, ok bool) {
	if len(p) != StateSize {
		return st, false
	}
	le := binary.LittleEndian
	st.Room = le.Uint32(p[offRoom:])
	st.Tick = le.Uint32(p[offTick:])
	st.Stamp = int64(le.Uint64(p[offStamp:]))
	for i := range st.Ack {
		st.Ack[i] = le.Uint32(p[offPlayers+i*playerSize+16:])
	}
	return st, true
}
