package accounting

import (
	"time"
)

// ParkedByReason is a task's time parked, by reason. The reasons' names ("other", "sleep",
// "wait", "offload", "write", "queue") are TaskSample.ParkReason's values and the keys of
// the JSON's parked_by_reason_seconds. Plain data.
type ParkedByReason struct {
	Other   time.Duration // a park with no more specific reason
	Sleep   time.Duration // Sleep (and the wait between Every ticks)
	Wait    time.Duration // waiting for another task (Future, Event, Cond)
	Offload time.Duration // waiting for work running off the loop
	Write   time.Duration // waiting for output backpressure to clear
	Queue   time.Duration // waiting in an admission queue
}

// TaskSample is one task's figures at one instant, plain data: the loop fills it from the
// scheduler's Stats and its own state. Strings are shared, never copied, so storing a
// TaskSample does not allocate. Owned by whoever holds the value.
type TaskSample struct {
	ID         uint64 // task id, unique for the server's lifetime
	Kind       string // "request" (a request's handler) or "background" (a task started with Loop.Go or Loop.Every)
	Route      string // method + pattern, e.g. "GET /users/{id}"; "" for background tasks
	Method     string // request only
	Path       string // request only
	State      string // "ready" (in the ready queue), "running" (holding the loop, or its own thread), "parked" (see ParkReason), "done" (finished) or "queued" (a request in an admission queue: no task yet)
	ParkReason string // while parked: "other", "sleep", "wait", "offload", "write" or "queue"
	Goroutine  uint64 // the coroutine's goroutine id (as in stack dumps), 0 before it ran

	Rounds        uint64        // slices run (times the task was resumed)
	OnLoop        time.Duration // total wall time of its slices: the time it held the loop
	MaxSlice      time.Duration // its longest slice
	SlowSlices    uint64        // slices longer than the scheduler's slow-slice threshold
	SlowTime      time.Duration // total time of those slices
	QueueDelay    time.Duration // total time ready but not running (first run included)
	FirstRunDelay time.Duration // accept (request) or spawn (background) to first slice

	// Parked is the total time parked, by reason.
	Parked ParkedByReason

	CPU         time.Duration // loop-thread CPU time over its slices (when CPUMeasured)
	CPUMeasured bool          // CPU was measured; false: CPU is unknown (JSON null)

	// Age is the time since accept (request) or spawn (background); for a finished task,
	// its total latency.
	Age    time.Duration
	Status int    // response status once known, 0 before
	Stack  string // goroutine stack, only when asked for
}

// ParkedTotal returns the sum of Parked over all reasons. Any goroutine.
func (s *TaskSample) ParkedTotal() time.Duration {
	p := &s.Parked
	return p.Other + p.Sleep + p.Wait + p.Offload + p.Write + p.Queue
}

// meanSlice returns OnLoop/Rounds, the task's mean slice length (0 before it ran). Any
// goroutine.
func (s *TaskSample) meanSlice() time.Duration {
	if s.Rounds == 0 {
		return 0
	}
	return s.OnLoop / time.Duration(s.Rounds)
}

// MarshalJSON encodes the sample as docs/accounting.md defines a task: durations in seconds
// (fields ending in _seconds), counts as integers, snake_case names. Any goroutine.
func (s TaskSample) MarshalJSON() ([]byte, error) {
	return marshalJSON(taskJSON(&s))
}

// taskRecord is the JSON form of a TaskSample: durations in seconds (float64, fields
// ending in _seconds), counts as integers, snake_case names. docs/accounting.md defines
// every field. Plain data.
type taskRecord struct {
	ID             uint64        `json:"id"`
	Kind           string        `json:"kind"`
	Route          string        `json:"route"`
	Method         string        `json:"method"`
	Path           string        `json:"path"`
	State          string        `json:"state"`
	ParkReason     string        `json:"park_reason"`
	Goroutine      uint64        `json:"goroutine"`
	Rounds         uint64        `json:"rounds"`
	OnLoop         float64       `json:"on_loop_seconds"`
	MaxSlice       float64       `json:"max_slice_seconds"`
	MeanSlice      float64       `json:"mean_slice_seconds"`
	SlowSlices     uint64        `json:"slow_slices"`
	Slow           float64       `json:"slow_seconds"`
	QueueDelay     float64       `json:"queue_delay_seconds"`
	FirstRunDelay  float64       `json:"first_run_delay_seconds"`
	Parked         float64       `json:"parked_seconds"`
	ParkedByReason parkedSeconds `json:"parked_by_reason_seconds"`
	CPU            *float64      `json:"cpu_seconds"` // null when not measured
	Age            float64       `json:"age_seconds"`
	Status         int           `json:"status"`
	Stack          string        `json:"stack,omitempty"`
}

// parkedSeconds is TaskSample.Parked in seconds, one field per reason.
// Plain data.
type parkedSeconds struct {
	Other   float64 `json:"other"`
	Sleep   float64 `json:"sleep"`
	Wait    float64 `json:"wait"`
	Offload float64 `json:"offload"`
	Write   float64 `json:"write"`
	Queue   float64 `json:"queue"`
}

// taskJSON returns the JSON form of s (TaskSample.MarshalJSON).
func taskJSON(s *TaskSample) taskRecord {
	r := taskRecord{
		ID: s.ID, Kind: s.Kind, Route: s.Route, Method: s.Method, Path: s.Path,
		State: s.State, ParkReason: s.ParkReason, Goroutine: s.Goroutine,
		Rounds:        s.Rounds,
		OnLoop:        s.OnLoop.Seconds(),
		MaxSlice:      s.MaxSlice.Seconds(),
		MeanSlice:     s.meanSlice().Seconds(),
		SlowSlices:    s.SlowSlices,
		Slow:          s.SlowTime.Seconds(),
		QueueDelay:    s.QueueDelay.Seconds(),
		FirstRunDelay: s.FirstRunDelay.Seconds(),
		Parked:        s.ParkedTotal().Seconds(),
		ParkedByReason: parkedSeconds{
			Other:   s.Parked.Other.Seconds(),
			Sleep:   s.Parked.Sleep.Seconds(),
			Wait:    s.Parked.Wait.Seconds(),
			Offload: s.Parked.Offload.Seconds(),
			Write:   s.Parked.Write.Seconds(),
			Queue:   s.Parked.Queue.Seconds(),
		},
		Age:    s.Age.Seconds(),
		Status: s.Status,
		Stack:  s.Stack,
	}
	if s.CPUMeasured {
		cpu := s.CPU.Seconds()
		r.CPU = &cpu
	}
	return r
}
