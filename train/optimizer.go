package train

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/optim"
)

// OptimizerConfig configures an Optimizer.
type OptimizerConfig struct {
	AdamW optim.AdamWConfig
	// Schedule names the learning-rate schedule (optim.ScheduleNames) with
	// Warmup steps of warm-up out of Total schedule steps. Past Total the
	// schedule holds its final value.
	Schedule      string
	Warmup, Total int
	// ClipNorm clips the gradients to this global norm (0: no clipping).
	ClipNorm float64
	// Comm, when it has several ranks, sums the gradients over them in
	// Step before the norm (ZeRO stage 0; nil: this process alone).
	Comm dist.Comm
}

// Optimizer is the update every stage takes: AdamW over one model's
// trainable parameters with its learning-rate schedule and global-norm
// clipping, behind a finite check. Steps 1 and 2 own one (through Run);
// step 3 owns one per trained model.
type Optimizer struct {
	dev   kernels.Device
	adam  *optim.AdamW
	sched optim.Schedule
	tr    Trainable
	clip  float64
	comm  dist.Comm
}

// Update is what one Optimizer.Step did.
type Update struct {
	GradNorm float64 // global norm of the averaged gradients, before clipping
	LR       float64 // learning rate of the first parameter group
}

// NewOptimizer builds AdamW over tr's groups and zeroes its gradients.
func NewOptimizer(dev kernels.Device, tr Trainable, c OptimizerConfig) (*Optimizer, error) {
	sched, err := optim.NewSchedule(c.Schedule, c.Warmup, c.Total)
	if err != nil {
		return nil, err
	}
	adam, err := optim.NewAdamW(dev, tr.Groups, c.AdamW)
	if err != nil {
		return nil, err
	}
	o := &Optimizer{dev: dev, adam: adam, sched: sched, tr: tr, clip: c.ClipNorm, comm: c.Comm}
	o.ZeroGrads()
	return o, nil
}

// Step updates the parameters with the mean of the n gradient sums
// accumulated since the last step, at the schedule's value for schedule
// step s (0-based; a stage chooses what its schedule counts):
// ReduceGrads, Norm, then Apply. With several ranks n counts the sums of
// all of them. A NaN or Inf gradient norm returns a *NonFiniteError and
// leaves the parameters and the optimizer state untouched.
func (o *Optimizer) Step(s, n int) (Update, error) {
	if err := o.ReduceGrads(); err != nil {
		return Update{}, err
	}
	norm, err := o.Norm(n)
	if err != nil {
		return Update{GradNorm: norm}, err
	}
	return o.Apply(s, n, norm)
}

// ReduceGrads sums the gradients over the ranks of the Optimizer's Comm
// (all-reduce; nothing on one rank). Every rank calls it once per step,
// before Norm.
func (o *Optimizer) ReduceGrads() error {
	if o.comm == nil || o.comm.Size() == 1 {
		return nil
	}
	for i, g := range o.tr.Grads {
		if err := o.comm.AllReduceSum(g); err != nil {
			return fmt.Errorf("all-reduce gradient %d of %d: %w", i, len(o.tr.Grads), err)
		}
	}
	return nil
}

// Norm is the global norm of the mean of the n accumulated gradient sums,
// checked: a NaN or Inf norm is a *NonFiniteError. A stage that updates
// several models checks every norm before it applies any update.
func (o *Optimizer) Norm(n int) (float64, error) {
	if n < 1 {
		return 0, fmt.Errorf("train: optimizer step over %d gradient sums", n)
	}
	norm := optim.GradNorm(o.dev, o.tr.Grads...) * (1 / float64(n))
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, &NonFiniteError{What: "gradient norm"}
	}
	return norm, nil
}

// Apply takes the step for gradients whose checked norm is norm (from
// Norm): it clips to the global norm, steps AdamW at schedule step s and
// zeroes the gradients.
func (o *Optimizer) Apply(s, n int, norm float64) (Update, error) {
	scale := o.sched(s)
	o.adam.Step(scale, float32(1/float64(n)*optim.ClipScale(norm, o.clip)))
	o.ZeroGrads()
	if err := o.dev.Sync(); err != nil {
		return Update{}, fmt.Errorf("optimizer step: %w", err)
	}
	return Update{GradNorm: norm, LR: o.LR(s)}, nil
}

// LR is the learning rate of the first parameter group at schedule step s.
func (o *Optimizer) LR(s int) float64 {
	if len(o.tr.Groups) == 0 {
		return 0
	}
	return o.tr.Groups[0].LR * o.sched(s)
}

// ZeroGrads zeroes the trainable gradients (before a backward pass that
// starts a new step).
func (o *Optimizer) ZeroGrads() {
	for _, g := range o.tr.Grads {
		o.dev.Zero(g)
	}
}

// Free releases the optimizer's state (AdamW's moments and master
// halves); the Trainable's buffers are its owner's.
func (o *Optimizer) Free() { o.adam.Free() }

// Steps is the number of updates taken (AdamW's bias-correction count).
func (o *Optimizer) Steps() int { return o.adam.Steps() }

// SetSteps restores Steps from a checkpoint.
func (o *Optimizer) SetSteps(n int) { o.adam.SetSteps(n) }

// StateBuffers adds, under prefix, the buffers a checkpoint keeps of this
// optimizer's model and state: the trained model buffers of its Trainable
// ("param.NAME"), AdamW's moments ("adam.m.I", "adam.v.I") and, in bf16,
// the low halves of its fp32 master weights ("adam.master_lo.I", I32 bits;
// the parameters are the high halves).
func (o *Optimizer) StateBuffers(bufs map[string]kernels.Buffer, prefix string) {
	for name, b := range o.tr.State {
		bufs[prefix+"param."+name] = b
	}
	m, v := o.adam.Moments()
	for i := range m {
		bufs[fmt.Sprintf("%sadam.m.%d", prefix, i)] = m[i]
		bufs[fmt.Sprintf("%sadam.v.%d", prefix, i)] = v[i]
	}
	for i, b := range o.adam.MasterLows() {
		bufs[fmt.Sprintf("%sadam.master_lo.%d", prefix, i)] = b
	}
}
