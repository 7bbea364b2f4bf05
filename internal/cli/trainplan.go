package cli

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/plan"
	"github.com/gochat-ai/gochat/recipes"
)

// stepPlan is the memory planner's view of one step of `gochat train`.
type stepPlan struct {
	n    int
	what string
	est  *plan.Estimate
	fit  func(plan.Budget) []plan.Change
}

// planSteps estimates the memory of every step `gochat train` will run
// (complete steps are skipped unless --force), from the steps' own parsed
// flags (the recipe's under the command line's) and the models' configs:
// step 3's actor is step 1's output, so it has --actor's architecture;
// its critic, step 2's output, has --reward's. dev is the device the steps
// run on (nil: the CPU, or with perGPU the recipe's GPUs).
func (o *TrainOptions) planSteps(dev kernels.Device) ([]stepPlan, error) {
	if err := o.setup(); err != nil {
		return nil, err
	}
	var out []stepPlan
	for _, n := range []int{1, 2, 3} {
		if !contains(o.Steps, n) || o.complete(n) {
			continue
		}
		st, so := o.newStep(n)
		st.cmd.Annotations = map[string]string{estimateOnly: "true"} // nothing runs: no --data needed
		if err := o.prepare(st, st.args, false); err != nil {
			return nil, err
		}
		p := stepPlan{n: n, what: stepName(n)}
		switch n {
		case 1, 2:
			flag := map[int]string{1: "--actor", 2: "--reward"}[n]
			cfg, err := o.configOf(flag, so.stage.Model, 0)
			if err != nil {
				return nil, err
			}
			dt, err := planDType(o.g, so.stage.DType, dev)
			if err != nil {
				return nil, err
			}
			in := so.stage.planWith(cfg, dt)
			in.Parallel = o.parallel(n, launchParallel(dev, so.stage.ZeROStage, 0, 0))
			so.stage.offloadOptions.plan(&in.Parallel)
			p.est, err = in.Estimate()
			if err != nil {
				return nil, usageErrorf("%s: %v", p.what, err)
			}
			p.fit = in.Fit
		case 3:
			var cfgs [3]*model.Config
			for i, f := range []struct{ flag, dir string }{{"--actor", so.ppo.Actor}, {"--critic", so.ppo.Critic}, {"--reward", so.ppo.Reward}} {
				c, err := o.configOf(f.flag, f.dir, 0)
				if err != nil {
					return nil, err
				}
				cfgs[i] = c
			}
			dt, err := planDType(o.g, so.ppo.DType, dev)
			if err != nil {
				return nil, err
			}
			in := so.ppo.planWith(cfgs[0], cfgs[1], cfgs[2], dt, dev)
			in.Parallel = o.parallel(n, launchParallel(dev, 0, so.ppo.ActorZeRO, so.ppo.CriticZeRO))
			so.ppo.offloadOptions.plan(&in.Parallel)
			p.est, err = in.Estimate()
			if err != nil {
				return nil, usageErrorf("%s: %v", p.what, err)
			}
			p.fit = in.Fit
		}
		out = append(out, p)
	}
	return out, nil
}

// parallel is how step n would run on the recipe's GPUs under its ZeRO
// settings (recipes.Recipe.Later: zero-stage, actor-zero-stage,
// critic-zero-stage, offload, inference-tp-size) when perGPU is set, else
// here: as launched (launchParallel of the step's parsed ZeRO flags).
func (o *TrainOptions) parallel(n int, here plan.Parallel) plan.Parallel {
	r := o.recipe
	if !o.perGPU || r == nil || r.Budget.IsCPU() {
		return here
	}
	step := [...]string{"", "sft", "reward", "ppo"}[n]
	num := func(k string) int {
		v, _ := recipes.FlagValue(r.Later[step][k])
		i, _ := strconv.Atoi(v)
		return i
	}
	off, _ := recipes.FlagValue(r.Later[step]["offload"])
	return plan.Parallel{Ranks: r.Budget.Ranks(), GPU: true, Stage: num("zero-stage"), ActorStage: num("actor-zero-stage"),
		CriticStage: num("critic-zero-stage"), Offload: off == "true", InferenceTP: num("inference-tp-size")}
}

// configOf is the config of the model a step reads from dir: step 1's
// and step 2's outputs have --actor's and --reward's architectures, a
// recipe generator's models its own; anything else is read (config.json
// or a built-in architecture).
func (o *TrainOptions) configOf(flag, dir string, depth int) (*model.Config, error) {
	switch {
	case depth > 3:
		return nil, usageErrorf("%s %s: the models' directories refer to each other", flag, dir)
	case dir == o.stepDir(1):
		return o.configOf("--actor", o.Actor, depth+1)
	case dir == o.stepDir(2):
		return o.configOf("--reward", o.Reward, depth+1)
	case o.gen != nil && strings.HasPrefix(dir, o.genDir+string(filepath.Separator)):
		if c, err := modelConfig(o.g, flag, dir, o.Revision); err == nil {
			return c, nil // prepared already
		}
		return o.gen.Config()
	}
	return modelConfig(o.g, flag, dir, o.Revision)
}

