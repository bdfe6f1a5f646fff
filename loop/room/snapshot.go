package room

import (
	"bytes"
	"encoding/gob"
)

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
