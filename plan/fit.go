package plan

import (
	"fmt"
	"strings"

	"github.com/gochat-ai/gochat/kernels"
)

// Change is a way of bringing a step's peaks under a budget: the flags
// that make it (command-line syntax, for the step's command) and the peaks
// estimated with them (on a GPU the GPU's and the host's).
type Change struct {
	Flags    []string `json:"flags"`
	Peak     int64    `json:"peak"`
	HostPeak int64    `json:"host_peak,omitempty"`
	GPU      bool     `json:"gpu,omitempty"`
}

func (c Change) String() string {
	if c.GPU {
		return fmt.Sprintf("%s (GPU peak %s, host %s)", strings.Join(c.Flags, " "), GiB(c.Peak), GiB(c.HostPeak))
	}
	return fmt.Sprintf("%s (peak %s)", strings.Join(c.Flags, " "), GiB(c.Peak))
}

// change is the Change of flags with estimate e.
func change(flags []string, e *Estimate) Change {
	return Change{Flags: flags, Peak: e.Peak, HostPeak: e.HostPeak, GPU: e.GPU}
}

// DefaultLoRADim is the LoRA rank Fit proposes (DeepSpeed-Chat's scripts
// use 128).
const DefaultLoRADim = 128

// flagSet is an ordered set of flag values; a later value of a flag
// replaces an earlier one.
type flagSet struct {
	names  []string
	values map[string]string
}

func (f *flagSet) set(name, value string) {
	if f.values == nil {
		f.values = map[string]string{}
	}
	if _, ok := f.values[name]; !ok {
		f.names = append(f.names, name)
	}
	f.values[name] = value
}

func (f *flagSet) list() []string {
	var out []string
	for _, n := range f.names {
		switch v := f.values[n]; v {
		case "true":
			out = append(out, "--"+n)
		case "false":
			out = append(out, "--"+n+"=false")
		default:
			out = append(out, "--"+n+" "+v)
		}
	}
	return out
}

// variant is a setting changed one way: the changed input and its flags.
type variant[T any] struct {
	in    T
	flags [][2]string // name, value
}

// knob is one kind of change: its variants for an input, from the mildest
// to the strongest (none when it does not apply).
type knob[T any] func(T) []variant[T]

