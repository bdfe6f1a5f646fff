package ws

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
)

// TestNewPreparedFrames checks the prepared frame against the codec's at every size around
// the buffers NewPrepared picks and the frame header's length steps (126, 65,536).
func TestNewPreparedFrames(t *testing.T) {
	for _, n := range []int{0, 1, 120, 122, 123, 124, 125, 126, 127, 200, 459, 460, 461, 970, 971, 972, 973, 4000, 65535, 65536, 70000} {
		p := bytes.Repeat([]byte{byte(n)}, n)
		for _, binary := range []bool{false, true} {
			op := httpcodec.WSText
			if binary {
				op = httpcodec.WSBinary
			}
			want, err := httpcodec.AppendWSFrame(nil, op, true, p)
			require.NoError(t, err)
			m := NewPrepared(binary, p)
			require.Equal(t, want, m.frame, "payload %d bytes, binary %v", n, binary)
			require.Equal(t, n, m.Len())
			require.Equal(t, binary, m.Binary())
		}
	}
	// p is copied: changing it afterwards changes no message.
	p := []byte("state 1")
	m := NewPrepared(false, p)
	copy(p, "STATE 2")
	require.Equal(t, []byte("state 1"), m.frame[len(m.frame)-m.Len():])
}

// TestNewPreparedAllocatesOnce: a room preparing a small state every tick makes one
// allocation for it, the message and its frame together.
func TestNewPreparedAllocatesOnce(t *testing.T) {
	if wsRaceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	p := make([]byte, 900)
	var sink *PreparedMessage
	for _, n := range []int{0, 120, 400, 900} {
		allocs := testing.AllocsPerRun(100, func() { sink = NewPrepared(true, p[:n]) })
		require.Equal(t, 1.0, allocs, "payload %d bytes", n)
	}
	_ = sink
}
