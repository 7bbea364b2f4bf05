package train

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// PlotMetrics draws the training curves of a metrics.jsonl as PNG files in
// dir: loss.png (training loss and eval_loss), lr.png, grad_norm.png, and
// one file per other metric (accuracy, rewards, ...). It returns the files
// written.
func PlotMetrics(metricsPath, dir string) ([]string, error) {
	recs, err := ReadMetrics(metricsPath)
	if err != nil {
		return nil, err
	}
	series := map[string]plotter.XYs{}
	for _, r := range recs {
		step, ok := r["step"]
		if !ok {
			continue
		}
		for k, v := range r {
			if k == "step" || k == "epoch" || k == "tokens_per_sec" {
				continue
			}
			series[k] = append(series[k], plotter.XY{X: step, Y: v})
		}
	}
	groups := [][]string{{"loss", "eval_loss"}, {"lr"}, {"grad_norm"}}
	used := map[string]bool{}
	for _, g := range groups {
		for _, k := range g {
			used[k] = true
		}
	}
	var rest []string
	for k := range series {
		if !used[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		groups = append(groups, []string{k})
	}
	var files []string
	for _, g := range groups {
		var names []string
		for _, k := range g {
			if len(series[k]) > 0 {
				names = append(names, k)
			}
		}
		if len(names) == 0 {
			continue
		}
		path := filepath.Join(dir, strings.ReplaceAll(g[0], "/", "_")+".png")
		if err := plotSeries(path, names, series); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

var plotColors = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255}, color.RGBA{214, 39, 40, 255},
}

func plotSeries(path string, names []string, series map[string]plotter.XYs) (err error) {
	defer func() { // the plotting library panics on ranges it cannot draw
		if r := recover(); r != nil {
			err = fmt.Errorf("plot %s: %v", path, r)
		}
	}()
	p := plot.New()
	// Fix degenerate ranges (one point, a constant series) and skip
	// non-finite values, which the axes cannot show.
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, n := range names {
		finite := series[n][:0:0]
		for _, pt := range series[n] {
			if !math.IsNaN(pt.Y) && !math.IsInf(pt.Y, 0) {
				finite = append(finite, pt)
				xmin, xmax = math.Min(xmin, pt.X), math.Max(xmax, pt.X)
				ymin, ymax = math.Min(ymin, pt.Y), math.Max(ymax, pt.Y)
			}
		}
		series[n] = finite
	}
	if math.IsInf(xmin, 0) {
		return nil // nothing finite to draw
	}
	if xmax == xmin {
		p.X.Min, p.X.Max = xmin-1, xmax+1
	}
	if ymax-ymin <= 1e-12*math.Max(1, math.Abs(ymax)) {
		d := math.Max(1e-3, math.Abs(ymax)*0.1)
		p.Y.Min, p.Y.Max = ymin-d, ymax+d
	}
	p.Title.Text = strings.Join(names, ", ")
	p.X.Label.Text = "step"
	p.Add(plotter.NewGrid())
	for i, n := range names {
		if len(series[n]) == 0 {
			continue
		}
		line, err := plotter.NewLine(series[n])
		if err != nil {
			return fmt.Errorf("plot %s: %w", n, err)
		}
		line.Color = plotColors[i%len(plotColors)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(n, line)
		if len(series[n]) < 30 {
			pts, _ := plotter.NewScatter(series[n])
			pts.Color = line.Color
			p.Add(pts)
		}
	}
	p.Legend.Top = true
	tmp := path + ".tmp.png"
	if err := p.Save(6*vg.Inch, 3.5*vg.Inch, tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// PlotRun names a metrics.jsonl for PlotCompare.
type PlotRun struct {
	Name    string
	Metrics string // path of a metrics.jsonl
}

// PlotCompare draws metric key of several runs against the step in one PNG
// at path and returns each run's series (step -> value, in step order).
func PlotCompare(key, path string, runs []PlotRun) (map[string]plotter.XYs, error) {
	series := map[string]plotter.XYs{}
	var names []string
	for _, r := range runs {
		recs, err := ReadMetrics(r.Metrics)
		if err != nil {
			return nil, err
		}
		if _, dup := series[r.Name]; dup {
			return nil, fmt.Errorf("plot: run name %q given twice", r.Name)
		}
		var xy plotter.XYs
		for _, rec := range recs {
			step, ok1 := rec["step"]
			v, ok2 := rec[key]
			if ok1 && ok2 {
				xy = append(xy, plotter.XY{X: step, Y: v})
			}
		}
		if len(xy) == 0 {
			return nil, fmt.Errorf("plot: %s has no %q values", r.Metrics, key)
		}
		series[r.Name] = xy
		names = append(names, r.Name)
	}
	out := map[string]plotter.XYs{}
	for k, v := range series {
		out[k] = append(plotter.XYs(nil), v...)
	}
	return out, plotSeries(path, names, series)
}
