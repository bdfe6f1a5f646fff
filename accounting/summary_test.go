package accounting

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSummaryJSON: a Summary marshals as the pages' summary object, in seconds, without
// its buckets.
func TestSummaryJSON(t *testing.T) {
	out, err := json.Marshal(Summary{Count: 2, Sum: 3 * time.Second, P50: time.Second, P90: 2 * time.Second,
		P99: 2 * time.Second, P999: 2 * time.Second, Max: 2 * time.Second, Buckets: Buckets{1}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"count":2,"mean_seconds":1.5,"p50_seconds":1,"p90_seconds":2,"p99_seconds":2,"p999_seconds":2,"max_seconds":2}`, string(out))
}
