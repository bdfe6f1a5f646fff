package accounting

import (
	"encoding/json"
)

// TasksSnapshot is what the tasks endpoint shows. Plain data.
type TasksSnapshot struct {
	Live          []TaskSample // live tasks, sorted by OnLoop, longest first
	Finished      []TaskSample // recently finished tasks, newest first
	FinishedTotal uint64       // tasks finished since start
}

// summaryDoc is a Summary's JSON document (Summary.MarshalJSON). Field names and units are
// defined in docs/accounting.md.
type summaryDoc struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_seconds"`
	P50   float64 `json:"p50_seconds"`
	P90   float64 `json:"p90_seconds"`
	P99   float64 `json:"p99_seconds"`
	P999  float64 `json:"p999_seconds"`
	Max   float64 `json:"max_seconds"`
}

func summaryJSON(s Summary) summaryDoc {
	return summaryDoc{
		Count: s.Count, Mean: s.Mean().Seconds(),
		P50: s.P50.Seconds(), P90: s.P90.Seconds(), P99: s.P99.Seconds(), P999: s.P999.Seconds(),
		Max: s.Max.Seconds(),
	}
}

func marshalJSON(v any) ([]byte, error) { return json.Marshal(v) }
