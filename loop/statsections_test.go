package loop

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAddStatsRefuses names what it refuses: an empty or malformed name, an engine section's
// name, a name taken, a section without Take.
func TestAddStatsRefuses(t *testing.T) {
	s := New(Config{Logger: quietLogger(t)})
	take := func(*Loop, url.Values) (any, error) { return 0, nil }
	for _, c := range []struct {
		sec  StatsSection
		want string
	}{
		{StatsSection{Name: "", Take: take}, "empty name"},
		{StatsSection{Name: "Rooms", Take: take}, `"Rooms": name must be`},
		{StatsSection{Name: "a/b", Take: take}, `"a/b": name must be`},
		{StatsSection{Name: "tasks", Take: take}, `"tasks": the name of one of the engine's sections`},
		{StatsSection{Name: "events", Take: take}, `"events": the path of the dashboard's event stream`},
		{StatsSection{Name: "x"}, `"x": Take is nil`},
	} {
		err := s.AddStats(c.sec)
		require.ErrorIs(t, err, errStatsSection, c.want)
		assert.Contains(t, err.Error(), c.want)
	}
	require.NoError(t, s.AddStats(StatsSection{Name: "x-1", Take: take}))
	err := s.AddStats(StatsSection{Name: "x-1", Take: take})
	require.ErrorIs(t, err, errStatsSection)
	assert.Contains(t, err.Error(), `"x-1": already added`)
	assert.Len(t, s.StatsSections(), len(s.engineSections())+1)
}
