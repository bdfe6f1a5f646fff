package arena

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestInputAndStateRoundTrip(t *testing.T) {
	b := AppendInput(nil, Input{Seq: 7, DX: 0.5, DY: -2, Buttons: 3})
	require.Len(t, b, InputSize)
	in, ok := ParseInput(b)
	require.True(t, ok)
	require.Equal(t, Input{Seq: 7, DX: 0.5, DY: -1, Buttons: 3}, in, "DY clamped to -1")
	_, ok = ParseInput(b[:InputSize-1])
	require.False(t, ok, "a short input is refused")

	s := NewSim(9)
	in.Slot = 2
	s.Apply(in)
	s.Apply(Input{Slot: 7, Seq: 99}) // out of range: ignored
	s.Step()
	now := time.Now()
	msg := s.Encode(make([]byte, StateSize), now)
	st, ok := ParseState(msg)
	require.True(t, ok)
	require.Equal(t, State{Room: 9, Tick: 1, Stamp: now.UnixNano(), Ack: [Players]uint32{0, 0, 7, 0}}, st)
	_, ok = ParseState(msg[:StateSize-1])
	require.False(t, ok)
}

func TestStepMovesAndWraps(t *testing.T) {
	s := NewSim(1)
	s.Apply(Input{Slot: 0, Seq: 1, DX: -1})
	for range 20 * 2 { // 2 s at full stick: 400 units left of 100, wrapped to 700
		s.Step()
	}
	require.InDelta(t, 700, s.p[0].x, 0.01)
	require.InDelta(t, 500, s.p[1].y, 0.01, "a player without input stays")
}
