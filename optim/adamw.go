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
// groups. Its moments are F32 device buffers, one pair per segment.
//
// Mixed precision (DeepSpeed's bf16 mode): a segment whose parameters are
// BF16 is updated through fp32 master weights (gradients and moments are
// F32), and the BF16 parameters the model computes with are the master
// rounded to nearest even. The master is not a separate fp32 copy: its
// low 16 bits are kept beside the BF16 parameters, which hold the high
// half (kernels.Device.AdamWStepBF16), so mixed precision costs 2 bytes
// per parameter beyond the BF16 weights instead of 4 and a bf16 model's
// trained state (16 bytes per parameter) is no larger than an fp32
// model's. The low halves start at zero: the master starts as the BF16
// parameters.
type AdamW struct {
	dev    kernels.Device
	cfg    AdamWConfig
	groups []Group
	m, v   [][]kernels.Buffer // [group][segment]
	lo     [][]kernels.Buffer // [group][segment] low halves of the masters (I32, two per element); nil for F32 parameters
	step   int
}

// NewAdamW allocates zeroed moments for every segment, and the masters'
// zeroed low halves for BF16 segments.
func NewAdamW(dev kernels.Device, groups []Group, cfg AdamWConfig) (*AdamW, error) {
	o := &AdamW{dev: dev, cfg: cfg, groups: groups}
	alloc := func(s Segment, what string, dt kernels.DType, n int) (kernels.Buffer, error) {
		b, err := dev.Alloc(dt, n)
		if err != nil {
			o.Free()
			return nil, fmt.Errorf("optim: AdamW %s of %s (%d parameters): %w", what, s.Name, s.Params.Len(), err)
		}
		return b, nil
	}
	for gi, g := range groups {
		o.m, o.v, o.lo = append(o.m, nil), append(o.v, nil), append(o.lo, nil)
		for _, s := range g.Segments {
			if s.Params.Len() != s.Grads.Len() {
				o.Free()
				return nil, fmt.Errorf("optim: segment %s: %d parameters but %d gradients", s.Name, s.Params.Len(), s.Grads.Len())
			}
			if s.Grads.DType() != kernels.F32 {
				o.Free()
				return nil, fmt.Errorf("optim: segment %s: gradients are %v, want f32", s.Name, s.Grads.DType())
			}
			var bufs [3]kernels.Buffer
			n := s.Params.Len()
			for i, what := range []string{"first moment", "second moment", "master weights' low halves"} {
				dt, k := kernels.F32, n
				if i == 2 {
					if s.Params.DType() == kernels.F32 {
						break
					}
					dt, k = kernels.I32, (n+1)/2
				}
				b, err := alloc(s, what, dt, k)
				if err != nil {
					return nil, err
				}
				bufs[i] = b
			}
			o.m[gi], o.v[gi], o.lo[gi] = append(o.m[gi], bufs[0]), append(o.v[gi], bufs[1]), append(o.lo[gi], bufs[2])
		}
	}
	return o, nil
}

// StateBytes is what NewAdamW allocates for n parameters of type dt: the
// two F32 moments, and when dt is BF16 the low halves of the master
// weights (2 bytes per parameter; a segment of odd length takes 2 more,
// its halves being stored two per I32 element).
func StateBytes(n int, dt kernels.DType) (moments, master int) {
	moments = 2 * n * kernels.F32.Size()
	if dt != kernels.F32 {
		master = (n + 1) / 2 * kernels.I32.Size()
	}
	return moments, master
}

// Free releases the moments and the masters' low halves.
func (o *AdamW) Free() {
	for _, bs := range [][][]kernels.Buffer{o.m, o.v, o.lo} {
		for _, g := range bs {
			for _, b := range g {
				o.dev.Free(b)
			}
		}
	}
	o.m, o.v, o.lo = nil, nil, nil
}

// Steps is the number of updates taken.
func (o *AdamW) Steps() int { return o.step }

// Groups returns the parameter groups.
func (o *AdamW) Groups() []Group { return o.groups }

// Step applies one update with every group's learning rate multiplied by
// lrScale (the schedule's value) and the gradients multiplied by gradScale
// (clipping and averaging).
func (o *AdamW) Step(lrScale float64, gradScale float32) { o.StepEach(lrScale, gradScale, nil) }

// StepEach is Step, calling done(g, s) (when not nil) once the update of
// segment s of group g is issued: ZeRO-Offload copies each segment the
// host has updated to the device while the host computes the next.
func (o *AdamW) StepEach(lrScale float64, gradScale float32, done func(g, s int)) {
	o.step++
	for gi, g := range o.groups {
		lr := float32(g.LR * lrScale)
		for si, s := range g.Segments {
			b1, b2, eps, wd := float32(o.cfg.Beta1), float32(o.cfg.Beta2), float32(o.cfg.Eps), float32(g.WeightDecay)
			if lo := o.lo[gi][si]; lo != nil {
				o.dev.AdamWStepBF16(s.Params, lo, s.Grads, o.m[gi][si], o.v[gi][si], s.Params.Len(), lr, b1, b2, eps, wd, gradScale, o.step)
			} else {
				o.dev.AdamWStep(s.Params, s.Grads, o.m[gi][si], o.v[gi][si], s.Params.Len(), lr, b1, b2, eps, wd, gradScale, o.step)
			}
			if done != nil {
				done(gi, si)
			}
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

// MasterLows returns the low halves of the BF16 segments' master weights
// (I32, two per element; the high halves are the parameters), in group
// then segment order (for checkpoints; empty when every parameter is F32).
func (o *AdamW) MasterLows() []kernels.Buffer {
	var out []kernels.Buffer
	for _, g := range o.lo {
		for _, b := range g {
			if b != nil {
				out = append(out, b)
			}
		}
	}
	return out
}

// SetSteps restores the step count when resuming from a checkpoint.
func (o *AdamW) SetSteps(n int) { o.step = n }

// GradNorm is the global L2 norm of the gradients in bufs (computed in
// float64).
func GradNorm(dev kernels.Device, bufs ...kernels.Buffer) float64 {
	return math.Sqrt(dev.SumSquares(bufs...))
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
