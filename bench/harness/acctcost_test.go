package harness

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAccountingCostInterleaved: with baton and baton-noacct as targets, plaintext measures
// the accounting cost in interleaved bursts, alternating the order each round, and the
// summary's goal line comes from their median while the one-window lines carry no goal.
func TestAccountingCostInterleaved(t *testing.T) {
	var stdout bytes.Buffer
	res, err := Run(context.Background(), Options{
		Scenarios: "plaintext",
		Targets:   []Target{{Name: "baton", Builtin: true}, {Name: "baton-noacct", Builtin: true}},
		Params: Params{Duration: 200 * time.Millisecond, Warmup: 0, Conns: []int{4}, Drain: 300 * time.Millisecond,
			AccountingRounds: 3, AccountingBurst: 150 * time.Millisecond},
		Out:    t.TempDir(),
		Stdout: &stdout,
	})
	require.NoError(t, err)
	ac := res.Scenarios[0].AccountingCost
	require.NotNil(t, ac, "no interleaved measurement; warnings: %v", res.Warnings)
	require.Len(t, ac.Rounds, 3)
	assert.Equal(t, 4, ac.Conns)
	for i, b := range ac.Rounds {
		assert.Equal(t, i%2 == 0, b.OnFirst, "round %d: the order must alternate", i)
		assert.Positive(t, b.OnUs, "round %d", i)
		assert.Positive(t, b.OffUs, "round %d", i)
		assert.Positive(t, b.Responses[0], "round %d", i)
		assert.Positive(t, b.Responses[1], "round %d", i)
	}
	assert.LessOrEqual(t, ac.Q1, ac.Median)
	assert.LessOrEqual(t, ac.Median, ac.Q3)
	var goals, smoke int
	for _, it := range res.Summary {
		if !strings.Contains(it.Name, "accounting cost") {
			continue
		}
		if strings.Contains(it.Name, "interleaved") {
			goals++
			assert.NotEmpty(t, it.Goal)
			assert.NotNil(t, it.Pass)
			assert.InDelta(t, 100*ac.Median, it.Value, 1e-9)
		} else {
			smoke++
			assert.Empty(t, it.Goal, "a one-window line must not carry the goal: %s", it.Name)
		}
	}
	assert.Equal(t, 1, goals)
	assert.Equal(t, 1, smoke)
	assert.Contains(t, stdout.String(), "accounting cost (interleaved)")
}

func TestQuartiles(t *testing.T) {
	m, q1, q3 := quartiles([]float64{5, 1, 3, 2, 4})
	assert.Equal(t, []float64{3, 1.5, 4.5}, []float64{m, q1, q3})
	m, q1, q3 = quartiles([]float64{4, 1, 3, 2})
	assert.Equal(t, []float64{2.5, 1.5, 3.5}, []float64{m, q1, q3})
	m, q1, q3 = quartiles([]float64{7})
	assert.Equal(t, []float64{7, 7, 7}, []float64{m, q1, q3})
}
