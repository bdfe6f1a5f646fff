package leaseclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClock(t *testing.T) {
	sent := time.Now()
	c := New(7, sent, 5*time.Second, time.Second)
	l := c.Lease()
	require.Equal(t, Lease{ID: 7, TTL: 5 * time.Second, Margin: time.Second, Deadline: l.Deadline}, l)
	require.True(t, l.Deadline.Equal(sent.Add(5*time.Second)))
	require.True(t, c.Valid())

	// A renewal moves the deadline forward, a late answer to an older one does not move
	// it back.
	d := c.Renewed(sent.Add(2*time.Second), 5*time.Second)
	require.True(t, d.Equal(sent.Add(7*time.Second)))
	d = c.Renewed(sent.Add(time.Second), 5*time.Second)
	require.True(t, d.Equal(sent.Add(7*time.Second)))

	c.Expire()
	require.False(t, c.Valid())
	require.True(t, c.Lease().Expired)
}

func TestClockLapses(t *testing.T) {
	// Granted long ago: the check uses the monotonic clock and says invalid.
	c := New(1, time.Now().Add(-10*time.Second), 5*time.Second, time.Second)
	require.False(t, c.Valid())
	// Margin larger than the TTL left: invalid even before the deadline.
	c = New(1, time.Now(), 5*time.Second, 5*time.Second)
	require.False(t, c.Valid())
}
