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
			assert.Nil(t, it.Pass, "3 rounds cannot decide")
			assert.Contains(t, it.Note, "undecided")
			assert.InDelta(t, 100*ac.Median, it.Value, 1e-9)
		} else {
			smoke++
			assert.Empty(t, it.Goal, "a one-window line must not carry the goal: %s", it.Name)
		}
	}
	assert.Equal(t, 1, goals)
	assert.Equal(t, 1, smoke)
	assert.Contains(t, stdout.String(), "accounting cost (interleaved)")
	assert.Nil(t, ac.CILow)
}

// TestMedianCI: the interval of the median uses the order statistics the binomial
// distribution allows (k = 1 from 6 values, 2 from 10, 4 from 16, 10 from 30), none below
// 6 values; the verdict passes or fails only when the interval is on one side of the goal.
func TestMedianCI(t *testing.T) {
	seq := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(n - i) // reversed: medianCI sorts
		}
		return v
	}
	for n, k := range map[int]int{6: 1, 10: 2, 16: 4, 30: 10} {
		lo, hi, ok := medianCI(seq(n))
		require.True(t, ok, "n=%d", n)
		assert.Equal(t, float64(k), lo, "n=%d", n)
		assert.Equal(t, float64(n-k+1), hi, "n=%d", n)
	}
	_, _, ok := medianCI(seq(5))
	assert.False(t, ok)

	f := func(v float64) *float64 { return &v }
	pass := acctVerdict(&AccountingCost{CILow: f(0.01), CIHigh: f(0.04)}, 0.05)
	require.NotNil(t, pass)
	assert.True(t, *pass)
	fail := acctVerdict(&AccountingCost{CILow: f(0.05), CIHigh: f(0.09)}, 0.05)
	require.NotNil(t, fail)
	assert.False(t, *fail)
	assert.Nil(t, acctVerdict(&AccountingCost{CILow: f(0.03), CIHigh: f(0.07)}, 0.05))
	assert.Nil(t, acctVerdict(&AccountingCost{}, 0.05))
}

func TestQuartiles(t *testing.T) {
	m, q1, q3 := quartiles([]float64{5, 1, 3, 2, 4})
	assert.Equal(t, []float64{3, 1.5, 4.5}, []float64{m, q1, q3})
	m, q1, q3 = quartiles([]float64{4, 1, 3, 2})
	assert.Equal(t, []float64{2.5, 1.5, 3.5}, []float64{m, q1, q3})
	m, q1, q3 = quartiles([]float64{7})
	assert.Equal(t, []float64{7, 7, 7}, []float64{m, q1, q3})
}
