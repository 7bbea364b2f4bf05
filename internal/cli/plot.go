package cli

import (
	"fmt"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/train"
)

// PlotOptions are the options of `gochat plot`.
type PlotOptions struct {
	g      *Globals
	Key    string
	Output string
	Every  int
	Window int
	runs   []train.PlotRun
}

func newPlotCmd(g *Globals, runF func(*PlotOptions) error) *cobra.Command {
	o := &PlotOptions{g: g}
	cmd := &cobra.Command{
		Use:   "plot --key loss --output FILE.png NAME=METRICS.jsonl...",
		Short: "Compare a metric of several runs: one PNG, and a table with the largest gap",
		Long: `Draw metric --key of several runs (their metrics.jsonl, each named NAME=PATH)
against the step in one PNG, and print the values every --every steps with the
largest gap between each run and the first, compared on running means over
--window steps (per-step losses are noisy): relative to the first run's
value at that step, and absolute (with its share of the first run's first
running mean, the scale that stays meaningful as a loss goes to zero).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				name, path, ok := strings.Cut(a, "=")
				if !ok || name == "" || path == "" {
					return usageErrorf("run %q: want NAME=PATH/metrics.jsonl", a)
				}
				o.runs = append(o.runs, train.PlotRun{Name: name, Metrics: path})
			}
			if o.Output == "" || o.Key == "" {
				return usageErrorf("--key and --output are required")
			}
			if err := flagsBelow(cmd.Flags(), flagMin{"every", 1}, flagMin{"window", 1}); err != nil {
				return err
			}
			if runF != nil {
				return runF(o)
			}
			return runPlot(o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Key, "key", "loss", "the metric to compare")
	f.StringVar(&o.Output, "output", "", "the PNG to write")
	f.IntVar(&o.Every, "every", 20, "table rows every this many steps")
	f.IntVar(&o.Window, "window", 20, "steps of the running means the gap is measured on")
	return cmd
}

func runPlot(o *PlotOptions) error {
	series, err := train.PlotCompare(o.Key, o.Output, o.runs)
	if err != nil {
		return err
	}
	// Values by step, and running means over the window.
	at := make([]map[int]float64, len(o.runs))
	mean := make([]map[int]float64, len(o.runs))
	for i, r := range o.runs {
		at[i], mean[i] = map[int]float64{}, map[int]float64{}
		xy := series[r.Name]
		for j, p := range xy {
			at[i][int(p.X)] = p.Y
			lo, s := max(0, j-o.Window+1), 0.0
			for _, q := range xy[lo : j+1] {
				s += q.Y
			}
			mean[i][int(p.X)] = s / float64(j+1-lo)
		}
	}
	w := o.g.Out
	fmt.Fprintf(w, "%-6s", "step")
	for _, r := range o.runs {
		fmt.Fprintf(w, " %12s", r.Name)
	}
	fmt.Fprintln(w)
	last := 0
	for s := range at[0] {
		last = max(last, s)
	}
	for s := 1; s <= last; s++ {
		if s != 1 && s%o.Every != 0 && s != last {
			continue
		}
		if _, ok := at[0][s]; !ok {
			continue
		}
		fmt.Fprintf(w, "%-6d", s)
		for i := range o.runs {
			if v, ok := at[i][s]; ok {
				fmt.Fprintf(w, " %12.4f", v)
			} else {
				fmt.Fprintf(w, " %12s", "-")
			}
		}
		fmt.Fprintln(w)
	}
	first := math.NaN() // the first run's first running mean: the scale of absolute gaps
	for s := 1; s <= last; s++ {
		if m, ok := mean[0][s]; ok {
			first = m
			break
		}
	}
	for i := 1; i < len(o.runs); i++ {
		worst, wstep, worstAbs, astep := 0.0, 0, 0.0, 0
		for s, m0 := range mean[0] {
			if m, ok := mean[i][s]; ok {
				if d := math.Abs(m-m0) / math.Max(math.Abs(m0), 1e-12); d > worst {
					worst, wstep = d, s
				}
				if d := math.Abs(m - m0); d > worstAbs {
					worstAbs, astep = d, s
				}
			}
		}
		fmt.Fprintf(w, "largest gap of %s vs %s (%d-step running means of %s): %.2f%% at step %d\n",
			o.runs[i].Name, o.runs[0].Name, o.Window, o.Key, 100*worst, wstep)
		fmt.Fprintf(w, "largest absolute gap: %.4g at step %d (%.2f%% of %s's first running mean, %.4g)\n",
			worstAbs, astep, 100*worstAbs/math.Abs(first), o.runs[0].Name, first)
	}
	fmt.Fprintf(w, "plot: %s\n", o.Output)
	return nil
}
