package room

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
)

// JSONState returns Snapshot and Restore hooks that encode *state with encoding/json:
//
//	cfg.Snapshot, cfg.Restore = room.JSONState[Input](&game)
//
// state points at the room's state (one per room), which only its tick and the hooks
// touch. Any goroutine.
func JSONState[I, S any](state *S) (func(*Room[I]) ([]byte, error), func(*Room[I], []byte) error) {
	return func(*Room[I]) ([]byte, error) { return json.Marshal(state) },
		func(_ *Room[I], b []byte) error { return json.Unmarshal(b, state) }
}

// GobState is JSONState with encoding/gob: more compact for numeric state, and it carries
// NaN and infinite floats, which JSON refuses. As with JSON, only exported fields go. Any
// goroutine.
func GobState[I, S any](state *S) (func(*Room[I]) ([]byte, error), func(*Room[I], []byte) error) {
	return func(*Room[I]) ([]byte, error) { return gobEncode(state) },
		func(_ *Room[I], b []byte) error { return gobDecode(b, state) }
}

// gobEncode encodes v with encoding/gob (GobState's Snapshot).
func gobEncode(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// gobDecode decodes b into v with encoding/gob (GobState's Restore).
func gobDecode(b []byte, v any) error { return gob.NewDecoder(bytes.NewReader(b)).Decode(v) }
