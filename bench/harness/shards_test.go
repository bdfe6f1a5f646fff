package harness

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShardsOnlyWhereServed: -shards above 1 is refused, naming the scenario, for a
// scenario whose baton routes are not shard-safe, before anything runs.
func TestShardsOnlyWhereServed(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	targets, err := ParseTargets("baton", nil)
	require.NoError(t, err)
	_, err = Run(context.Background(), Options{Scenarios: "plaintext,json", Targets: targets, Shards: 2, Out: out})
	require.ErrorContains(t, err, "scenario json")
	require.NoDirExists(t, out, "nothing ran")
}
