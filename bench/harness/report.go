package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/batonrt/baton/bench/loadgen"
)

// fmtUs formats microseconds for a table: "85µs", "1.25ms", "20.3ms", "1.52s".
func fmtUs(us int64) string {
	switch {
	case us <= 0:
		return "-"
	case us < 1000:
		return fmt.Sprintf("%dµs", us)
	case us < 10_000:
		return fmt.Sprintf("%.2fms", float64(us)/1e3)
	case us < 1_000_000:
		return fmt.Sprintf("%.1fms", float64(us)/1e3)
	}
	return fmt.Sprintf("%.2fs", float64(us)/1e6)
}

// fmtErrors gives the error total and its largest kinds.
func fmtErrors(m map[string]uint64) string {
	total := sumErrors(m)
	if total == 0 {
		return "0"
	}
	kinds := loadgen.SortedNames(m)
	sort.SliceStable(kinds, func(i, j int) bool { return m[kinds[i]] > m[kinds[j]] })
	var parts []string
	for i, k := range kinds {
		if i == 2 {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, " "))
}

func fmtMB(b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(b)/(1<<20))
}

// writeTable prints one scenario's table: a row per phase, target and load group. The
// server columns (CPU per request, CPU use, RSS) are per run, on its first row.
func writeTable(w io.Writer, s *ScenarioResult) {
	fmt.Fprintf(w, "\n== %s: %s\n", s.Name, s.Summary)
	if s.Skipped != "" {
		fmt.Fprintf(w, "   skipped: %s\n", s.Skipped)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\ttarget\tgroup\tconns\tmode\treq/s\tp50\tp90\tp99\tp99.9\tmax\terrors\tsrv µs/req\tsrv cpu\tsrv sys\tsrv rss MB\tcli cpu\t")
	for _, ph := range s.Phases {
		for _, run := range ph.Runs {
			if run.Error != "" && len(run.Groups) == 0 {
				fmt.Fprintf(tw, "%s\t%s\tFAILED: %s\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", ph.Name, run.Target, run.Error)
				continue
			}
			for i, g := range run.Groups {
				srvCPU, srvUtil, srvSys, rss, cli := "", "", "", "", ""
				if i == 0 {
					srvCPU, srvUtil, srvSys, rss = "-", "-", "-", "-"
					if run.Server != nil {
						srvCPU = fmt.Sprintf("%.1f", run.Server.CPUUsPerReq)
						if run.Server.CPUUsPerUnit > 0 {
							srvCPU = fmt.Sprintf("%.2f/%s", run.Server.CPUUsPerUnit, run.Server.Unit)
						}
						srvUtil = fmt.Sprintf("%.0f%%", 100*run.Server.CPUUtil)
						if run.Server.CPUSeconds > 0 {
							srvSys = fmt.Sprintf("%.0f%%", 100*run.Server.CPUSysS/run.Server.CPUSeconds)
						}
						rss = fmtMB(run.Server.RSSEnd)
					}
					cli = fmt.Sprintf("%.0f%%", 100*run.Client.Util)
					if run.Client.Saturated {
						cli += "!"
					}
				}
				mode := g.Mode
				if g.Pipeline > 1 {
					mode += fmt.Sprintf("/p%d", g.Pipeline)
				}
				if g.Mode != "closed" && g.Mode != "idle" && g.Rate > 0 {
					mode += fmt.Sprintf("@%.0f", g.Rate)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
					ph.Name, run.Target, g.Name, g.Conns, mode, g.RPS,
					fmtUs(g.Latency.P50), fmtUs(g.Latency.P90), fmtUs(g.Latency.P99), fmtUs(g.Latency.P999), fmtUs(g.Latency.Max),
					fmtErrors(g.Errors), srvCPU, srvUtil, srvSys, rss, cli)
			}
		}
	}
	tw.Flush()
	if ac := s.AccountingCost; ac != nil {
		fmt.Fprintf(w, "   accounting cost (interleaved): %.1f%% median of %d rounds, quartiles %.1f%% .. %.1f%%; µs/req on/off per round:",
			100*ac.Median, len(ac.Rounds), 100*ac.Q1, 100*ac.Q3)
		for _, b := range ac.Rounds {
			fmt.Fprintf(w, " %.2f/%.2f", b.OnUs, b.OffUs)
		}
		fmt.Fprintln(w)
	}
	// Scenario-specific figures.
	for _, ph := range s.Phases {
		for _, run := range ph.Runs {
			if v, ok := run.Extra["rss_per_conn"].(float64); ok && run.Server != nil {
				fmt.Fprintf(w, "   %s %s: RSS %s MB before, %s MB with the connections: %.0f bytes per connection",
					ph.Name, run.Target, fmtMB(run.Server.RSSBefore), fmtMB(run.Server.RSSStart), v)
				if g := run.Group("idle"); g != nil {
					fmt.Fprintf(w, "; connected in %.1fs; %d of %d idle connections alive at the end", run.Client.SetupS, g.Alive, g.Conns)
				}
				fmt.Fprintln(w)
			}
			for _, k := range loadgen.SortedNames(run.Extra) {
				if k != "rss_per_conn" {
					fmt.Fprintf(w, "   %s %s: %s %s\n", ph.Name, run.Target, k, compactJSON(run.Extra[k]))
				}
			}
			for _, g := range run.Groups {
				if g.Connect != nil {
					fmt.Fprintf(w, "   %s %s %s: connect p50 %s p99 %s max %s\n", ph.Name, run.Target, g.Name,
						fmtUs(g.Connect.P50), fmtUs(g.Connect.P99), fmtUs(g.Connect.Max))
				}
				if len(g.ByRequest) > 1 {
					for _, name := range loadgen.SortedNames(g.ByRequest) {
						l := g.ByRequest[name]
						fmt.Fprintf(w, "   %s %s %s/%s: %d responses, p50 %s p99 %s max %s\n", ph.Name, run.Target, g.Name, name,
							l.Count, fmtUs(l.P50), fmtUs(l.P99), fmtUs(l.Max))
					}
				}
			}
		}
	}
}

// writeSummary prints the headline figures and the warnings.
func writeSummary(w io.Writer, res *Results) {
	fmt.Fprintf(w, "\n== summary (ratios from this run only; %s)\n", pinningNote(res))
	for _, it := range res.Summary {
		line := fmt.Sprintf("   %s: %s%s", it.Name, fmtValue(it.Value), unitSuffix(it.Unit))
		if it.Goal != "" {
			verdict := "FAIL"
			switch {
			case it.Pass == nil:
				verdict = "UNDECIDED" // the figure's uncertainty straddles the goal
			case *it.Pass:
				verdict = "PASS"
			}
			line += fmt.Sprintf("  (goal %s: %s)", it.Goal, verdict)
		}
		if it.Note != "" {
			line += "  [" + it.Note + "]"
		}
		fmt.Fprintln(w, line)
	}
	if len(res.Summary) == 0 {
		fmt.Fprintln(w, "   (no ratios: they need both baton and nethttp in the same run)")
	}
	for _, warn := range res.Warnings {
		fmt.Fprintln(w, "   warning:", warn)
	}
	fmt.Fprintf(w, "   results: %s\n", filepath.Join(res.Options.Out, "results.json"))
}

func fmtValue(v float64) string {
	if v >= 100 || v == float64(int64(v)) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func unitSuffix(u string) string {
	switch u {
	case "":
		return ""
	case "x":
		return "x"
	}
	return " " + u
}

func pinningNote(res *Results) string {
	if res.Options.PinnedApart {
		return fmt.Sprintf("server pinned to CPUs %s, client to %s", res.Options.CPUServer, res.Options.CPUClient)
	}
	return "server and client NOT pinned apart"
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// writeHGRM writes g's latency distribution in HdrHistogram's percentile format, values
// in milliseconds.
func writeHGRM(path string, g *loadgen.GroupResult) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := g.Latency.PercentilesPrint(f, 5, 1000.0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
