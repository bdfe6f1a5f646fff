package recorder

import (
	"bytes"
	"testing"
)

// FuzzParseStatState checks that any stat line parses without panicking, and that a
// state found is the byte after the last ") ".
func FuzzParseStatState(f *testing.F) {
	for _, s := range []string{"123 (baton) R 1 2 3", "123 (a) b) c) S 1", "123 (x (y)) D 0", "", "123 (x)", "(", ") "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStatState(b)
		if err != nil {
			return
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+1] != ' ' || b[i+2] != st {
			t.Fatalf("parseStatState(%q) = %q", b, st)
		}
	})
}
