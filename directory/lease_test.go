package directory

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLeaseClock(t *testing.T) {
	sent := time.Now()
	c := NewLeaseClock(7, sent, 5*time.Second, time.Second)
	l := c.Lease()
	require.Equal(t, Lease{ID: 7, TTL: 5 * time.Second, Margin: time.Second, Deadline: l.Deadline}, l)
	require.True(t, l.Deadline.Equal(sent.Add(5*time.Second)))
	require.True(t, l.ValidUntil().Equal(sent.Add(4*time.Second)))
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

func TestLeaseClockLapses(t *testing.T) {
	// Granted long ago: the check uses the monotonic clock and says invalid.
	c := NewLeaseClock(1, time.Now().Add(-10*time.Second), 5*time.Second, time.Second)
	require.False(t, c.Valid())
	// Margin larger than the TTL left: invalid even before the deadline.
	c = NewLeaseClock(1, time.Now(), 5*time.Second, 5*time.Second)
	require.False(t, c.Valid())
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{Node: "a"}.Validate())
	cfg := Config{Node: "a"}.WithDefaults()
	require.Equal(t, DefaultTTL, cfg.TTL)
	require.Equal(t, DefaultTTL/5, cfg.Margin)
	require.Equal(t, 1, cfg.Loops)
	require.Equal(t, DefaultTTL/3, cfg.KeepAlivePeriod())
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.Node: empty"},
		{Config{Node: "a/b"}, "'/'"},
		{Config{Node: "a", Loops: -1}, "Config.Loops"},
		{Config{Node: "a", TTL: -1}, "Config.TTL"},
		{Config{Node: "a", TTL: time.Second, Margin: time.Second}, "Config.Margin"},
		{Config{Node: "a", RequestTimeout: -1}, "Config.RequestTimeout"},
		{Config{Node: "a", Placement: PlaceConfig{RoomCost: -1}}, "PlaceConfig.RoomCost"},
	} {
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
}
