package offload

import (
	"encoding/json"

	"github.com/batonrt/baton/accounting"
)

// Report is the offload stats page's content: a pool's figures and the gates beside it,
// sorted by name. Package loop's "offload" stats section takes one per loop (the shared
// pool and the gates made with Server.NewGate); package loop/stats shows it. Plain data:
// the caller owns it, any goroutine may read it.
type Report struct {
	Pool  Stats
	Gates []GateStats
}

// The page's JSON: the same conventions as the other stats pages (snake_case, durations in
// seconds, counters since start ending in _total). docs/accounting.md lists the fields.
type (
	reportDoc struct {
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

// MarshalJSON encodes the report as the offload stats page does. Any goroutine.
func (o Report) MarshalJSON() ([]byte, error) { return json.Marshal(o.doc()) }

func (o Report) doc() reportDoc {
	p := o.Pool
	d := reportDoc{
		Pool: poolDoc{Tokens: p.Tokens, LanesEnabled: p.LanesEnabled, Closed: p.Closed, Workers: p.Workers,
			IdleWorkers: p.IdleWorkers, Nested: p.Nested, KeysKnown: p.KeysTotal, KeysEvicted: p.KeysEvicted,
			Lanes: make([]laneDoc, len(p.Lanes)), Keys: make([]keyDoc, len(p.Keys))},
		Gates: make([]gateDoc, len(o.Gates)),
	}
	for i, l := range p.Lanes {
		d.Pool.Lanes[i] = laneDoc(l) // field for field; laneDoc adds the JSON names
	}
	for i, k := range p.Keys {
		d.Pool.Keys[i] = keyDoc{Key: k.Key, Estimate: k.Estimate.Seconds(), Lane: k.Lane, Seeded: k.Seeded,
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
