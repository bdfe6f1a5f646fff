package loop

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConnStateNamesAndPredicates(t *testing.T) {
	for st := connOpen; st <= connClosed; st++ {
		assert.NotContains(t, st.String(), "?")
	}
	cs := &conn{}
	require.True(t, cs.accepting())
	require.True(t, cs.writable())
	cs.closeAfterResponse()
	require.Equal(t, connCloseAfter, cs.state)
	require.False(t, cs.accepting(), "no request is parsed after the last response")
	require.True(t, cs.writable(), "the last response is still written")
	for _, st := range []connState{connClosing, connLingering, connAborting, connClosed} {
		cs.state = st
		assert.False(t, cs.writable(), st.String())
		assert.False(t, cs.accepting(), st.String())
		cs.closeAfterResponse()
		assert.Equal(t, st, cs.state, "states only move forward")
	}
}

// The connection table keeps indexes consistent and counts the connections the drain
// waits for.
func TestConnTable(t *testing.T) {
	var tb connTable
	a, b, c := &conn{}, &conn{}, &conn{}
	tb.add(a)
	tb.add(b)
	tb.add(c)
	b.beforeDrain, c.beforeDrain = true, true
	tb.beforeDrain = 2
	tb.remove(a)
	require.Equal(t, -1, a.idx)
	require.Len(t, tb.all, 2)
	for i, cs := range tb.all {
		require.Equal(t, i, cs.idx)
	}
	tb.remove(b)
	require.Equal(t, 1, tb.beforeDrain)
	tb.remove(b) // twice: no effect
	require.Equal(t, 1, tb.beforeDrain)
	tb.remove(c)
	require.Zero(t, tb.beforeDrain)
	require.Empty(t, tb.all)
}
