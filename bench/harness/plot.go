package harness

import (
	"fmt"
	"math"
	"path/filepath"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// percentileTicks marks the log-scale percentile axis like HdrHistogram's plotter: x is
// 1/(1-q), so 10 is the 90th percentile, 100 the 99th, and so on.
type percentileTicks struct{}

// Ticks returns the ticks between min and max.
func (percentileTicks) Ticks(lo, hi float64) []plot.Tick {
	labels := []string{"0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"}
	var ticks []plot.Tick
	for i, l := range labels {
		v := math.Pow(10, float64(i))
		if v >= lo*0.999 && v <= hi*1.001 {
			ticks = append(ticks, plot.Tick{Value: v, Label: l})
		}
	}
	return ticks
}

// percentileCurve returns the latency (ms) by percentile of h as points (1/(1-q), ms), ten
// points per decade, ending at the maximum.
func percentileCurve(h *hdrhistogram.Histogram) plotter.XYs {
	n := h.TotalCount()
	if n == 0 {
		return nil
	}
	var pts plotter.XYs
	for k := 0; ; k++ {
		x := math.Pow(10, float64(k)/10)
		if x > float64(n) || k > 60 {
			break
		}
		q := 100 * (1 - 1/x)
		pts = append(pts, plotter.XY{X: x, Y: float64(h.ValueAtQuantile(q)) / 1000})
	}
	last := math.Max(float64(n), pts[len(pts)-1].X*1.01)
	pts = append(pts, plotter.XY{X: last, Y: float64(h.Max()) / 1000})
	return pts
}

// plotScenario writes one PNG per load group of s: latency by percentile, one line per
// phase and target.
func plotScenario(out string, s *ScenarioResult) error {
	var groups []string
	seen := map[string]bool{}
	for _, ph := range s.Phases {
		for _, run := range ph.Runs {
			for _, g := range run.Groups {
				if !seen[g.Name] && g.Mode != "idle" {
					seen[g.Name] = true
					groups = append(groups, g.Name)
				}
			}
		}
	}
	for _, group := range groups {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: %s latency by percentile", s.Name, group)
		p.X.Label.Text = "percentile"
		p.Y.Label.Text = "latency (ms)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = percentileTicks{}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		i := 0
		for _, ph := range s.Phases {
			for _, run := range ph.Runs {
				g := run.Group(group)
				if g == nil || g.hist == nil {
					continue
				}
				pts := percentileCurve(g.hist)
				if len(pts) < 2 {
					continue
				}
				line, err := plotter.NewLine(pts)
				if err != nil {
					return err
				}
				line.Color = plotutil.Color(i)
				line.Dashes = plotutil.Dashes(i / 7)
				line.Width = vg.Points(1.5)
				p.Add(line)
				label := run.Target
				if len(s.Phases) > 1 {
					label = ph.Name + " " + run.Target
				}
				p.Legend.Add(label, line)
				i++
			}
		}
		if i == 0 {
			continue
		}
		if err := p.Save(9*vg.Inch, 5*vg.Inch, filepath.Join(out, fileName(s.Name, group)+".png")); err != nil {
			return err
		}
	}
	return nil
}
