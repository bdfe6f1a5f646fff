package accounting

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleTask() TaskSample {
	s := TaskSample{
		ID: 7, Kind: "request", Route: "GET /users/{id}", Method: "GET", Path: "/users/3",
		State: "parked", ParkReason: "sleep", Goroutine: 99,
		Rounds: 3, OnLoop: 123 * time.Microsecond, MaxSlice: 100 * time.Microsecond,
		SlowSlices: 1, SlowTime: 100 * time.Microsecond, QueueDelay: 10 * time.Microsecond,
		FirstRunDelay: 4 * time.Microsecond, Age: 60 * time.Millisecond, Status: 200,
	}
	s.Parked.Sleep = 50 * time.Millisecond
	s.Parked.Offload = 200 * time.Microsecond
	return s
}

func TestParkedTotalAndMeanSlice(t *testing.T) {
	s := sampleTask()
	assert.Equal(t, 50200*time.Microsecond, s.ParkedTotal())
	assert.Equal(t, 41*time.Microsecond, s.meanSlice())
	var zero TaskSample
	assert.Zero(t, zero.meanSlice(), "zero sample")
	assert.Zero(t, zero.ParkedTotal(), "zero sample")
}

// TestParkedByReasonMatchesJSON: each reason's time lands in its own key of
// parked_by_reason_seconds, named as TaskSample.ParkReason names the reason.
func TestParkedByReasonMatchesJSON(t *testing.T) {
	names := []string{"other", "sleep", "wait", "offload", "write", "queue"}
	typ := reflect.TypeFor[ParkedByReason]()
	require.Equal(t, len(names), typ.NumField(), "ParkedByReason's fields")
	require.Equal(t, len(names), reflect.TypeFor[parkedSeconds]().NumField(), "parkedSeconds' fields")
	for i, name := range names {
		var s TaskSample
		reflect.ValueOf(&s.Parked).Elem().Field(i).SetInt(int64(time.Second))
		assert.Equal(t, time.Second, s.ParkedTotal(), "ParkedTotal counts %s", typ.Field(i).Name)
		m := decodeObject(t, mustMarshal(t, s))
		by := m["parked_by_reason_seconds"].(map[string]any)
		require.Len(t, by, len(names))
		for _, other := range names {
			want := 0.0
			if other == name {
				want = 1
			}
			assert.Equal(t, want, by[other], "ParkedByReason.%s: %s", typ.Field(i).Name, other)
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
	assert.NotContains(t, m, "stack", "stack present although empty")
	assert.Nil(t, m["cpu_seconds"], "cpu_seconds when not measured")
	assert.Equal(t, 0.0502, m["parked_seconds"])
	assert.Equal(t, 0.000123, m["on_loop_seconds"])
	checkSchema(t, "parked_by_reason_seconds", m["parked_by_reason_seconds"].(map[string]any),
		map[string]string{"other": tNum, "sleep": tNum, "wait": tNum, "offload": tNum, "write": tNum, "queue": tNum}, true)

	s.CPU, s.CPUMeasured, s.Stack = 2*time.Millisecond, true, "goroutine 99 [sleep]:\nmain.handler()"
	m = decodeObject(t, mustMarshal(t, taskJSON(&s)))
	assert.Equal(t, 0.002, m["cpu_seconds"])
	assert.Contains(t, m["stack"], "main.handler")
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return m
}

// checkSchema checks that every field of schema is in m with its type; with exact, that m
// has no other field.
func checkSchema(t *testing.T, what string, m map[string]any, schema map[string]string, exact bool) {
	t.Helper()
	for k, typ := range schema {
		v, ok := m[k]
		if !assert.True(t, ok, "%s: field %q missing", what, k) {
			continue
		}
		got := jsonType(v)
		assert.True(t, got == typ || typ == tNumNil && (got == tNum || got == tInt || v == nil) || typ == tNum && got == tInt,
			"%s: field %q is %s (%v), want %s", what, k, got, v, typ)
	}
	if exact {
		for k := range m {
			_, ok := schema[k]
			assert.True(t, ok || k == "stack", "%s: undocumented field %q", what, k)
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