// fit finds the cheapest changes that bring est(in) within budget (both
// memories on a GPU), trying
// knobs in order (the order of how much they change training, least
// first): every single change that fits, at its mildest fitting strength;
// without one, a combination (knobs applied in order, the last at its
// mildest fitting strength), then pruned of what it does not need. It
// returns nil when nothing fits.
func fit[T any](in T, budget Budget, est func(T) (*Estimate, error), knobs []knob[T]) []Change {
	fits := func(x T) (*Estimate, bool) {
		e, err := est(x)
		return e, err == nil && e.Fits(budget)
	}
	var out []Change
	for _, k := range knobs {
		for _, v := range k(in) {
			if e, ok := fits(v.in); ok {
				var fs flagSet
				for _, f := range v.flags {
					fs.set(f[0], f[1])
				}
				out = append(out, change(fs.list(), e))
				break
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	// A combination: choose a strength per knob.
	type choice struct{ knob, level int }
	build := func(cs []choice) (T, flagSet) {
		x := in
		var fs flagSet
		for _, c := range cs {
			vs := knobs[c.knob](x)
			if len(vs) == 0 {
				continue
			}
			v := vs[min(c.level, len(vs)-1)]
			x = v.in
			for _, f := range v.flags {
				fs.set(f[0], f[1])
			}
		}
		return x, fs
	}
	var chosen []choice
	ok := false
	for i := range knobs {
		x, _ := build(chosen)
		vs := knobs[i](x)
		if len(vs) == 0 {
			continue
		}
		level := len(vs) - 1
		for j := range vs {
			if _, f := fits(vs[j].in); f {
				level, ok = j, true
				break
			}
		}
		chosen = append(chosen, choice{i, level})
		if ok {
			break
		}
	}
	if !ok {
		return nil
	}
	// Prune, the changes that alter training most first: soften each as
	// far as the others allow, drop what is not needed, soften again.
	fitsWith := func(cs []choice) bool {
		x, _ := build(cs)
		_, f := fits(x)
		return f
	}
	soften := func() {
		for i := len(chosen) - 1; i >= 0; i-- {
			for chosen[i].level > 0 {
				chosen[i].level--
				if !fitsWith(chosen) {
					chosen[i].level++
					break
				}
			}
		}
	}
	soften()
	for i := len(chosen) - 1; i >= 0; i-- {
		without := append(append([]choice{}, chosen[:i]...), chosen[i+1:]...)
		if len(without) > 0 && fitsWith(without) {
			chosen = without
		}
	}
	soften()
	x, fs := build(chosen)
	e, _ := est(x)
	return []Change{change(fs.list(), e)}
}

// halvings returns n/2, n/4, ..., 1 (nothing for n <= 1).
func halvings(n int) []int {
	var out []int
	for n > 1 {
		n = (n + 1) / 2
		out = append(out, n)
	}
	return out
}

// Fit lists the cheapest changes of the step's settings whose estimate
// fits budget (Estimate.Fits), in the order of how little they change
// training: gradient checkpointing (same results, more compute), a higher
// ZeRO stage over the ranks at hand (same results, more communication),
// on GPUs ZeRO-Offload of a growing fraction of the optimizer state (same
// results, host memory and transfers; or a smaller one when the host is
// short), a smaller
// evaluation batch, bf16, smaller micro-batches with more gradient
// accumulation (the same effective batch), LoRA with --only-optimize-lora.
// When no single change fits it proposes the smallest combination it
// finds; nil means nothing fits.
func (s Stage) Fit(budget Budget) []Change {
	est := func(x Stage) (*Estimate, error) { return x.Estimate() }
	knobs := []knob[Stage]{
		func(x Stage) []variant[Stage] {
			if x.Sft.Checkpoint {
				return nil
			}
			x.Sft.Checkpoint = true
			return []variant[Stage]{{x, [][2]string{{"gradient-checkpointing", "true"}}}}
		},
		zeroKnob(func(x *Stage) *Parallel { return &x.Parallel }, func(x *Stage) *int { return &x.Parallel.Stage }, "zero-stage"),
		offloadKnob(func(x *Stage) *Parallel { return &x.Parallel }),
		onloadKnob(func(x *Stage) *Parallel { return &x.Parallel }),
		func(x Stage) []variant[Stage] {
			var vs []variant[Stage]
			for _, b := range halvings(x.Sft.EvalBatch) {
				y := x
				y.Sft.EvalBatch = b
				vs = append(vs, variant[Stage]{y, [][2]string{{"per-device-eval-batch-size", fmt.Sprint(b)}}})
			}
			return vs
		},
		bf16Knob(func(x *Stage) *kernels.DType { return &x.DType }),
		func(x Stage) []variant[Stage] {
			var vs []variant[Stage]
			ga := max(x.GradAccum, 1)
			for _, b := range halvings(x.Batch) {
				y := x
				y.Batch, y.GradAccum = b, ga*((x.Batch+b-1)/b)
				vs = append(vs, variant[Stage]{y, [][2]string{{"per-device-train-batch-size", fmt.Sprint(b)},
					{"gradient-accumulation-steps", fmt.Sprint(y.GradAccum)}}})
			}
			return vs
		},
		func(x Stage) []variant[Stage] {
			if x.OnlyLoRA && x.LoRA.Dim > 0 {
				return nil
			}
			var flags [][2]string
			if x.LoRA.Dim == 0 {
				x.LoRA.Dim = DefaultLoRADim
				flags = append(flags, [2]string{"lora-dim", fmt.Sprint(DefaultLoRADim)})
			}
			x.OnlyLoRA = true
			return []variant[Stage]{{x, append(flags, [2]string{"only-optimize-lora", "true"})}}
		},
	}
	return fit(s, budget, est, knobs)
}

// offloadKnob moves optimizer state to the host on GPUs (ZeRO-Offload,
// exact: only where the update runs changes): --offload at
// --offload-ratio 0.25, 0.5, then everything. On the CPU the host is the
// device and offload saves nothing.
func offloadKnob[T any](par func(*T) *Parallel) knob[T] {
	return func(x T) []variant[T] {
		p := *par(&x)
		if !p.OnGPU() || (p.Offload && (p.OffloadRatio <= 0 || p.OffloadRatio >= 1)) {
			return nil
		}
		var vs []variant[T]
		for _, r := range []float64{0.25, 0.5, 1} {
			if p.Offload && r <= p.OffloadRatio {
				continue
			}
			y := x
			q := par(&y)
			q.Offload, q.OffloadRatio = true, r
			vs = append(vs, variant[T]{y, [][2]string{{"offload", "true"}, {"offload-ratio", fmt.Sprint(r)}}})
		}
		return vs
	}
}

// onloadKnob keeps more of the optimizer state on the device when the
// host is short of memory for it: a smaller --offload-ratio, then no
// offload (exact, like offloading).
func onloadKnob[T any](par func(*T) *Parallel) knob[T] {
	return func(x T) []variant[T] {
		p := *par(&x)
		if !p.Offload {
			return nil
		}
		cur := p.OffloadRatio
		if cur <= 0 || cur > 1 {
			cur = 1
		}
		var vs []variant[T]
		for _, r := range []float64{0.5, 0.25} {
			if r < cur {
				y := x
				par(&y).OffloadRatio = r
				vs = append(vs, variant[T]{y, [][2]string{{"offload-ratio", fmt.Sprint(r)}}})
			}
		}
		y := x
		q := par(&y)
		q.Offload, q.OffloadRatio = false, 0
		return append(vs, variant[T]{y, [][2]string{{"offload", "false"}}})
	}
}

// zeroKnob raises a ZeRO stage (flag) over the ranks at hand (exact:
// the optimizer state, then the gradients, then the weights partitioned
// over them): the next stage up to 3, mildest first. One process has no
// one to share with.
func zeroKnob[T any](par func(*T) *Parallel, stage func(*T) *int, flag string) knob[T] {
	return func(x T) []variant[T] {
		if par(&x).Ranks <= 1 {
			return nil
		}
		var vs []variant[T]
		for st := *stage(&x) + 1; st <= 3; st++ {
			y := x
			*stage(&y) = st
			vs = append(vs, variant[T]{y, [][2]string{{flag, fmt.Sprint(st)}}})
		}
		return vs
	}
}

// bf16Knob switches fp32 parameters to bf16.
func bf16Knob[T any](dt func(*T) *kernels.DType) knob[T] {
	return func(x T) []variant[T] {
		if *dt(&x) != kernels.F32 {
			return nil
		}
		*dt(&x) = kernels.BF16
		return []variant[T]{{x, [][2]string{{"dtype", "bf16"}}}}
	}
}

// Fit lists the cheapest changes of step 3's settings whose estimate fits
// budget, in the order of how little they change training: gradient
// checkpointing of the actor and of the critic, higher ZeRO stages for
// them over the ranks at hand, on GPUs the reference and the reward
// model's weights offloaded to the host and ZeRO-Offload of the optimizer
// state (or less of it when the host is short), no --keep-inference-cache,
// bf16, smaller generation batches with more of
// them per round (the same experience per round), smaller training
// micro-batches, LoRA with --only-optimize-lora for the actor and then the
// critic, no EMA. When no single change fits it proposes the smallest
// combination it finds; nil means nothing fits.
func (p PPO) Fit(budget Budget) []Change {
	est := func(x PPO) (*Estimate, error) { return x.Estimate() }
	boolKnob := func(get func(*PPO) *bool, want bool, flag string) knob[PPO] {
		return func(x PPO) []variant[PPO] {
			if *get(&x) == want {
				return nil
			}
			*get(&x) = want
			return []variant[PPO]{{x, [][2]string{{flag, fmt.Sprint(want)}}}}
		}
	}
	loraKnob := func(dim func(*PPO) *int, flag string) knob[PPO] {
		return func(x PPO) []variant[PPO] {
			if x.OnlyLoRA && *dim(&x) > 0 {
				return nil
			}
			var flags [][2]string
			if *dim(&x) == 0 {
				*dim(&x) = DefaultLoRADim
				flags = append(flags, [2]string{flag, fmt.Sprint(DefaultLoRADim)})
			}
			x.OnlyLoRA = true
			return []variant[PPO]{{x, append(flags, [2]string{"only-optimize-lora", "true"})}}
		}
	}
	knobs := []knob[PPO]{
		boolKnob(func(x *PPO) *bool { return &x.ActorCheckpointing }, true, "actor-gradient-checkpointing"),
		boolKnob(func(x *PPO) *bool { return &x.Opts.CriticCheckpointing }, true, "critic-gradient-checkpointing"),
		zeroKnob(func(x *PPO) *Parallel { return &x.Parallel }, func(x *PPO) *int { return &x.Parallel.ActorStage }, "actor-zero-stage"),
		zeroKnob(func(x *PPO) *Parallel { return &x.Parallel }, func(x *PPO) *int { return &x.Parallel.CriticStage }, "critic-zero-stage"),
		frozenKnob(func(x *PPO) *bool { return &x.OffloadRef }, "offload-reference-model"),
		frozenKnob(func(x *PPO) *bool { return &x.OffloadReward }, "offload-reward-model"),
		offloadKnob(func(x *PPO) *Parallel { return &x.Parallel }),
		onloadKnob(func(x *PPO) *Parallel { return &x.Parallel }),
		boolKnob(func(x *PPO) *bool { return &x.KeepCache }, false, "keep-inference-cache"),
		bf16Knob(func(x *PPO) *kernels.DType { return &x.DType }),
		func(x PPO) []variant[PPO] {
			var vs []variant[PPO]
			gb := max(x.GenerationBatches, 1)
			for _, b := range halvings(x.GenBatch) {
				y := x
				y.GenBatch, y.GenerationBatches = b, gb*((x.GenBatch+b-1)/b)
				vs = append(vs, variant[PPO]{y, [][2]string{{"per-device-generation-batch-size", fmt.Sprint(b)},
					{"generation-batches", fmt.Sprint(y.GenerationBatches)}}})
			}
			return vs
		},
		func(x PPO) []variant[PPO] {
			var vs []variant[PPO]
			for _, b := range halvings(x.TrainBatch) {
				y := x
				y.TrainBatch = b
				vs = append(vs, variant[PPO]{y, [][2]string{{"per-device-training-batch-size", fmt.Sprint(b)}}})
			}
			return vs
		},
		loraKnob(func(x *PPO) *int { return &x.ActorLoRA.Dim }, "actor-lora-dim"),
		loraKnob(func(x *PPO) *int { return &x.CriticLoRA.Dim }, "critic-lora-dim"),
		boolKnob(func(x *PPO) *bool { return &x.Opts.EnableEMA }, false, "enable-ema"),
	}
	return fit(p, budget, est, knobs)
}

// frozenKnob offloads a frozen model's weights to the host (exact: the
// device computes on the same bits) on a GPU that returns released memory;
// on the CPU the host is the device and it saves nothing.
func frozenKnob(on func(*PPO) *bool, flag string) knob[PPO] {
	return func(x PPO) []variant[PPO] {
		if *on(&x) || !x.Parallel.OnGPU() || x.NoRelease {
			return nil
		}
		*on(&x) = true
		return []variant[PPO]{{x, [][2]string{{flag, "true"}}}}
	}
}
