package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/batonrt/baton/bench/loadgen"
	"github.com/batonrt/baton/bench/servers"
)

// Defaults of the scenarios (the short suite uses the Quick values).
const (
	QuickWarmup   = time.Second
	QuickDuration = 3 * time.Second
	FullWarmup    = 5 * time.Second
	FullDuration  = 30 * time.Second

	DefaultIdleConns = 10000
)

// windows returns a phase's warm-up and window: p's overrides, else the scenario's quick or
// full values.
func windows(p Params, quickWarm, quickDur, fullWarm, fullDur time.Duration) (warm, dur time.Duration) {
	warm, dur = fullWarm, fullDur
	if p.Quick {
		warm, dur = quickWarm, quickDur
	}
	if p.Duration > 0 {
		dur = p.Duration
	}
	if p.Warmup >= 0 {
		warm = p.Warmup
	}
	return warm, dur
}

func pipeline(p Params) int { return max(p.Pipeline, 1) }

// getJSON fetches base+path into v.
func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func init() {
	Register(&Scenario{
		Name:    "plaintext",
		Summary: `GET /plaintext ("Hello, World!", 13 bytes) over keep-alive connections, closed loop at 64, 256 and 1024 connections`,
		Spec: `Each phase cN opens N keep-alive connections; each connection sends GET /plaintext as soon as
the previous response is read (closed loop: maximum throughput; with -pipeline P, batches of P
requests per write). With -rate R the phases are open loop at R requests/s instead. Read req/s
together with the server's CPU µs per request: on loopback with one core per side the client
may saturate first, and then CPU per request is the fair comparison. Latencies of a closed loop
are service times (they hide stalls); use cpu-hog or -rate for latency under a fixed load.`,
		External: true,
		Phases: func(p Params) []Phase {
			conns := p.Conns
			if len(conns) == 0 {
				conns = []int{64, 256, 1024}
			}
			warm, dur := windows(p, QuickWarmup, QuickDuration, FullWarmup, FullDuration)
			var phases []Phase
			for _, c := range conns {
				mode, desc := loadgen.Closed, fmt.Sprintf("%d connections, closed loop, pipeline %d", c, pipeline(p))
				if p.Rate > 0 {
					mode, desc = loadgen.Open, fmt.Sprintf("%d connections, open loop at %.0f req/s, pipeline %d", c, p.Rate, pipeline(p))
				}
				phases = append(phases, Phase{
					Name: fmt.Sprintf("c%d", c), Description: desc, Warmup: warm, Duration: dur,
					Groups: func(host, prefix string) []loadgen.Group {
						return []loadgen.Group{{
							Name: "load", Mode: mode, Conns: c, Rate: p.Rate, Pipeline: pipeline(p),
							Mix: []loadgen.Request{loadgen.NewRequest("plaintext", 1, "GET", host, prefix+"/plaintext", nil)},
						}}
					},
				})
			}
			return phases
		},
		Summarize: func(s *ScenarioResult) []SummaryItem {
			ph := s.Phase("c64")
			if ph == nil && len(s.Phases) > 0 {
				ph = s.Phases[0]
			}
			if ph == nil {
				return nil
			}
			return append(compareTargets("plaintext "+ph.Name, ph, "load", 2, 0.6), accountingCost(s)...)
		},
		AccountingCost: true,
	})

	Register(&Scenario{
		Name:    "json",
		Summary: "small JSON replies that read (3/4) and mutate (1/4) shared game state: closed loop at 64 connections, then open loop at a fixed rate",
		Spec: `The server holds a game state of 1000 players (baton: a plain map touched only on the loop;
net/http: the same map behind a sync.Mutex). The mix is 3 GET /json/players/{id} (read a
player, reply with its fields and the player count) to 1 POST /json/players/{id}/move (move a
player, count the move, reply likewise), over 16 players. Phase c64: 64 connections, closed
loop. Phase open: 64 connections, open loop at -rate (default 5000 req/s in the short suite,
10000 in the full one), so latency percentiles are honest. Latency is also given per request
name (get, move).`,
		Phases: func(p Params) []Phase {
			warm, dur := windows(p, QuickWarmup, QuickDuration, FullWarmup, FullDuration)
			rate := p.Rate
			if rate <= 0 {
				rate = 10000
				if p.Quick {
					rate = 5000
				}
			}
			mix := func(host, prefix string) []loadgen.Request {
				var m []loadgen.Request
				for i := range 16 {
					id := fmt.Sprintf("p%d", i*61%servers.Players)
					m = append(m,
						loadgen.NewRequest("get", 3, "GET", host, prefix+"/json/players/"+id, nil),
						loadgen.NewRequest("move", 1, "POST", host, prefix+"/json/players/"+id+"/move", nil))
				}
				return m
			}
			return []Phase{
				{
					Name: "c64", Description: "64 connections, closed loop", Warmup: warm, Duration: dur,
					Groups: func(host, prefix string) []loadgen.Group {
						return []loadgen.Group{{Name: "load", Mode: loadgen.Closed, Conns: 64, Pipeline: pipeline(p), Mix: mix(host, prefix)}}
					},
				},
				{
					Name: "open", Description: fmt.Sprintf("64 connections, open loop at %.0f req/s", rate), Warmup: warm, Duration: dur,
					Groups: func(host, prefix string) []loadgen.Group {
						return []loadgen.Group{{Name: "load", Mode: loadgen.Open, Conns: 64, Rate: rate, Pipeline: pipeline(p), Mix: mix(host, prefix)}}
					},
				},
			}
		},
		Summarize: func(s *ScenarioResult) []SummaryItem {
			return compareTargets("json c64", s.Phase("c64"), "load", 0, 0)
		},
	})

	Register(&Scenario{
		Name:    "slow-flood",
		Summary: "95% fast (1 ms) / 5% slow (200 ms) offloaded calls at a fixed rate; fast-call percentiles with lanes, without lanes, and with no slow traffic",
		Spec: `Each route does a blocking call (a sleep standing for a database query) in an offload pool of
16 tokens (baton: offload.Do; with lanes the slow lane gets the default quarter, 4 tokens; each
lane queues at most 64 calls, then 503). Open loop at 2000 req/s (-rate): group fast sends 95%
of it (GET /flood/MODE/fast, 1 ms call) over 64 connections, group slow 5% (GET
/flood/MODE/slow, 200 ms call) over 128 connections, so the slow calls alone want 20 tokens,
more than the whole pool. Phase baseline: the fast group alone (MODE lanes). Phase lanes: both
groups, pool with lanes (the predictor learns the slow route during the warm-up). Phase
nolanes: both groups, a pool of the same size without lanes. Read the fast group's p99: with
lanes it should stay within 2x of the baseline; without lanes fast calls queue behind slow ones
or are refused. The slow group's latency and errors (503, timeouts) are expected to be bad.
net/http has no lanes: its handlers wait for one of 16 database/sql-like connections, without
bound, in all phases.`,
		Phases: func(p Params) []Phase {
			warm, dur := windows(p, QuickWarmup, QuickDuration, FullWarmup, FullDuration)
			rate := p.Rate
			if rate <= 0 {
				rate = 2000
			}
			phase := func(name, mode string, slow bool, desc string) Phase {
				return Phase{
					Name: name, Description: desc, Warmup: warm, Duration: dur,
					Groups: func(host, prefix string) []loadgen.Group {
						gs := []loadgen.Group{{Name: "fast", Mode: loadgen.Open, Conns: 64, Rate: rate * 0.95,
							Mix: []loadgen.Request{loadgen.NewRequest("fast", 1, "GET", host, prefix+"/flood/"+mode+"/fast", nil)}}}
						if slow {
							gs = append(gs, loadgen.Group{Name: "slow", Mode: loadgen.Open, Conns: 128, Rate: rate * 0.05,
								Mix: []loadgen.Request{loadgen.NewRequest("slow", 1, "GET", host, prefix+"/flood/"+mode+"/slow", nil)}})
						}
						return gs
					},
				}
			}
			return []Phase{
				phase("baseline", "lanes", false, fmt.Sprintf("fast calls alone at %.0f req/s", rate*0.95)),
				phase("lanes", "lanes", true, fmt.Sprintf("fast at %.0f req/s + slow at %.0f req/s, pool with lanes", rate*0.95, rate*0.05)),
				phase("nolanes", "nolanes", true, fmt.Sprintf("fast at %.0f req/s + slow at %.0f req/s, pool without lanes", rate*0.95, rate*0.05)),
			}
		},
		Summarize: slowFloodSummary,
	})

	Register(&Scenario{
		Name:    "cpu-hog",
		Summary: "a route burning 20 ms of CPU on the loop, without yielding (phase spin) and yielding every 1 ms (phase yield); neighbours' latency",
		Spec: `Two groups at once, both open loop. neighbour: GET /plaintext at 500 req/s (1000 in the full
suite, or -rate) over 16 connections, the light traffic whose latency we care about. hog: GET
/hog/spin (phase spin: burns 20 ms of CPU in one go) or GET /hog/yield (phase yield: the same
20 ms in 1 ms pieces with Ctx.Yield between them) at 10 req/s over 2 connections, i.e. the
hogs want 20% of one core. On baton a hog that does not yield holds the loop for 20 ms and
every neighbour arriving meanwhile waits; with Yield the neighbours wait at most about one
slice. net/http has no loop: its hog burns in its own goroutine in both phases (the Go
scheduler preempts it every 10 ms when the server has one CPU). Read the neighbour p99 of
spin against yield, the hog's own latency, and extra.hog_stats (from GET /hog/stats: on baton
the hogs' scheduling figures from Ctx.Stats: rounds, time on the loop, longest slice, queue
delay).`,
		Phases: func(p Params) []Phase {
			warm, dur := windows(p, QuickWarmup, 5*time.Second, FullWarmup, FullDuration)
			rate := p.Rate
			if rate <= 0 {
				rate = 1000
				if p.Quick {
					rate = 500
				}
			}
			var phases []Phase
			for _, variant := range []string{"spin", "yield"} {
				phases = append(phases, Phase{
					Name:        variant,
					Description: fmt.Sprintf("neighbours at %.0f req/s, hogs (/hog/%s) at 10 req/s", rate, variant),
					Warmup:      warm, Duration: dur,
					Groups: func(host, prefix string) []loadgen.Group {
						return []loadgen.Group{
							{Name: "neighbour", Mode: loadgen.Open, Conns: 16, Rate: rate,
								Mix: []loadgen.Request{loadgen.NewRequest("plaintext", 1, "GET", host, prefix+"/plaintext", nil)}},
							{Name: "hog", Mode: loadgen.Open, Conns: 2, Rate: 10,
								Mix: []loadgen.Request{loadgen.NewRequest(variant, 1, "GET", host, prefix+"/hog/"+variant, nil)}},
						}
					},
					After: func(ctx context.Context, base string, run *RunResult) error {
						var st servers.HogStats
						if err := getJSON(ctx, base+"/hog/stats", &st); err != nil {
							return err
						}
						if run.Extra == nil {
							run.Extra = map[string]any{}
						}
						run.Extra["hog_stats"] = st
						return nil
					},
				})
			}
			return phases
		},
		Summarize: cpuHogSummary,
	})

	Register(&Scenario{
		Name:    "reconnect-burst",
		Summary: "thousands of workers reconnect within seconds and heartbeat while request_task, behind a gate of 5, is hammered",
		Spec: `A fleet of workers reconnecting after a deploy. Group heartbeat: 2000 connections (5000 in the
full suite, or -burst-conns) connect during the window, spread evenly over its first 2 s (5 s),
and each sends POST /burst/heartbeat/{worker} at once and then every 2 s (5 s). Group
request_task: 32 connections send POST /burst/request_task at 1000 req/s, open loop; the route
admits 5 calls at once through a non-blocking gate (baton: Server.NewGate + TryEnter, the work
offloaded; net/http: a channel semaphore) and each admitted call does 20 ms of blocking work,
so about three quarters are refused with 429 and Retry-After. Read the heartbeat p99 and its
errors (goal: none, connect errors included), the connect times, and the gate rejections
(status 429 of request_task, and extra.burst_stats from GET /burst/stats).`,
		Phases: func(p Params) []Phase {
			warm, dur := windows(p, QuickWarmup, 5*time.Second, FullWarmup, FullDuration)
			n, spread, period := 5000, 5*time.Second, 5*time.Second
			if p.Quick {
				n, spread, period = 2000, 2*time.Second, 2*time.Second
			}
			if p.BurstConns > 0 {
				n = p.BurstConns
			}
			spread = min(spread, dur/2)
			return []Phase{{
				Name: fmt.Sprintf("c%d", n),
				Description: fmt.Sprintf("%d workers connect over %v, heartbeat every %v; request_task at 1000 req/s",
					n, spread, period),
				Warmup: warm, Duration: dur,
				Groups: func(host, prefix string) []loadgen.Group {
					var beats []loadgen.Request
					for i := range 64 {
						beats = append(beats, loadgen.NewRequest("heartbeat", 1, "POST", host, fmt.Sprintf("%s/burst/heartbeat/w%d", prefix, i), nil))
					}
					return []loadgen.Group{
						{Name: "heartbeat", Mode: loadgen.Open, Conns: n, Rate: float64(n) / period.Seconds(), ConnectSpread: spread, Mix: beats},
						{Name: "request_task", Mode: loadgen.Open, Conns: 32, Rate: 1000,
							Mix: []loadgen.Request{loadgen.NewRequest("request_task", 1, "POST", host, prefix+"/burst/request_task", nil)}},
					}
				},
				After: func(ctx context.Context, base string, run *RunResult) error {
					var st servers.BurstStats
					if err := getJSON(ctx, base+"/burst/stats", &st); err != nil {
						return err
					}
					if run.Extra == nil {
						run.Extra = map[string]any{}
					}
					run.Extra["burst_stats"] = st
					return nil
				},
			}}
		},
		Summarize: reconnectSummary,
	})

	Register(&Scenario{
		Name:    "idle-conns",
		Summary: "10,000 idle keep-alive connections plus light traffic; server memory per connection",
		Spec: `Before the warm-up, 10,000 connections (-idle-conns) connect, send one GET /plaintext each and
then stay idle; meanwhile a light group sends GET /plaintext at 200 req/s over 8 connections.
The server's resident memory is read before the connections open and at the start of the
window: extra.rss_per_conn = (rss_start - rss_before) / idle connections. At the end every idle
connection sends one more request: alive counts those that still answered (goal: all). Both
processes raise RLIMIT_NOFILE to the hard limit; the harness lowers the count (with a warning)
if the limit is too low.`,
		Phases: func(p Params) []Phase {
			warm, dur := windows(p, QuickWarmup, QuickDuration, FullWarmup, FullDuration)
			n := p.IdleConns
			if n <= 0 {
				n = DefaultIdleConns
			}
			return []Phase{{
				Name: fmt.Sprintf("c%d", n), Description: fmt.Sprintf("%d idle connections, light traffic at 200 req/s", n),
				Warmup: warm, Duration: dur, RSSPerConnGroup: "idle",
				Groups: func(host, prefix string) []loadgen.Group {
					req := []loadgen.Request{loadgen.NewRequest("plaintext", 1, "GET", host, prefix+"/plaintext", nil)}
					return []loadgen.Group{
						{Name: "idle", Mode: loadgen.Idle, Conns: n, Verify: true, Mix: req},
						{Name: "light", Mode: loadgen.Open, Conns: 8, Rate: 200, Mix: req},
					}
				},
			}}
		},
		Summarize: func(s *ScenarioResult) []SummaryItem {
			var out []SummaryItem
			for _, ph := range s.Phases {
				for _, r := range ph.Runs {
					if v, ok := r.Extra["rss_per_conn"].(float64); ok {
						out = append(out, SummaryItem{Name: "idle-conns: " + r.Target + " RSS per idle connection", Value: v, Unit: "bytes"})
					}
					if g := r.Group("idle"); g != nil {
						ok := g.Alive == uint64(g.Conns)
						out = append(out, SummaryItem{Name: "idle-conns: " + r.Target + " idle connections alive at the end", Value: float64(g.Alive),
							Goal: fmt.Sprintf("= %d", g.Conns), Pass: &ok})
					}
				}
			}
			return out
		},
	})
}

