package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/plan"
	"github.com/gochat-ai/gochat/ppo"
	"github.com/gochat-ai/gochat/sft"
	"github.com/gochat-ai/gochat/train"
)

// estimateOnly marks a step command built for `gochat estimate`: it
// needs neither --data nor --output-dir.
const estimateOnly = "gochat/estimate-only"

// forEstimate reports whether cmd is a step command of `gochat estimate`.
func forEstimate(cmd *cobra.Command) bool { return cmd.Annotations[estimateOnly] != "" }

// EstimateOptions are the options of `gochat estimate`.
type EstimateOptions struct {
	g      *Globals
	JSON   bool
	PerGPU bool
}

func newEstimateCmd(g *Globals) *cobra.Command {
	o := &EstimateOptions{g: g}
	cmd := &cobra.Command{
		Use:   "estimate sft|reward|ppo|train [the command's flags]",
		Short: "Estimate the memory of a step (per model and in total) against what the machine offers",
		Long: `Estimate, without loading anything, what a step will hold in memory: per model
the weights, the low halves of the fp32 master weights (bf16), gradients, AdamW moments, activations
(and what they would be with the other gradient-checkpointing setting), logits,
the KV cache and inference workspace of generation, LoRA adapters and the EMA;
the device memory of each phase (load, train, evaluate or generate, score,
save), and the estimated peak resident memory. It compares the peak with what
the machine offers (MemAvailable, cgroup limits) and lists the cheapest changes
that would fit. The subcommands take the same flags (and --recipe, for train)
as the commands they estimate; --data and --output-dir are not needed. Models
may be directories (only config.json is read) or built-in architectures
(opt-125m, opt-350m, opt-1.3b, ...). Every step runs the same estimate before it
loads anything and refuses to start when it does not fit (--skip-preflight
overrides).`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().BoolVar(&o.JSON, "json", false, "print the estimates as JSON")
	perGPUHelp := "train with a GPU recipe: estimate per GPU of the recipe's budget under its ZeRO settings (its later: section), as the ZeRO issue will run it, against the budget"
	mark := func(c *cobra.Command, use, short string) *cobra.Command {
		c.Use, c.Short = use, short
		c.Annotations = map[string]string{estimateOnly: "true"}
		return c
	}
	cmd.AddCommand(
		mark(newSFTCmd(g, func(so *StageOptions) error { return o.stage(so) }), "sft --model DIR|NAME [sft flags]", "Estimate step 1"),
		mark(newRewardCmd(g, func(so *StageOptions) error { return o.stage(so) }), "reward --model DIR|NAME [reward flags]", "Estimate step 2"),
		mark(newPPOCmd(g, func(po *PPOOptions) error { return o.ppo(po) }), "ppo --actor DIR|NAME --critic DIR|NAME [ppo flags]", "Estimate step 3"),
		mark(newTrainCmd(g, func(to *TrainOptions) error { return o.train(to) }), "train --actor DIR|NAME --reward DIR|NAME [--recipe NAME|FILE] [train flags]", "Estimate the steps of gochat train"),
	)
	for _, c := range cmd.Commands() {
		if c.Name() == "train" {
			c.Flags().BoolVar(&o.PerGPU, "per-gpu", false, perGPUHelp)
		}
	}
	return cmd
}

// stepEstimate is one step's estimate with what would fit.
type stepEstimate struct {
	What     string         `json:"what"`
	Estimate *plan.Estimate `json:"estimate"`
	Fits     bool           `json:"fits"`
	Changes  []plan.Change  `json:"changes,omitempty"`
}

func (o *EstimateOptions) stage(so *StageOptions) error {
	dev, done, err := o.device()
	if err != nil {
		return err
	}
	defer done()
	in, err := so.planInput(dev)
	in.Parallel.GPU = isGPU(dev)
	so.offloadOptions.plan(&in.Parallel)
	return o.one(dev, stepName(so.Step), in, err)
}

func (o *EstimateOptions) ppo(po *PPOOptions) error {
	dev, done, err := o.device()
	if err != nil {
		return err
	}
	defer done()
	in, err := po.planInput(dev)
	in.Parallel.GPU = isGPU(dev)
	po.offloadOptions.plan(&in.Parallel)
	return o.one(dev, stepName(3), in, err)
}

// device opens the device --device names, as the step would (newDevice:
// auto takes a usable GPU), for what it offers: a GPU's free memory, its
// dtype choice. done closes it.
func (o *EstimateOptions) device() (dev kernels.Device, done func(), err error) {
	if dev, err = newDevice(o.g); err != nil {
		return nil, nil, err
	}
	return dev, func() {
		if c, ok := dev.(io.Closer); ok {
			c.Close()
		}
	}, nil
}

// isGPU reports whether dev is a GPU for the planner (gpuMemory).
func isGPU(dev kernels.Device) bool {
	_, ok := dev.(gpuMemory)
	return ok
}

// planned is a step's planner input: plan.Stage or plan.PPO.
type planned interface {
	Estimate() (*plan.Estimate, error)
	Fit(budget plan.Budget) []plan.Change
}

// one prints the estimate of one step from its planner input (or the
// error that made it).
func (o *EstimateOptions) one(dev kernels.Device, what string, in planned, err error) error {
	if err != nil {
		return err
	}
	est, err := in.Estimate()
	if err != nil {
		return usageError{err}
	}
	return o.print(dev, []stepEstimate{{What: what, Estimate: est}}, []func(plan.Budget) []plan.Change{in.Fit})
}

func (o *EstimateOptions) train(to *TrainOptions) error {
	to.perGPU = o.PerGPU
	if o.PerGPU && (to.recipe == nil || to.recipe.Budget.IsCPU()) {
		return usageErrorf("--per-gpu needs a GPU recipe (gochat recipes lists their budgets)")
	}
	dev, done, err := o.device()
	if err != nil {
		return err
	}
	defer done()
	if o.PerGPU {
		dev = nil // the recipe's GPUs, not this machine's
	}
	plans, err := to.planSteps(dev)
	if err != nil {
		return err
	}
	var ests []stepEstimate
	var fits []func(plan.Budget) []plan.Change
	for _, p := range plans {
		ests = append(ests, stepEstimate{What: p.what, Estimate: p.est})
		fits = append(fits, p.fit)
	}
	return o.print(dev, ests, fits)
}

// print writes the estimates (with what fits what the machine offers on
// dev: stepBudget) as tables or JSON.
func (o *EstimateOptions) print(dev kernels.Device, ests []stepEstimate, fits []func(plan.Budget) []plan.Change) error {
	b, memErr := stepBudget(o.g, dev)
	for i := range ests {
		if memErr == nil {
			ests[i].Fits = ests[i].Estimate.Fits(b.Budget)
			if !ests[i].Fits {
				ests[i].Changes = fits[i](b.Budget)
			}
		}
	}
	if o.JSON {
		out := map[string]any{"steps": ests}
		if memErr == nil {
			out["memory"] = b.mem
			if b.gpu != "" {
				out["gpu"] = map[string]any{"name": b.gpu, "free": b.gpuFree, "total": b.gpuAll}
			}
		}
		enc := json.NewEncoder(o.g.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for i, e := range ests {
		if i > 0 {
			fmt.Fprintln(o.g.Out)
		}
		writeEstimate(o.g.Out, e.What, e.Estimate)
		switch {
		case memErr != nil:
			fmt.Fprintf(o.g.Out, "available memory unknown: %v\n", memErr)
		case e.Fits:
			fmt.Fprintf(o.g.Out, "fits: %s\n", b)
		default:
			fmt.Fprintf(o.g.Out, "does not fit: %s\n", b)
			if len(e.Changes) == 0 {
				fmt.Fprintln(o.g.Out, "no change the planner knows of fits")
			}
			for _, c := range e.Changes {
				fmt.Fprintf(o.g.Out, "  would fit: %s\n", c)
			}
		}
	}
	return nil
}

// writeEstimate prints one step's estimate as a table in GiB.
func writeEstimate(w io.Writer, what string, e *plan.Estimate) {
	fmt.Fprintf(w, "%s, %s parameters (GiB)\n", what, e.DType)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tparams\tweights\tmaster\tgrads\tmoments\tactivations\t(other ckpt)\tlogits\tKV cache\tworkspace\tLoRA\tEMA\ttotal\t")
	g := func(b int64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(b)/(1<<30))
	}
	var total plan.Model
	for _, m := range e.Models {
		acts, other := g(m.Acts), ""
		if m.ActsOther > 0 {
			other = g(m.ActsOther)
			if m.Checkpointing {
				acts += " ckpt"
			}
		}
		fmt.Fprintf(tw, "%s\t%.0fM\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m.Name, float64(m.Params)/1e6,
			g(m.Weights), g(m.Master), g(m.Grads), g(m.Moments), acts, other, g(m.Logits), g(m.KVCache), g(m.Workspace), g(m.LoRA), g(m.EMA), g(m.Total()))
		total.Weights += m.Weights
		total.Master += m.Master
		total.Grads += m.Grads
		total.Moments += m.Moments
		total.Acts += m.Acts
		total.Logits += m.Logits
		total.KVCache += m.KVCache
		total.Workspace += m.Workspace
		total.LoRA += m.LoRA
		total.EMA += m.EMA
	}
	if len(e.Models) > 1 {
		fmt.Fprintf(tw, "total\t\t%s\t%s\t%s\t%s\t%s\t\t%s\t%s\t%s\t%s\t%s\t%s\t\n", g(total.Weights), g(total.Master), g(total.Grads),
			g(total.Moments), g(total.Acts), g(total.Logits), g(total.KVCache), g(total.Workspace), g(total.LoRA), g(total.EMA), g(total.Total()))
	}
	tw.Flush()
	for _, t := range e.Transient {
		fmt.Fprintf(w, "transient: %s %s\n", t.Name, plan.GiB(t.Bytes))
	}
	var phases []string
	for _, p := range e.Phases {
		phases = append(phases, fmt.Sprintf("%s %s", p.Name, plan.GiB(p.Bytes)))
	}
	fmt.Fprintf(w, "device memory by phase: %s\n", strings.Join(phases, ", "))
	if e.Host > 0 {
		var parts []string
		for _, m := range e.Models {
			switch {
			case m.FrozenOffload:
				parts = append(parts, fmt.Sprintf("%s %s (weights)", m.Name, plan.GiB(m.Host)))
			case m.Host > 0:
				parts = append(parts, fmt.Sprintf("%s %s (optimizer state, host copies of its parameters and gradients)", m.Name, plan.GiB(m.Host)))
			}
		}
		fmt.Fprintf(w, "offloaded to the host: %s\n", strings.Join(parts, ", "))
	}
	switch {
	case e.GPU: // a GPU's peak; the host's apart
		fmt.Fprintf(w, "peak: GPU %s = device %s + reserve %s; host %s = offloaded %s + runtime %s\n", plan.GiB(e.Peak), plan.GiB(e.Device),
			plan.GiB(e.Runtime), plan.GiB(e.HostPeak), plan.GiB(e.Host), plan.GiB(plan.Runtime))
	case e.Host > 0: // the CPU: the host is the device's memory
		fmt.Fprintf(w, "peak: %s = device %s + offloaded %s + runtime %s + GC headroom %s (on the CPU offload saves nothing)\n", plan.GiB(e.Peak),
			plan.GiB(e.Device), plan.GiB(e.Host), plan.GiB(e.Runtime), plan.GiB(e.Headroom))
	default:
		fmt.Fprintf(w, "peak: %s = device %s + runtime %s + GC headroom %s\n", plan.GiB(e.Peak), plan.GiB(e.Device), plan.GiB(e.Runtime), plan.GiB(e.Headroom))
	}
}

// skipUnplanned is a pre-flight that could not plan (an architecture it
// cannot find): the error, or with --skip-preflight a warning.
func skipUnplanned(g *Globals, err error, skip bool) error {
	if !skip {
		return err
	}
	g.Log.Warn().Err(err).Msg("memory pre-flight skipped (--skip-preflight)")
	return nil
}

// stepName names a step in messages.
func stepName(n int) string {
	return [...]string{"", "step 1 (sft)", "step 2 (reward)", "step 3 (ppo)"}[n]
}

// planInput describes step 1 or 2 for the memory planner: the model's
// config.json (or a built-in architecture), --dtype, and the flags that
// size what the step allocates.
func (o *StageOptions) planInput(dev kernels.Device) (plan.Stage, error) {
	dir := o.Model
	if o.modelDir != "" { // resolved (a Hub id's snapshot)
		dir = o.modelDir
	}
	cfg, err := modelConfig(o.g, "--model", dir, o.Revision)
	if err != nil {
		return plan.Stage{}, err
	}
	dt, err := planDType(o.g, o.DType, dev)
	if err != nil {
		return plan.Stage{}, err
	}
	return o.planWith(cfg, dt), nil
}

// planWith is planInput for a given config and dtype.
func (o *StageOptions) planWith(cfg *model.Config, dt kernels.DType) plan.Stage {
	c := *cfg
	if o.Dropout >= 0 {
		c.Dropout = o.Dropout // runStage's override
	}
	var lc lora.Config
	if o.LoRADim > 0 {
		lc = lora.Config{Dim: o.LoRADim, ModuleName: o.LoRAModule}
	}
	return plan.Stage{Reward: o.Step == 2, Model: &c, DType: dt, Batch: o.TrainBatch, GradAccum: o.GradAccum,
		Sft:  sft.Options{MaxSeqLen: o.MaxSeqLen, EvalBatch: o.EvalBatch, Dropout: true, Checkpoint: o.GradCkpt},
		LoRA: lc, OnlyLoRA: o.OnlyLoRA, FlashAttention: flashAttention(o.g)}
}

// preflight runs the memory pre-flight of step 1 or 2 on dev (per rank
// under an MPI launcher).
func (o *StageOptions) preflight(dev kernels.Device) error {
	in, err := o.planInput(dev)
	if err != nil {
		return skipUnplanned(o.g, err, o.SkipPreflight)
	}
	in.Parallel = launchParallel(dev, o.ZeROStage, 0, 0)
	o.offloadOptions.plan(&in.Parallel)
	est, err := in.Estimate()
	if err != nil {
		return usageError{err}
	}
	return preflight(o.g, dev, stepName(o.Step), est, in.Fit, o.SkipPreflight)
}

// planInput describes step 3 for the memory planner: the three models'
// config.json (or built-in architectures), --dtype, and the flags that
// size what the step allocates.
func (o *PPOOptions) planInput(dev kernels.Device) (plan.PPO, error) {
	var cfgs [3]*model.Config
	pick := func(name, resolved string) string {
		if resolved != "" { // a Hub id's snapshot
			return resolved
		}
		return name
	}
	for i, f := range []struct{ flag, dir string }{{"--actor", pick(o.Actor, o.actorDir)}, {"--critic", pick(o.Critic, o.criticDir)},
		{"--reward", pick(o.Reward, o.rewardDir)}} {
		c, err := modelConfig(o.g, f.flag, f.dir, o.Revision)
		if err != nil {
			return plan.PPO{}, err
		}
		cfgs[i] = c
	}
	dt, err := planDType(o.g, o.DType, dev)
	if err != nil {
		return plan.PPO{}, err
	}
	return o.planWith(cfgs[0], cfgs[1], cfgs[2], dt, dev), nil
}

// planWith is planInput for given configs and dtype, on dev (nil: the
// CPU).
func (o *PPOOptions) planWith(actor, critic, rm *model.Config, dt kernels.DType, dev kernels.Device) plan.PPO {
	lc := func(dim int) lora.Config {
		if dim == 0 {
			return lora.Config{}
		}
		return lora.Config{Dim: dim, ModuleName: o.LoRAModule}
	}
	unsup := 0
	if o.UnsupData != "" {
		unsup = o.MaxPromptLen + o.MaxAnswerLen
	}
	return plan.PPO{Actor: actor, Critic: critic, Reward: rm, DType: dt, FlashAttention: flashAttention(o.g),
		GenBatch: o.GenBatch, TrainBatch: o.TrainBatch, GenerationBatches: o.GenerationBatches,
		PromptLen: o.MaxPromptLen, AnswerLen: o.MaxAnswerLen,
		// Byte-level BPE makes at most one token per byte of the end text.
		RewardExtra: len(o.EndText), UnsupLen: unsup,
		ActorLoRA: lc(o.ActorLoRADim), CriticLoRA: lc(o.CriticLoRADim), OnlyLoRA: o.OnlyLoRA,
		ActorCheckpointing: o.ActorCkpt, KeepCache: o.KeepCache,
		Opts: ppo.Options{CriticCheckpointing: o.CriticCkpt, ActorDropout: o.ActorDropout, CriticDropout: o.CriticDropout,
			EnableEMA: o.EnableEMA},
		OffloadRef: o.OffloadRef, OffloadReward: o.OffloadReward, NoRelease: dev != nil && !train.ReturnsMemory(dev)}
}

// preflight runs the memory pre-flight of step 3 on dev (per rank under
// an MPI launcher).
func (o *PPOOptions) preflight(dev kernels.Device) error {
	in, err := o.planInput(dev)
	if err != nil {
		return skipUnplanned(o.g, err, o.SkipPreflight)
	}
	in.Parallel = launchParallel(dev, 0, o.ActorZeRO, o.CriticZeRO)
	o.offloadOptions.plan(&in.Parallel)
	est, err := in.Estimate()
	if err != nil {
		return usageError{err}
	}
	return preflight(o.g, dev, stepName(3), est, in.Fit, o.SkipPreflight)
}
