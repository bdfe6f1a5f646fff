package harness

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/batonrt/baton/bench/loadgen"
	"github.com/batonrt/baton/bench/servers"
)

// Accounting-cost bursts: how the harness measures what accounting costs (plaintext with
// -targets baton,baton-noacct). One window per target differs from the next by more than
// the cost on a shared VM, so the figure would flip between PASS and FAIL from run to run;
// like bench/scripts/accounting-cost.sh, the harness instead runs both servers at once,
// drives one and then the other in short alternating bursts (the order alternates every
// round), takes each server's CPU time per request over its own burst, and reports the
// median of the per-round on/off ratios with its quartiles. Drift in the machine's speed
// then hits both alike. Both processes are replaced every AcctRoundsPerProcess rounds so
// that one process's luck (memory layout, which threads share the core) does not decide.
const (
	AcctQuickRounds      = 16
	AcctFullRounds       = 30
	AcctQuickBurst       = 500 * time.Millisecond
	AcctFullBurst        = time.Second
	AcctBurstWarmup      = 100 * time.Millisecond
	AcctRoundsPerProcess = 6
)

// AccountingCost is the interleaved measurement of what accounting costs (ScenarioResult
// of plaintext when both baton and baton-noacct ran).
type AccountingCost struct {
	Conns    int               `json:"conns"`    // closed-loop connections of each burst
	Pipeline int               `json:"pipeline"` // requests per write
	BurstS   float64           `json:"burst_s"`  // measured part of each burst
	Rounds   []AccountingBurst `json:"rounds"`   // one per round, in order
	// Median, Q1 and Q3 are the median and quartiles of the per-round ratios on/off - 1
	// (0.03 = accounting costs 3% more server CPU per request).
	Median float64 `json:"median"`
	Q1     float64 `json:"q1"`
	Q3     float64 `json:"q3"`
	// CILow and CIHigh bound the median with about 95% confidence (distribution-free:
	// order statistics of the per-round ratios); absent with fewer than 6 rounds. The
	// verdict is PASS only when CIHigh is under the goal, FAIL only when CILow is at or
	// over it, and undecided otherwise, so that it does not flip with the noise.
	CILow  *float64 `json:"ci_low,omitempty"`
	CIHigh *float64 `json:"ci_high,omitempty"`
}

// AccountingBurst is one round: server CPU µs per request with accounting on and off,
// each over its own burst.
type AccountingBurst struct {
	OnUs      float64   `json:"on_us"`
	OffUs     float64   `json:"off_us"`
	OnFirst   bool      `json:"on_first"`  // the order of the round's two bursts
	Responses [2]uint64 `json:"responses"` // on, off
}

// acctRounds returns the number of rounds and the burst length for p.
func acctRounds(p Params) (int, time.Duration) {
	rounds, burst := AcctFullRounds, AcctFullBurst
	if p.Quick {
		rounds, burst = AcctQuickRounds, AcctQuickBurst
	}
	if p.AccountingRounds > 0 {
		rounds = p.AccountingRounds
	}
	if p.AccountingBurst > 0 {
		burst = p.AccountingBurst
	}
	return rounds, burst
}