// accountingGoal is the most accounting may cost: the accounting issue's target, under 5%
// of throughput, here as server CPU per request.
const accountingGoal = 0.05

// accountingCost returns the interleaved accounting-cost figure (with the goal) and, for
// every phase where both baton and baton-noacct ran, the one-window comparison (without a
// goal: two windows on a shared VM differ by more than the cost, so it only says whether
// something is badly off).
func accountingCost(s *ScenarioResult) []SummaryItem {
	var out []SummaryItem
	if ac := s.AccountingCost; ac != nil {
		it := SummaryItem{
			Name:  fmt.Sprintf("plaintext: accounting cost, interleaved (median of %d rounds of baton/baton-noacct server CPU per request - 1)", len(ac.Rounds)),
			Value: 100 * ac.Median, Unit: "%", Goal: fmt.Sprintf("< %g%%", 100*accountingGoal), Pass: acctVerdict(ac, accountingGoal),
			Note: fmt.Sprintf("quartiles %.1f%% .. %.1f%%; %v bursts, %d connections, pipeline %d",
				100*ac.Q1, 100*ac.Q3, time.Duration(ac.BurstS*float64(time.Second)), ac.Conns, ac.Pipeline),
		}
		if ac.CILow != nil {
			it.Note = fmt.Sprintf("95%% interval of the median %.1f%% .. %.1f%%; ", 100**ac.CILow, 100**ac.CIHigh) + it.Note
		}
		if it.Pass == nil {
			it.Note = "undecided: the interval of the median straddles the goal (or too few rounds); " + it.Note
		}
		out = append(out, it)
	}
	for _, ph := range s.Phases {
		on, off := ph.Run(servers.Baton), ph.Run(servers.BatonNoAccounting)
		if on == nil || off == nil || on.Server == nil || off.Server == nil || off.Server.CPUUsPerReq == 0 {
			continue
		}
		v := on.Server.CPUUsPerReq/off.Server.CPUUsPerReq - 1
		out = append(out, SummaryItem{
			Name: "plaintext " + ph.Name + ": accounting cost, one window each (baton/baton-noacct server CPU per request - 1)", Value: 100 * v, Unit: "%",
			Note: fmt.Sprintf("%.2f vs %.2f µs; a smoke signal, the interleaved figure is the one with the goal", on.Server.CPUUsPerReq, off.Server.CPUUsPerReq),
		})
	}
	return out
}

