package train

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/zero"
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
	// Step before the norm (nil: this process alone).
	Comm dist.Comm
	// ZeRO is the ZeRO stage over Comm's ranks: 0 all-reduces the
	// gradients and every rank updates every parameter; 1 partitions the
	// optimizer state (each rank updates the ranges it owns, then the
	// parameters are all-gathered); 2 also partitions the gradients
	// (reduce-scattered layer by layer during the backward pass); 3 also
	// the parameters (gathered layer by layer for each pass). See Flat.
	ZeRO zero.Stage
	// Offload keeps the optimizer state of a fraction of the parameters
	// (of this rank's ranges under ZeRO 1-3) in host memory, updated by
	// the host (ZeRO-Offload; the zero value: none).
	Offload Offload
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
	// flats and at locate AdamW's segments (for checkpoint names); sh is
	// the ZeRO 1-3 sharding, nil at stage 0 or on one rank.
	flats []Flat
	at    [][]SegmentAt
	sh    *shardedOptimizer
	// off is ZeRO-Offload's host part (nil: everything on dev); adam and
	// at are then the device's part.
	off *offloaded
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
	if err := c.ZeRO.Validate(); err != nil {
		return nil, err
	}
	if err := c.Offload.Validate(); err != nil {
		return nil, err
	}
	flats, at, err := tr.flats()
	if err != nil {
		return nil, err
	}
	o := &Optimizer{dev: dev, sched: sched, tr: tr, clip: c.ClipNorm, comm: c.Comm, flats: flats, at: at}
	for g, grp := range tr.Groups {
		for i, seg := range grp.Segments {
			// Checkpoints name a BF16 segment's master halves (two per I32)
			// by the halved offset (StateBuffers).
			if seg.Params.DType() != kernels.F32 && at[g][i].Off%2 != 0 {
				return nil, fmt.Errorf("train: bf16 segment %s starts at odd element %d of %s", seg.Name, at[g][i].Off, flats[at[g][i].Flat].Name)
			}
		}
	}
	groups := tr.Groups
	if c.ZeRO.PartitionsOptimizer() && c.Comm != nil && c.Comm.Size() > 1 {
		if o.sh, groups, o.at, err = newSharded(dev, c.Comm, c.ZeRO, tr); err != nil {
			return nil, err
		}
	}
	if c.Offload.Enabled() {
		var pieces []piece
		var hostGroups []optim.Group
		groups, o.at, pieces, hostGroups = splitOffload(flats, groups, o.at, c.Offload.Ratio)
		if o.off, err = newOffloaded(dev, c.Offload, flats, pieces, hostGroups, c.AdamW); err != nil {
			if o.sh != nil {
				o.sh.free()
			}
			return nil, err
		}
	}
	if o.adam, err = optim.NewAdamW(dev, groups, c.AdamW); err != nil {
		if o.sh != nil {
			o.sh.free()
		}
		if o.off != nil {
			o.off.free()
		}
		return nil, err
	}
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
	if o.sh != nil {
		return o.sh.reduce()
	}
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
	var norm float64
	if o.sh != nil {
		ss, err := o.sh.sumSquares()
		if err != nil {
			return 0, err
		}
		norm = math.Sqrt(ss) / float64(n)
	} else {
		norm = optim.GradNorm(o.dev, o.tr.Grads...) * (1 / float64(n))
	}
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, &NonFiniteError{What: "gradient norm"}
	}
	return norm, nil
}

// Apply takes the step for gradients whose checked norm is norm (from
// Norm): it clips to the global norm, steps AdamW at schedule step s and
// zeroes the gradients.
func (o *Optimizer) Apply(s, n int, norm float64) (Update, error) {
	scale, gradScale := o.sched(s), float32(1/float64(n)*optim.ClipScale(norm, o.clip))
	if o.off != nil {
		if err := o.off.step(o.adam, scale, gradScale); err != nil {
			return Update{}, fmt.Errorf("optimizer step: %w", err)
		}
	} else {
		o.adam.Step(scale, gradScale)
	}
	if o.sh != nil {
		if err := o.sh.gather(); err != nil {
			return Update{}, fmt.Errorf("optimizer step: %w", err)
		}
	}
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
	if o.sh != nil {
		o.sh.zeroGrads()
		return
	}
	for _, g := range o.tr.Grads {
		o.dev.Zero(g)
	}
}

