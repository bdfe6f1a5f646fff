package abrun

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRuns(t *testing.T) {
	rs, err := ParseRuns("old=/tmp/srv-old:baton,floor=/tmp/srv:floor")
	require.NoError(t, err)
	assert.Equal(t, []Run{{"old", "/tmp/srv-old", "baton"}, {"floor", "/tmp/srv", "floor"}}, rs)

	for _, bad := range []string{"", "old", "old=/tmp/srv", "old=/tmp/srv:baton,x"} {
		_, err := ParseRuns(bad)
		assert.ErrorContains(t, err, "name=binary:target", bad)
	}
}