// compareTargets returns baton/nethttp ratios of req/s and server CPU per request for group
// in ph, with goals when rpsGoal or cpuGoal are positive.
func compareTargets(label string, ph *PhaseResult, group string, rpsGoal, cpuGoal float64) []SummaryItem {
	b, n := ph.Run(servers.Baton), ph.Run(servers.NetHTTP)
	bg, ng := b.Group(group), n.Group(group)
	if bg == nil || ng == nil || ng.RPS == 0 {
		return nil
	}
	rps := SummaryItem{Name: label + ": baton/nethttp req/s", Value: bg.RPS / ng.RPS, Unit: "x"}
	if rpsGoal > 0 {
		rps.Goal = fmt.Sprintf(">= %g", rpsGoal)
		ok := rps.Value >= rpsGoal
		rps.Pass = &ok
	}
	if b.Client.Saturated || n.Client.Saturated {
		rps.Note = "the load generator saturated its CPUs: compare CPU per request"
	}
	out := []SummaryItem{rps}
	if b.Server != nil && n.Server != nil && n.Server.CPUUsPerReq > 0 {
		cpu := SummaryItem{Name: label + ": baton/nethttp server CPU per request", Value: b.Server.CPUUsPerReq / n.Server.CPUUsPerReq, Unit: "x",
			Note: fmt.Sprintf("%.1f vs %.1f µs", b.Server.CPUUsPerReq, n.Server.CPUUsPerReq)}
		if cpuGoal > 0 {
			cpu.Goal = fmt.Sprintf("<= %g", cpuGoal)
			ok := cpu.Value <= cpuGoal
			cpu.Pass = &ok
		}
		out = append(out, cpu)
	}
	return out
}