// Idle makes, on a rank that has no batch left in a round, the
// collectives one batch (a forward and a backward pass) makes under ZeRO
// 2 and 3, so that they pair with the ranks that compute (nothing at
// other stages).
func (o *Optimizer) Idle() error {
	if o.sh == nil {
		return nil
	}
	return o.sh.idle(false, true)
}

// IdleForward is Idle for a forward pass alone (an evaluation batch): the
// gathers of ZeRO-3; nothing at other stages.
func (o *Optimizer) IdleForward() error {
	if o.sh == nil {
		return nil
	}
	return o.sh.idle(false)
}

// Consolidate gathers ZeRO-3's partitioned parameters, so that every rank
// holds the whole model again (to save it, or to use it outside
// training); nothing at other stages. The next pass partitions them
// again.
func (o *Optimizer) Consolidate() error {
	if o.sh == nil || !o.sh.stage.PartitionsParams() {
		return nil
	}
	for _, f := range o.sh.flats {
		if f.hooked {
			if err := f.gatherParams(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Gather consolidates ZeRO-3's parameters (Consolidate) and keeps them
// whole until Partition: the model's passes in between make no
// collectives, so ranks may run different numbers of them (step 3's
// generation and experience forwards; DESIGN.md §4). Nothing at other
// stages. Every rank calls Gather and Partition in the same order.
func (o *Optimizer) Gather() error {
	if o.sh == nil || !o.sh.stage.PartitionsParams() || o.sh.whole {
		return nil
	}
	if err := o.Consolidate(); err != nil {
		return err
	}
	o.sh.whole = true
	return nil
}

// Partition ends a Gather: each rank keeps only the parameters it owns
// again, and the model's passes gather each layer's as before.
func (o *Optimizer) Partition() {
	if o.sh == nil || !o.sh.whole {
		return
	}
	for _, f := range o.sh.flats {
		if f.hooked {
			for u := range f.x.Layout().Units {
				f.x.Release(f.flat.Params, u)
			}
		}
	}
	o.sh.whole = false
}

// Partitioned returns, for the State buffer name whose parameters ZeRO-3
// partitions, the ranges this rank keeps between steps; ok is false when
// the buffer is whole on every rank (stages 0-2, or another buffer). A
// buffer laid out like it (an EMA of the parameters) can be kept on the
// same ranges and gathered with GatherLike.
func (o *Optimizer) Partitioned(name string) (ranges []zero.Range, ok bool) {
	f := o.partitionedFlat(name)
	if f == nil {
		return nil, false
	}
	return f.x.Layout().Owned(), true
}

// GatherLike all-gathers buf, laid out like the partitioned State buffer
// name (see Partitioned): every rank ends with every owner's ranges.
// Nothing when name is not partitioned.
func (o *Optimizer) GatherLike(name string, buf kernels.Buffer) error {
	f := o.partitionedFlat(name)
	if f == nil {
		return nil
	}
	for u := range f.x.Layout().Units {
		if err := f.x.Gather(buf, u); err != nil {
			return fmt.Errorf("gather %s: %w", name, err)
		}
	}
	return nil
}

// Held is what this rank holds of the trained state between steps, in
// bytes: parameters and gradients of the Trainable's flats (under ZeRO-3
// and ZeRO-2, only the ranges this rank owns of the flats the model's
// passes gather and reduce), and the optimizer state (AdamW's moments and
// the master weights' low halves) of the ranges it updates.
func (o *Optimizer) Held() (params, grads, state int64) {
	for i, f := range o.flats {
		pn, gn := f.Params.Len(), 0
		if f.Grads != nil {
			gn = f.Grads.Len()
		}
		if o.sh != nil && o.sh.flats[i].hooked {
			owned := o.sh.flats[i].x.Layout().OwnedElems()
			if f.Grads != nil {
				gn = owned
			}
			if o.sh.stage.PartitionsParams() {
				pn = owned
			}
		}
		params += int64(pn * f.Params.DType().Size())
		if f.Grads != nil {
			grads += int64(gn * f.Grads.DType().Size())
		}
	}
	for _, g := range o.adam.Groups() {
		for _, s := range g.Segments {
			m, lo := optim.StateBytes(s.Params.Len(), s.Params.DType())
			state += int64(m + lo)
		}
	}
	return params, grads, state
}

// HostHeld is what ZeRO-Offload keeps in host memory, in bytes: the host
// copies of the offloaded parameters and gradients, AdamW's moments and
// the master weights' low halves of the offloaded ranges (0 without
// offload). Held counts the device's part only.
func (o *Optimizer) HostHeld() int64 {
	if o.off == nil {
		return 0
	}
	return o.off.bytes()
}

// Sharded reports whether ranks hold different parts of the state (ZeRO
// 1-3 on several ranks): each then checkpoints its own.
func (o *Optimizer) Sharded() bool { return o.sh != nil }

// Free releases the optimizer's state (AdamW's moments and master
// halves, ZeRO's staging memory) and unhooks the model; the Trainable's
// buffers are its owner's.
func (o *Optimizer) Free() {
	o.adam.Free()
	if o.sh != nil {
		o.sh.free()
	}
	if o.off != nil {
		o.off.free()
	}
}

// Steps is the number of updates taken (AdamW's bias-correction count).
func (o *Optimizer) Steps() int { return o.adam.Steps() }

// SetSteps restores Steps from a checkpoint, once its buffers are loaded:
// with offload the host's copy of the parameters is then taken again from
// the device's before the next update.
func (o *Optimizer) SetSteps(n int) {
	o.adam.SetSteps(n)
	if o.off != nil {
		o.off.adam.SetSteps(n)
		o.off.stale = true
	}
}

// StateBuffers adds, under prefix, the buffers a checkpoint keeps of this
// optimizer's model and state: the trained model buffers of its Trainable
// ("param.NAME"), AdamW's moments ("adam.m.FLAT@OFF", "adam.v.FLAT@OFF")
// and, in bf16, the low halves of its fp32 master weights
// ("adam.master_lo.FLAT@OFF/2", I32 bits, two per element; the parameters
// are the high halves). A name NAME@OFF is the range of the logical
// tensor NAME from element OFF (RangeName), so a checkpoint's ranges
// load into any other cut of the same tensor: another number of ranks or
// another ZeRO stage. Under ZeRO-3 the model's parameters are ranges too
// ("param.model@OFF", the ranges this rank owns).
func (o *Optimizer) StateBuffers(bufs map[string]kernels.Buffer, prefix string) {
	for name, b := range o.tr.State {
		if f := o.partitionedFlat(name); f != nil {
			for _, r := range f.x.Layout().Owned() {
				bufs[RangeName(prefix+"param."+name, r.Lo)] = b.Slice(r.Lo, r.Len())
			}
			continue
		}
		bufs[prefix+"param."+name] = b
	}
	m, v := o.adam.Moments()
	lows := o.adam.MasterLows()
	i, li := 0, 0
	for g, grp := range o.adam.Groups() {
		for s, seg := range grp.Segments {
			a := o.at[g][s]
			name := o.flats[a.Flat].Name
			bufs[RangeName(prefix+"adam.m."+name, a.Off)] = m[i]
			bufs[RangeName(prefix+"adam.v."+name, a.Off)] = v[i]
			if seg.Params.DType() != kernels.F32 {
				bufs[RangeName(prefix+"adam.master_lo."+name, a.Off/2)] = lows[li]
				li++
			}
			i++
		}
	}
	if o.off != nil {
		o.off.stateBuffers(bufs, prefix, o.flats)
	}
}

// partitionedFlat is the ZeRO-3 flat whose parameters are the State
// buffer name, or nil.
func (o *Optimizer) partitionedFlat(name string) *sharded {
	if o.sh == nil || !o.sh.stage.PartitionsParams() {
		return nil
	}
	for _, f := range o.sh.flats {
		if f.hooked && f.flat.Name == name {
			return f
		}
	}
	return nil
}
