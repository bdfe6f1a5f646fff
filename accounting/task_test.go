package accounting

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func sampleTask() TaskSample {
	s := TaskSample{
		ID: 7, Kind: KindRequest, Route: "GET /users/{id}", Method: "GET", Path: "/users/3",
		State: "parked", ParkReason: "sleep", Goroutine: 99,
		Rounds: 3, OnLoop: 123 * time.Microsecond, MaxSlice: 100 * time.Microsecond,
		SlowSlices: 1, SlowTime: 100 * time.Microsecond, QueueDelay: 10 * time.Microsecond,
		FirstRunDelay: 4 * time.Microsecond, Age: 60 * time.Millisecond, Status: 200,
	}
	s.Parked[ParkSleep] = 50 * time.Millisecond
	s.Parked[ParkOffload] = 200 * time.Microsecond
	return s
}

func TestParkedTotalAndMeanSlice(t *testing.T) {
	s := sampleTask()
	if got, want := s.ParkedTotal(), 50200*time.Microsecond; got != want {
		t.Errorf("ParkedTotal = %v, want %v", got, want)
	}
	if got, want := s.meanSlice(), 41*time.Microsecond; got != want {
		t.Errorf("MeanSlice = %v, want %v", got, want)
	}
	var zero TaskSample
	if zero.meanSlice() != 0 || zero.ParkedTotal() != 0 {
		t.Error("zero sample: want zero derived figures")
	}
}

func TestParkReasonNamesMatchJSON(t *testing.T) {
	typ := reflect.TypeFor[parkedByReason]()
	if typ.NumField() != NumParkReasons {
		t.Fatalf("parkedByReason has %d fields, want %d", typ.NumField(), NumParkReasons)
	}
	for i := range NumParkReasons {
		if tag := typ.Field(i).Tag.Get("json"); tag != ParkReasonNames[i] {
			t.Errorf("field %d tag %q, want %q", i, tag, ParkReasonNames[i])
		}
	}
	// Each reason lands in its own field.
	for i := range NumParkReasons {
		var s TaskSample
		s.Parked[i] = time.Second
		m := decodeObject(t, mustMarshal(t, s))
		by := m["parked_by_reason_seconds"].(map[string]any)
		for j, name := range ParkReasonNames {
			want := 0.0
			if j == i {
				want = 1
			}
			if by[name] != want {
				t.Errorf("reason %d: %s = %v, want %v", i, name, by[name], want)
			}
		}
	}
}

// Field types for schema checks.
const (
	tInt    = "integer"
	tNum    = "number"
	tStr    = "string"
	tObj    = "object"
	tArr    = "array"
	tBool   = "bool"
	tNumNil = "number or null"
)

// taskSchema is the documented JSON of one task (docs/accounting.md).
var taskSchema = map[string]string{
	"id": tInt, "kind": tStr, "route": tStr, "method": tStr, "path": tStr, "state": tStr,
	"park_reason": tStr, "goroutine": tInt, "rounds": tInt, "on_loop_seconds": tNum,
	"max_slice_seconds": tNum, "mean_slice_seconds": tNum, "slow_slices": tInt,
	"slow_seconds": tNum, "queue_delay_seconds": tNum, "first_run_delay_seconds": tNum,
	"parked_seconds": tNum, "parked_by_reason_seconds": tObj, "cpu_seconds": tNumNil,
	"age_seconds": tNum, "status": tInt,
}

func TestTaskJSONSchema(t *testing.T) {
	s := sampleTask()
	m := decodeObject(t, mustMarshal(t, s))
	checkSchema(t, "task", m, taskSchema, true)
	if _, ok := m["stack"]; ok {
		t.Error("stack present although empty")
	}
	if m["cpu_seconds"] != nil {
		t.Errorf("cpu_seconds = %v, want null when not measured", m["cpu_seconds"])
	}
	if got := m["parked_seconds"].(float64); got != 0.0502 {
		t.Errorf("parked_seconds = %v", got)
	}
	if got := m["on_loop_seconds"].(float64); got != 0.000123 {
		t.Errorf("on_loop_seconds = %v", got)
	}
	checkSchema(t, "parked_by_reason_seconds", m["parked_by_reason_seconds"].(map[string]any),
		map[string]string{"other": tNum, "sleep": tNum, "wait": tNum, "offload": tNum, "write": tNum, "queue": tNum}, true)

	s.CPU, s.CPUMeasured, s.Stack = 2*time.Millisecond, true, "goroutine 99 [sleep]:\nmain.handler()"
	m = decodeObject(t, mustMarshal(t, taskJSON(&s)))
	if m["cpu_seconds"] != 0.002 {
		t.Errorf("cpu_seconds = %v, want 0.002", m["cpu_seconds"])
	}
	if !strings.Contains(m["stack"].(string), "main.handler") {
		t.Errorf("stack = %v", m["stack"])
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return m
}

// checkSchema checks that every field of schema is in m with its type; with exact, that m
// has no other field.
func checkSchema(t *testing.T, what string, m map[string]any, schema map[string]string, exact bool) {
	t.Helper()
	for k, typ := range schema {
		v, ok := m[k]
		if !ok {
			t.Errorf("%s: field %q missing", what, k)
			continue
		}
		if got := jsonType(v); got != typ && !(typ == tNumNil && (got == tNum || got == tInt || v == nil)) &&
			!(typ == tNum && got == tInt) {
			t.Errorf("%s: field %q is %s (%v), want %s", what, k, got, v, typ)
		}
	}
	if exact {
		for k := range m {
			if _, ok := schema[k]; !ok && k != "stack" {
				t.Errorf("%s: undocumented field %q", what, k)
			}
		}
	}
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return tBool
	case string:
		return tStr
	case float64:
		if v == float64(int64(v)) {
			return tInt
		}
		return tNum
	case map[string]any:
		return tObj
	case []any:
		return tArr
	}
	return "unknown"
}

// TestTaskStates: the states' JSON names (the loop names the scheduler's states with its
// String, which the loop's names test binds to these).
func TestTaskStates(t *testing.T) {
	assert.Equal(t, []string{"ready", "running", "parked", "done", "queued"},
		[]string{StateReady, StateRunning, StateParked, StateDone, StateQueued})
}
