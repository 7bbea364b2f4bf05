package train

import (
	"fmt"
	"image/color"
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

func plotSeries(path string, names []string, series map[string]plotter.XYs) error {
	p := plot.New()
	p.Title.Text = strings.Join(names, ", ")
	p.X.Label.Text = "step"
	p.Add(plotter.NewGrid())
	for i, n := range names {
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
