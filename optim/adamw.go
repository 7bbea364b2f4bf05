// Package optim holds the optimizer side of training: AdamW with parameter
// groups over device buffers, learning-rate schedules, and global-norm
// gradient clipping. Semantics are PyTorch's (torch.optim.AdamW,
// torch.nn.utils.clip_grad_norm_) and transformers' (get_scheduler).
package optim

import (
	"fmt"
	"math"
	"strings"

	"github.com/gochat-ai/gochat/kernels"
)

// Segment is one contiguous run of parameters and their gradients (views of
// equal length).
type Segment struct {
	Name          string
	Params, Grads kernels.Buffer
}

// Group is a parameter group: segments sharing a learning rate and weight
// decay.
type Group struct {
	Name        string
	LR          float64 // base learning rate; the schedule multiplies it
	WeightDecay float64
	Segments    []Segment
}

// AdamWConfig holds AdamW's constants. DeepSpeed-Chat uses betas
// (0.9, 0.95) and eps 1e-8.
type AdamWConfig struct {
	Beta1, Beta2, Eps float64
}

// DefaultAdamW is DeepSpeed-Chat's AdamW configuration.
var DefaultAdamW = AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}

// AdamW is torch.optim.AdamW (decoupled weight decay) over parameter
// groups. Its moments are device buffers, one pair per segment.
type AdamW struct {
	dev    kernels.Device
	cfg    AdamWConfig
	groups []Group
	m, v   [][]kernels.Buffer // [group][segment]
	step   int
}

// NewAdamW allocates zeroed moments for every segment.
func NewAdamW(dev kernels.Device, groups []Group, cfg AdamWConfig) (*AdamW, error) {
	o := &AdamW{dev: dev, cfg: cfg, groups: groups}
	for _, g := range groups {
		var ms, vs []kernels.Buffer
		for _, s := range g.Segments {
			if s.Params.Len() != s.Grads.Len() {
				return nil, fmt.Errorf("optim: segment %s: %d parameters but %d gradients", s.Name, s.Params.Len(), s.Grads.Len())
			}
			ms = append(ms, dev.Alloc(kernels.F32, s.Params.Len()))
			vs = append(vs, dev.Alloc(kernels.F32, s.Params.Len()))
		}
		o.m, o.v = append(o.m, ms), append(o.v, vs)
	}
	return o, nil
}

// Steps is the number of updates taken.
func (o *AdamW) Steps() int { return o.step }

// Groups returns the parameter groups.
func (o *AdamW) Groups() []Group { return o.groups }

// Step applies one update with every group's learning rate multiplied by
// lrScale (the schedule's value) and the gradients multiplied by gradScale
// (clipping and averaging).
func (o *AdamW) Step(lrScale float64, gradScale float32) {
	o.step++
	for gi, g := range o.groups {
		lr := float32(g.LR * lrScale)
		for si, s := range g.Segments {
			o.dev.AdamWStep(s.Params, s.Grads, o.m[gi][si], o.v[gi][si], s.Params.Len(), lr,
				float32(o.cfg.Beta1), float32(o.cfg.Beta2), float32(o.cfg.Eps), float32(g.WeightDecay), gradScale, o.step)
		}
	}
}

// Moments returns the first and second moments of every segment, in group
// then segment order (for checkpoints).
func (o *AdamW) Moments() (m, v []kernels.Buffer) {
	for gi := range o.groups {
		m = append(m, o.m[gi]...)
		v = append(v, o.v[gi]...)
	}
	return m, v
}

// SetSteps restores the step count when resuming from a checkpoint.
func (o *AdamW) SetSteps(n int) { o.step = n }

// GradNorm is the global L2 norm of the gradients in bufs (computed in
// float64).
func GradNorm(dev kernels.Device, bufs ...kernels.Buffer) float64 {
	var s float64
	for _, b := range bufs {
		s += dev.SumSquares(b, b.Len())
	}
	return math.Sqrt(s)
}

// ClipScale is torch.nn.utils.clip_grad_norm_'s factor: min(1, maxNorm /
// (norm + 1e-6)); maxNorm <= 0 disables clipping.
func ClipScale(norm, maxNorm float64) float64 {
	if maxNorm <= 0 {
		return 1
	}
	return math.Min(1, maxNorm/(norm+1e-6))
}

// NoDecay reports whether a parameter is excluded from weight decay, as
// DeepSpeed-Chat's get_optimizer_grouped_parameters decides: biases and
// LayerNorm weights.
func NoDecay(name string) bool {
	for _, s := range []string{"bias", "layer_norm.weight", "layernorm.weight", "norm.weight", "ln_f.weight"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}
