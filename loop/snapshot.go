package loop

import (
	"context"
	"encoding/json"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/recorder"
	"github.com/batonrt/baton/offload"
)

// View selects sections of a Snapshot; combine them with |.
type View uint32

// The sections of a Snapshot.
const (
	ViewLoop      View = 1 << iota // Snapshot.Loop: the loop's health (the loop page)
	ViewRoutes                     // Snapshot.Routes: per-route figures (the routes page)
	ViewTasks                      // Snapshot.Tasks: live and recently finished tasks (the tasks page)
	ViewOffload                    // Snapshot.Offload: the offload pool and gates (the offload page)
	ViewAdmission                  // Snapshot.Admission: slots, queue, refusals (the admission page)
	ViewSections                   // Snapshot.Sections: the sections features added with AddStats (their pages)
)

// AllViews selects every section of a Snapshot.
const AllViews = ViewLoop | ViewRoutes | ViewTasks | ViewOffload | ViewAdmission | ViewSections

// Snapshot is the server's figures at one instant: the same values the stats pages render
// as JSON, as Go structs, for exporters and games that would otherwise parse JSON.
// Sections not asked for are zero; with Config.NoAccounting, Loop, Routes and Tasks are
// always zero. Plain data: the caller owns it.
type Snapshot struct {
	Taken     time.Time                  // when the loop took it
	Loop      accounting.LoopSnapshot    // ViewLoop
	Routes    []accounting.RouteSnapshot // ViewRoutes, sorted by route key
	Tasks     accounting.TasksSnapshot   // ViewTasks
	Offload   OffloadSnapshot            // ViewOffload
	Admission AdmissionSnapshot          // ViewAdmission
	// Sections holds, by name, the figures of each section added with AddStats (a
	// feature's: package loop/room's "rooms"), as its Take returned them (its Sum's with
	// several loops). ViewSections.
	Sections map[string]any
	// Shards holds each shard's own sections, in shard order, with Config.Shards > 1 (nil
	// otherwise); the fields above are then the totals (docs/accounting.md, "Shards").
	Shards []Snapshot
}

// OffloadSnapshot is the offload page's content: the server's offload pool and every gate
// made with Server.NewGate, sorted by name. Plain data.
type OffloadSnapshot struct {
	Pool  offload.Stats
	Gates []offload.GateStats
}

// AdmissionSnapshot is the admission page's content: the admission figures and the
// server-wide counts beside them. Plain data.
type AdmissionSnapshot struct {
	AdmissionStats
	InFlight    int         `json:"in_flight"`    // handlers running or parked, exempt routes included
	Parsed      uint64      `json:"parsed_total"` // requests parsed and dispatched
	PanicsTotal uint64      `json:"panics_total"` // handler and background task panics
	Accept      AcceptStats `json:"accept"`       // connections accepted, shed when descriptors ran out
}

// onLoopViews are the sections read on the loop; the offload pool is safe for concurrent
// use and is read by the caller.
const onLoopViews = ViewLoop | ViewRoutes | ViewTasks | ViewAdmission | ViewSections

// Snapshot returns the sections v of the server's figures. The loop's sections are copied
// on the loop through Post (a copy of plain data: the loop is held only for that; the
// routes' percentiles and buckets are computed from the copied counters afterwards, on the
// caller's goroutine) and the offload pool is read on the caller's goroutine. It waits for the loop until ctx ends and
// returns ctx's error then, or ErrServerClosed when the loop no longer runs posted
// functions; before the server is ready it waits until it is.
//
// Safe for concurrent use, but not on the loop goroutine (a handler in single-thread mode,
// a function given to Post): it would wait for itself. A handler that wants the figures
// calls it from a goroutine of its own, or mounts HandleStats. With Config.Shards > 1
// every shard is asked at once, and Snapshot.Shards holds each one's sections.
func (s *Server) Snapshot(ctx context.Context, v View) (Snapshot, error) {
	if s.shards != nil {
		return s.shards.snapshot(ctx, v) // shard_stats.go
	}
	return s.snapshotOne(ctx, v)
}

// snapshotOne is Snapshot for this shard alone.
func (s *Server) snapshotOne(ctx context.Context, v View) (Snapshot, error) {
	var snap Snapshot
	var routes *recorder.RoutesCopy // the loop's copy of the routes, read below
	if v&onLoopViews != 0 {
		done := make(chan struct{})
		if err := s.post(func() { routes = s.takeViews(&snap, v); close(done) }); err != nil {
			return Snapshot{}, err
		}
		select {
		case <-done:
		case <-ctx.Done():
			return Snapshot{}, ctx.Err() // snap is the posted function's from here on
		case <-s.door.gone:
			select {
			case <-done: // it ran just before the door closed
			default:
				return Snapshot{}, ErrServerClosed
			}
		}
	} else {
		snap.Taken = time.Now()
	}
	snap.Routes = readRoutes(routes) // the percentiles and buckets, off the loop
	if v&ViewLoop != 0 && s.acct.on {
		fillProcess(&snap.Loop) // off the loop (process.go)
	}
	if v&ViewOffload != 0 {
		snap.Offload = s.snapshotOffload()
	}
	return snap, nil
}

