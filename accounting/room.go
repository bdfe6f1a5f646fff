package accounting

import "time"

// RoomSnapshot is a room's figures at one instant. Plain data.
type RoomSnapshot struct {
	Name     string
	State    string        // "running" (ticking), "draining" (ticking while the server drains: its drain callback ran) or "stopped" (ended: its figures are kept for a while, then freed)
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

// RoomsSnapshot is what the rooms page shows: the rooms with the largest loop share, and
// one row summing the rest. Plain data.
type RoomsSnapshot struct {
	Rooms []RoomSnapshot // the top rooms by 10 s loop share (then 60 s, then name)
	Other *RoomSnapshot  // the sum of the rooms not listed (counts and shares; no percentiles), nil if none
	Total int            // rooms in the table (stopped ones not yet freed included)
}
