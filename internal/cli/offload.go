package cli

import (
	"github.com/spf13/pflag"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/kernels/cuda"
	"github.com/gochat-ai/gochat/plan"
	"github.com/gochat-ai/gochat/train"
)

// offloadOptions are ZeRO-Offload's flags of sft, reward and ppo. They
// change where the optimizer state lives, not the result, so they are not
// part of a run's fingerprint: a run saved with offload resumes without
// it and the reverse.
type offloadOptions struct {
	Offload      bool    `json:"-"`
	OffloadRatio float64 `json:"-"`
}

// offloadRatioHelp states the ratio's meaning, DeepSpeed's.
const offloadRatioHelp = "with --offload: the fraction of the parameters whose optimizer state and update live on the CPU " +
	"(DeepSpeed's offload_optimizer.ratio): 1 offloads everything, 0.3 keeps 30% on the CPU and updates the other 70% on the device at the same time"

func (o *offloadOptions) bind(f *pflag.FlagSet) {
	f.BoolVar(&o.Offload, "offload", false, "keep the optimizer state (AdamW moments, fp32 master weights) of the trained models in host memory, updated by the CPU while the device continues (ZeRO-Offload, DeepSpeed-Chat's --offload)")
	f.Float64Var(&o.OffloadRatio, "offload-ratio", 1, offloadRatioHelp)
}

func (o *offloadOptions) check(fs *pflag.FlagSet) error {
	switch {
	case !(o.OffloadRatio >= 0 && o.OffloadRatio <= 1):
		return usageErrorf("--offload-ratio %v: want a fraction in [0, 1]", o.OffloadRatio)
	case fs.Changed("offload-ratio") && !o.Offload:
		return usageErrorf("--offload-ratio needs --offload")
	}
	return nil
}

// config returns the training configuration of the flags, with the host
// device for dev (nil Host without --offload).
func (o *offloadOptions) config(g *Globals, dev kernels.Device) (train.Offload, error) {
	if !o.Offload {
		return train.Offload{}, nil
	}
	host, err := newHostDevice(g, dev)
	if err != nil {
		return train.Offload{}, err
	}
	return train.Offload{Host: host, Ratio: o.OffloadRatio}, nil
}

// newHostDevice returns the host device ZeRO-Offload keeps state on for
// the compute device dev: a CPU device on page-locked memory for a GPU
// (kernels/cuda's PinnedAllocator: its copies run by DMA while the CPU
// computes), or, when dev is itself the CPU, a second CPU device: the
// mechanism runs (copies, the split update) but no memory is saved.
func newHostDevice(g *Globals, dev kernels.Device) (kernels.Device, error) {
	opts := cpu.Options{Threads: g.Threads}
	switch d := dev.(type) {
	case *cuda.Device:
		pa, err := d.PinnedAllocator()
		if err != nil {
			g.Log.Warn().Err(err).Msg("offload: no page-locked host memory; the copies go through pageable memory and do not overlap")
		} else {
			opts.Allocator = pa
		}
	case *cpu.Device:
		g.Log.Info().Msg("offload: the compute device is the CPU; the state moves to a second CPU device and no memory is saved")
	}
	h, err := cpu.New(opts)
	if err != nil {
		return nil, err
	}
	g.Log.Info().Str("host", h.Name()).Bool("pinned", opts.Allocator != nil).Msg("offload: host device")
	return h, nil
}

// plan sets the planner's offload settings from the flags (a recipe's
// offload under later: is parsed into them too). --offload-ratio 0
// offloads nothing (train.Offload.Enabled), where the planner's 0 means
// everything.
func (o *offloadOptions) plan(p *plan.Parallel) {
	if o.Offload && o.OffloadRatio > 0 {
		p.Offload, p.OffloadRatio = true, o.OffloadRatio
	}
}
