package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/bench/loadgen"
)

func init() {
	Register(&Scenario{
		Name: "test-custom", Summary: "a custom driver (tests only)", Spec: "GETs /plaintext from its own loop",
		Phases: func(p Params) []Phase {
			return []Phase{
				{Name: "ok", Description: "marks its window and reports a group", Warmup: p.Warmup, Duration: p.Duration, Custom: probeDriver},
				{Name: "nomark", Description: "forgets to mark its window", Duration: p.Duration,
					Custom: func(ctx context.Context, env *Env) (*Figures, error) { return &Figures{}, nil }},
				{Name: "fails", Description: "returns an error", Duration: p.Duration,
					Custom: func(ctx context.Context, env *Env) (*Figures, error) { return nil, errors.New("driver broke") }},
			}
		},
	})
}

// probeDriver GETs /plaintext one at a time during the window and reports the calls as a
// group of mode "probe", one unit of work per call.
func probeDriver(ctx context.Context, env *Env) (*Figures, error) {
	if env.Target == "" || env.Host == "" || env.Drain <= 0 {
		return nil, errors.New("incomplete Env")
	}
	time.Sleep(env.Warmup)
	h := loadgen.NewHistogram()
	var n uint64
	go env.MeasureStart() // any goroutine may mark the window
	for {
		env.mu.Lock()
		started := env.started
		env.mu.Unlock()
		if started {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for end := time.Now().Add(env.Duration); time.Now().Before(end); {
		t0 := time.Now()
		resp, err := http.Get(env.Base() + "/plaintext")
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_ = h.RecordValue(max(1, time.Since(t0).Microseconds()))
		n++
	}
	env.MeasureEnd()
	env.MeasureEnd() // ignored
	return &Figures{
		Groups: []*loadgen.GroupResult{{Name: "calls", Conns: 1, Rate: 100, Sent: n, Requests: n, Latency: h, Errors: map[string]uint64{"late": 1}}},
		Modes:  map[string]string{"calls": "probe"},
		Work:   n, Unit: "call",
		Extra: map[string]any{"probe": 42},
	}, nil
}

// TestCustomPhase: a Custom phase's driver runs against each target with the server up;
// the harness samples the server over the window the driver marked, reports the driver's
// groups like loadgen's (mode, rate, latency, .hgrm, table), CPU per unit of work and the
// extra figures, and fails the run when the driver errs or leaves its window unmarked.
func TestCustomPhase(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	res, err := Run(context.Background(), Options{
		Scenarios: "test-custom",
		Targets:   []Target{{Name: "baton", Builtin: true}, {Name: "nethttp", Builtin: true}},
		Params:    Params{Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond},
		Out:       out,
		Plots:     true,
		Stdout:    &stdout,
	})
	require.NoError(t, err)
	sc := res.Scenarios[0]
	require.Len(t, sc.Phases, 3)
	for _, run := range sc.Phase("ok").Runs {
		require.Empty(t, run.Error, run.Target)
		g := run.Group("calls")
		require.NotNil(t, g, run.Target)
		assert.Equal(t, "probe", g.Mode)
		assert.Positive(t, g.Requests)
		assert.InDelta(t, float64(g.Requests)/0.3, g.RPS, float64(g.Requests)) // over the marked window
		assert.Equal(t, int64(g.Requests), g.Latency.Count)
		assert.Equal(t, uint64(1), g.Errors["late"])
		require.NotNil(t, run.Server, run.Target)
		assert.Equal(t, "call", run.Server.Unit)
		assert.Positive(t, run.Server.RSSEnd)
		assert.GreaterOrEqual(t, run.Server.CPUUsPerUnit, 0.0)
		assert.Equal(t, 42, run.Extra["probe"])
		assert.Positive(t, run.Client.CPUs)
		_, err := os.Stat(filepath.Join(out, g.HGRM))
		assert.NoError(t, err, "hgrm of %s", run.Target)
	}
	for _, name := range []string{"nomark", "fails"} {
		for _, run := range sc.Phase(name).Runs {
			assert.NotEmpty(t, run.Error, "%s %s", name, run.Target)
		}
	}
	assert.Contains(t, sc.Phase("nomark").Runs[0].Error, "MeasureStart")
	assert.Contains(t, sc.Phase("fails").Runs[0].Error, "driver broke")
	assert.Contains(t, stdout.String(), "probe@100")
	assert.Contains(t, stdout.String(), "/call")

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var typed Results
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&typed))
}
