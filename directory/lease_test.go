package directory

import (
	"testing"
	"time"

	"github.com/batonrt/baton/internal/leaseclock"
	"github.com/stretchr/testify/require"
)

// TestLeaseConvertsFromTheClock: a backend's leaseclock.Lease is a Lease, whose validity
// ends Margin before its Deadline.
func TestLeaseConvertsFromTheClock(t *testing.T) {
	sent := time.Now()
	l := Lease(leaseclock.New(7, sent, 5*time.Second, time.Second).Lease())
	require.Equal(t, Lease{ID: 7, TTL: 5 * time.Second, Margin: time.Second, Deadline: l.Deadline}, l)
	require.True(t, l.ValidUntil().Equal(sent.Add(4*time.Second)))
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