func cpuHogSummary(s *ScenarioResult) []SummaryItem {
	spin, yield := s.Phase("spin"), s.Phase("yield")
	var out []SummaryItem
	for _, target := range []string{servers.Baton, servers.NetHTTP} {
		a, b := spin.Run(target).Group("neighbour"), yield.Run(target).Group("neighbour")
		if a == nil || b == nil || b.Latency.P99 == 0 {
			continue
		}
		it := SummaryItem{
			Name:  "cpu-hog: " + target + " neighbour p99 spin/yield",
			Value: float64(a.Latency.P99) / float64(b.Latency.P99), Unit: "x",
			Note: fmt.Sprintf("%s vs %s", fmtUs(a.Latency.P99), fmtUs(b.Latency.P99)),
		}
		if target == servers.Baton {
			it.Goal = ">= 10"
			ok := it.Value >= 10
			it.Pass = &ok
		}
		out = append(out, it)
	}
	return out
}

func slowFloodSummary(s *ScenarioResult) []SummaryItem {
	var out []SummaryItem
	for _, target := range []string{servers.Baton, servers.NetHTTP} {
		base, lanes, nolanes := s.Phase("baseline").Run(target).Group("fast"), s.Phase("lanes").Run(target).Group("fast"), s.Phase("nolanes").Run(target).Group("fast")
		if base == nil || lanes == nil || base.Latency.P99 == 0 {
			continue
		}
		it := SummaryItem{
			Name:  "slow-flood: " + target + " fast p99 with lanes / with no slow traffic",
			Value: float64(lanes.Latency.P99) / float64(base.Latency.P99), Unit: "x",
			Note: fmt.Sprintf("%s vs %s", fmtUs(lanes.Latency.P99), fmtUs(base.Latency.P99)),
		}
		if target == servers.Baton {
			it.Goal = "<= 2"
			ok := it.Value <= 2
			it.Pass = &ok
		}
		out = append(out, it)
		if nolanes != nil && lanes.Latency.P99 > 0 {
			out = append(out, SummaryItem{
				Name:  "slow-flood: " + target + " fast p99 without lanes / with lanes",
				Value: float64(nolanes.Latency.P99) / float64(lanes.Latency.P99), Unit: "x",
				Note: fmt.Sprintf("%s vs %s; fast errors without lanes: %d", fmtUs(nolanes.Latency.P99), fmtUs(lanes.Latency.P99), sumErrors(nolanes.Errors)),
			})
		}
	}
	return out
}

func reconnectSummary(s *ScenarioResult) []SummaryItem {
	var out []SummaryItem
	for _, ph := range s.Phases {
		for _, r := range ph.Runs {
			hb, task := r.Group("heartbeat"), r.Group("request_task")
			if hb == nil {
				continue
			}
			fails := sumErrors(hb.Errors)
			it := SummaryItem{Name: "reconnect-burst: " + r.Target + " heartbeat failures", Value: float64(fails),
				Note: fmt.Sprintf("%d heartbeats, p99 %s", hb.Requests, fmtUs(hb.Latency.P99))}
			if r.Target == servers.Baton {
				it.Goal = "= 0"
				ok := fails == 0
				it.Pass = &ok
			}
			out = append(out, it)
			if task != nil {
				out = append(out, SummaryItem{Name: "reconnect-burst: " + r.Target + " request_task gate rejections (429)",
					Value: float64(task.Status["429"]), Note: fmt.Sprintf("of %d responses", task.Requests)})
			}
		}
	}
	return out
}