// takeViews copies the loop's sections v into dst, except the routes, which it copies raw
// and returns for readRoutes (nil when not asked for or not kept). Loop only.
func (s *Server) takeViews(dst *Snapshot, v View) (routes *recorder.RoutesCopy) {
	dst.Taken = time.Now()
	if s.acct.on {
		if v&ViewLoop != 0 {
			dst.Loop = s.snapshotLoop()
		}
		if v&ViewRoutes != 0 {
			routes = s.takeRoutes(dst.Taken)
		}
		if v&ViewTasks != 0 {
			dst.Tasks = s.snapshotTasks()
		}
	}
	if v&ViewAdmission != 0 {
		dst.Admission = s.admissionSnapshot()
	}
	if v&ViewSections != 0 {
		dst.Sections = s.takeSections()
	}
	return routes
}

// The offload page's JSON: the same conventions as the other pages (snake_case, durations
// in seconds, counters since start ending in _total). docs/accounting.md lists the fields.
type (
	offloadDoc struct {
		Pool  poolDoc   `json:"pool"`
		Gates []gateDoc `json:"gates"`
	}

	poolDoc struct {
		Tokens       int       `json:"tokens"`
		LanesEnabled bool      `json:"lanes_enabled"`
		Closed       bool      `json:"closed"`
		Workers      int       `json:"workers"`
		IdleWorkers  int       `json:"idle_workers"`
		Nested       uint64    `json:"nested_total"`
		Lanes        []laneDoc `json:"lanes"`
		Keys         []keyDoc  `json:"keys"`
		KeysKnown    int       `json:"keys_known"`
		KeysEvicted  uint64    `json:"keys_evicted_total"`
	}

	laneDoc struct {
		Lane        string             `json:"lane"`
		Tokens      int                `json:"tokens"`
		KeyCap      int                `json:"key_cap"`
		InUse       int                `json:"in_use"`
		Waiting     int                `json:"waiting"`
		Capped      int                `json:"capped"`
		CappedWaits uint64             `json:"capped_waits_total"`
		Started     uint64             `json:"started_total"`
		Completed   uint64             `json:"completed_total"`
		Rejected    uint64             `json:"rejected_total"`
		Cancelled   uint64             `json:"cancelled_total"`
		TimedOut    uint64             `json:"timed_out_total"`
		Panicked    uint64             `json:"panicked_total"`
		Migrated    uint64             `json:"migrated_total"`
		Wait        accounting.Summary `json:"wait"`
		Run         accounting.Summary `json:"run"`
	}

	keyDoc struct {
		Key         string  `json:"key"`
		Estimate    float64 `json:"estimate_seconds"`
		Lane        string  `json:"lane"`
		Seeded      bool    `json:"seeded"`
		Calls       uint64  `json:"calls_total"`
		Flips       uint64  `json:"flips_total"`
		Midway      uint64  `json:"midway_total"`
		InUse       int     `json:"in_use"`
		Capped      int     `json:"capped"`
		CappedWaits uint64  `json:"capped_waits_total"`
	}

	gateDoc struct {
		Name      string             `json:"name"`
		Size      int                `json:"size"`
		MaxQueue  int                `json:"max_queue"`
		InUse     int                `json:"in_use"`
		Waiting   int                `json:"waiting"`
		Entered   uint64             `json:"entered_total"`
		Rejected  uint64             `json:"rejected_total"`
		QueueFull uint64             `json:"queue_full_total"`
		Cancelled uint64             `json:"cancelled_total"`
		Nested    uint64             `json:"nested_total"`
		Wait      accounting.Summary `json:"wait"`
		MeanHold  float64            `json:"mean_hold_seconds"`
	}
)

// MarshalJSON encodes the snapshot as the offload page does. Any goroutine.
func (o OffloadSnapshot) MarshalJSON() ([]byte, error) { return json.Marshal(o.doc()) }

func (o OffloadSnapshot) doc() offloadDoc {
	p := o.Pool
	d := offloadDoc{
		Pool: poolDoc{Tokens: p.Tokens, LanesEnabled: p.LanesEnabled, Closed: p.Closed, Workers: p.Workers,
			IdleWorkers: p.IdleWorkers, Nested: p.Nested, KeysKnown: p.KeysTotal, KeysEvicted: p.KeysEvicted,
			Lanes: make([]laneDoc, len(p.Lanes)), Keys: make([]keyDoc, len(p.Keys))},
		Gates: make([]gateDoc, len(o.Gates)),
	}
	for i, l := range p.Lanes {
		d.Pool.Lanes[i] = laneDoc{Lane: offload.Lane(i).String(), Tokens: l.Tokens, KeyCap: l.KeyCap, InUse: l.InUse,
			Waiting: l.Waiting, Capped: l.Capped, CappedWaits: l.CappedWaits, Started: l.Started,
			Completed: l.Completed, Rejected: l.Rejected, Cancelled: l.Cancelled, TimedOut: l.TimedOut,
			Panicked: l.Panicked, Migrated: l.Migrated, Wait: l.Wait, Run: l.Run}
	}
	for i, k := range p.Keys {
		d.Pool.Keys[i] = keyDoc{Key: k.Key, Estimate: k.Estimate.Seconds(), Lane: k.Lane.String(), Seeded: k.Seeded,
			Calls: k.Calls, Flips: k.Flips, Midway: k.Midway, InUse: k.InUse, Capped: k.Capped,
			CappedWaits: k.CappedWaits}
	}
	for i, g := range o.Gates {
		d.Gates[i] = gateDoc{Name: g.Name, Size: g.Size, MaxQueue: g.MaxQueue, InUse: g.InUse, Waiting: g.Waiting,
			Entered: g.Entered, Rejected: g.Rejected, QueueFull: g.QueueFull, Cancelled: g.Cancelled,
			Nested: g.Nested, Wait: g.Wait, MeanHold: g.MeanHold.Seconds()}
	}
	return d
}