// measureAccountingCost runs the interleaved bursts (see AccountingCost).
func (r *runner) measureAccountingCost(ctx context.Context, p Params) (*AccountingCost, error) {
	rounds, burst := acctRounds(p)
	conns := 64
	if len(p.Conns) > 0 {
		conns = p.Conns[0]
	}
	ac := &AccountingCost{Conns: conns, Pipeline: pipeline(p), BurstS: burst.Seconds(), Rounds: []AccountingBurst{}}
	r.logf("plaintext: accounting cost, %d interleaved rounds of %v bursts at %d connections", rounds, burst, conns)
	logFile, err := os.Create(filepath.Join(r.opts.Out, "logs", "plaintext-accounting-cost.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	var on, off *server
	stop := func() {
		for _, s := range []*server{on, off} {
			if s != nil {
				s.stop()
			}
		}
		on, off = nil, nil
	}
	defer stop()
	for i := range rounds {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if i%AcctRoundsPerProcess == 0 {
			stop()
			if on, err = startChild(servers.Baton, r.opts.CPUServer, r.taskset, r.opts.Shards, logFile); err != nil {
				return nil, err
			}
			if off, err = startChild(servers.BatonNoAccounting, r.opts.CPUServer, r.taskset, r.opts.Shards, logFile); err != nil {
				return nil, err
			}
			for _, s := range []*server{on, off} { // warm both up
				if _, _, err := acctBurst(ctx, s, conns, ac.Pipeline, burst/2, p.Drain); err != nil {
					return nil, err
				}
			}
		}
		b := AccountingBurst{OnFirst: i%2 == 0}
		order := []*server{on, off}
		if !b.OnFirst {
			order = []*server{off, on}
		}
		for _, s := range order {
			us, n, err := acctBurst(ctx, s, conns, ac.Pipeline, burst, p.Drain)
			if err != nil {
				return nil, err
			}
			if s == on {
				b.OnUs, b.Responses[0] = us, n
			} else {
				b.OffUs, b.Responses[1] = us, n
			}
		}
		ac.Rounds = append(ac.Rounds, b)
	}
	var ratios []float64
	for _, b := range ac.Rounds {
		if b.OffUs > 0 && b.OnUs > 0 {
			ratios = append(ratios, b.OnUs/b.OffUs-1)
		}
	}
	if len(ratios) == 0 {
		return nil, fmt.Errorf("accounting cost: no round measured both servers")
	}
	ac.Median, ac.Q1, ac.Q3 = quartiles(ratios)
	if lo, hi, ok := medianCI(ratios); ok {
		ac.CILow, ac.CIHigh = &lo, &hi
	}
	return ac, nil
}

// acctBurst drives s with a closed loop of GET /plaintext for d (after a short warm-up)
// and returns its CPU µs per response over the window and the responses.
func acctBurst(ctx context.Context, s *server, conns, pipe int, d, drain time.Duration) (float64, uint64, error) {
	var c0, c1 time.Duration
	var err0, err1 error
	res, err := loadgen.Run(ctx, loadgen.Config{
		Groups: []loadgen.Group{{
			Name: "load", Addr: s.addr, Mode: loadgen.Closed, Conns: conns, Pipeline: pipe,
			Mix: []loadgen.Request{loadgen.NewRequest("plaintext", 1, "GET", s.addr, "/plaintext", nil)},
		}},
		Warmup: AcctBurstWarmup, Duration: d, Drain: drain,
		OnMeasureStart: func() { c0, err0 = schedCPU(s.pid) },
		OnMeasureEnd:   func() { c1, err1 = schedCPU(s.pid) },
	})
	if err != nil {
		return 0, 0, err
	}
	if err0 != nil || err1 != nil {
		return 0, 0, fmt.Errorf("reading the server's CPU time: %v %v", err0, err1)
	}
	n := res.Groups[0].Requests
	if n == 0 {
		return 0, 0, fmt.Errorf("accounting cost: no responses in a burst (errors %v)", res.Groups[0].Errors)
	}
	return float64(c1-c0) / float64(time.Microsecond) / float64(n), n, nil
}

// schedCPU returns the CPU time pid's live threads have run, in nanoseconds, from
// /proc/<pid>/task/*/schedstat (nanosecond resolution, unlike /proc/<pid>/stat's 10 ms
// ticks, which would be too coarse for sub-second bursts). Threads that exited are not
// counted: a Go server keeps its threads.
func schedCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil {
		return 0, err
	}
	if len(tasks) == 0 {
		return 0, fmt.Errorf("no threads of pid %d", pid)
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread just exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %v", t, err)
		}
		total += ns
	}
	return time.Duration(total), nil
}

// quartiles returns the median, first and third quartiles of vs (sorted in place), the
// quartiles as the medians of the lower and upper halves.
func quartiles(vs []float64) (median, q1, q3 float64) {
	sort.Float64s(vs)
	med := func(s []float64) float64 {
		n := len(s)
		if n == 0 {
			return 0
		}
		if n%2 == 1 {
			return s[n/2]
		}
		return (s[n/2-1] + s[n/2]) / 2
	}
	n := len(vs)
	if n < 2 {
		return med(vs), med(vs), med(vs)
	}
	return med(vs), med(vs[:n/2]), med(vs[(n+1)/2:])
}

// medianCI returns a distribution-free confidence interval of the median of sorted (in
// order) at about 95%: [sorted[k-1], sorted[n-k]] with k the largest rank such that
// P(Binomial(n, 1/2) < k) <= 2.5%, so that each bound misses the median with at most that
// chance. ok is false when no rank qualifies (fewer than 6 values).
func medianCI(sorted []float64) (lo, hi float64, ok bool) {
	sort.Float64s(sorted) // in case
	n := len(sorted)
	k := 0
	cum, term := 0.0, math.Pow(0.5, float64(n)) // P(B = 0)
	for i := 0; i < n/2; i++ {
		cum += term // P(B <= i)
		if cum > 0.025 {
			break
		}
		k = i + 1 // P(B < i+1) <= 2.5%
		term *= float64(n-i) / float64(i+1)
	}
	if k == 0 {
		return 0, 0, false
	}
	return sorted[k-1], sorted[n-k], true
}

// acctVerdict decides the accounting-cost goal from the median's interval: pass when it
// lies under goal, fail when it lies at or over it, nil (undecided) when it straddles it
// or there is none.
func acctVerdict(ac *AccountingCost, goal float64) *bool {
	if ac.CILow == nil || ac.CIHigh == nil {
		return nil
	}
	var v bool
	switch {
	case *ac.CIHigh < goal:
		v = true
	case *ac.CILow >= goal:
		v = false
	default:
		return nil
	}
	return &v
}