// preflight checks every step to run on dev against what the machine
// offers (stepBudget) before step 1 starts, so that a step 3 that cannot
// fit is refused before hours of steps 1 and 2; each step checks itself
// again when it starts.
func (o *TrainOptions) preflight(dev kernels.Device) error {
	plans, err := o.planSteps(dev)
	if err != nil {
		return err
	}
	b, err := stepBudget(o.g, dev)
	if err != nil {
		o.g.Log.Warn().Err(err).Msg("memory pre-flight skipped: the available memory is unknown")
		return nil
	}
	ev := o.g.Log.Info().Int64("available_bytes", b.mem.Available)
	if b.gpu != "" {
		ev = ev.Int64("gpu_free_bytes", b.GPU)
	}
	var worst *stepPlan
	for i, p := range plans {
		ev = ev.Int64(fmt.Sprintf("step%d_peak_bytes", p.n), p.est.Peak)
		if p.est.GPU {
			ev = ev.Int64(fmt.Sprintf("step%d_host_peak_bytes", p.n), p.est.HostPeak)
		}
		if !p.est.Fits(b.Budget) && worst == nil {
			worst = &plans[i]
		}
	}
	ev.Msgf("memory plan of the steps to run (gochat estimate train shows the tables); %s", b)
	if worst == nil {
		return nil
	}
	msg := refusal(worst.what, worst.est, b, worst.fit(b.Budget))
	if o.SkipPreflight {
		o.g.Log.Warn().Msg(msg + " (--skip-preflight: running anyway)")
		return nil
	}
	flag := "the recipe or the step's flags"
	if o.recipe != nil {
		flag = "recipe " + o.recipe.Source + " (or a copy of it)"
	}
	return usageError{fmt.Errorf("%s; set these in %s, or pass --skip-preflight to run anyway", msg, flag)}
}

// pickRecipe chooses the built-in recipe for --actor's and --reward's
// sizes and this machine, and logs which and why: among the recipes made
// for these two architectures and this kind of hardware (no GPU: the CPU
// recipes), the one with the largest budget whose every step the memory
// planner fits in the available memory. No recipe for these sizes means
// the commands' defaults (logged); recipes that exist but do not fit are
// an error naming them.
func (o *TrainOptions) pickRecipe() error {
	actor, err := modelConfig(o.g, "--actor", o.Actor, o.Revision)
	if err != nil {
		return err
	}
	rm, err := modelConfig(o.g, "--reward", o.Reward, o.Revision)
	if err != nil {
		return err
	}
	mem, err := o.g.availableMemory()
	if err != nil {
		return fmt.Errorf("picking a recipe: %w (or pass --recipe)", err)
	}
	hw := recipes.Hardware{MemoryGB: float64(mem.Available) / 1e9} // GPUs: none yet
	name, why, err := o.chooseRecipe(actor, rm, hw, mem.Available)
	if err != nil {
		return err
	}
	if name == "" {
		o.g.Log.Info().Msg("recipe: none (" + why + "); the commands' defaults apply")
		return nil
	}
	r, err := recipes.Load(name)
	if err != nil {
		return err
	}
	o.recipe, o.Recipe = r, name
	o.g.Log.Info().Str("recipe", name).Str("budget", r.Budget.String()).Msg("recipe: " + name + " (" + why + "; --recipe overrides)")
	return nil
}

// chooseRecipe is pickRecipe's choice for given architectures, hardware
// and available memory (bytes).
func (o *TrainOptions) chooseRecipe(actor, rm *model.Config, hw recipes.Hardware, avail int64) (name, why string, err error) {
	var fits, tooBig []string
	var best *recipes.Recipe
	for _, n := range recipes.Names() {
		r, err := recipes.Load(n)
		if err != nil {
			return "", "", err
		}
		if r.Generator != "" || !sameArch(r.Actor, actor) || !sameArch(r.Reward, rm) || r.Budget.IsCPU() != (hw.GPUs == 0) {
			continue
		}
		if !r.Budget.IsCPU() && !r.Budget.Fits(hw) {
			tooBig = append(tooBig, fmt.Sprintf("%s (%s)", n, r.Budget))
			continue
		}
		// The recipe's steps as gochat runs them on a CPU, or per GPU under
		// the recipe's ZeRO settings.
		c := *o
		c.recipe, c.ready, c.SkipPreflight, c.perGPU = r, false, false, !r.Budget.IsCPU()
		c.Steps = []int{1, 2, 3}
		plans, err := c.planSteps(nil)
		if err != nil {
			return "", "", fmt.Errorf("recipe %s: %w", n, err)
		}
		var peak int64
		for _, p := range plans {
			peak = max(peak, p.est.Peak)
		}
		limit := avail
		if !r.Budget.IsCPU() {
			limit = int64(hw.GPUMemoryGB * 1e9)
		}
		if peak > limit {
			tooBig = append(tooBig, fmt.Sprintf("%s (peak %s)", n, plan.GiB(peak)))
			continue
		}
		fits = append(fits, n)
		if best == nil || r.Budget.Larger(best.Budget) {
			best = r
		}
	}
	kind := "CPU"
	if hw.GPUs > 0 {
		kind = fmt.Sprintf("%d GPUs", hw.GPUs)
	}
	switch {
	case best != nil:
		return best.Name, fmt.Sprintf("the largest built-in recipe for these model sizes on %s whose every step fits %s (of %s)",
			kind, plan.GiB(avail), strings.Join(fits, ", ")), nil
	case len(tooBig) > 0:
		return "", "", usageError{fmt.Errorf("no built-in recipe for these model sizes fits this machine (%s available): %s; pass --recipe FILE or --recipe none",
			plan.GiB(avail), strings.Join(tooBig, ", "))}
	}
	return "", fmt.Sprintf("no built-in recipe for an actor of %d and a reward model of %d parameters on %s",
		model.ParamCount(actor, false), model.ParamCount(rm, true), kind), nil
}

// sameArch reports whether a recipe's model name (a built-in
// architecture such as facebook/opt-1.3b) has the architecture c.
func sameArch(name string, c *model.Config) bool {
	p, err := model.PresetConfig(name)
	if err != nil {
		return false
	}
	return p.ModelType == c.ModelType && p.HiddenSize == c.HiddenSize && p.NumLayers == c.NumLayers &&
		p.FFNDim == c.FFNDim && p.NumHeads == c.NumHeads
}
