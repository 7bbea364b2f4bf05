package train

import (
	"fmt"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/zero"
)

// Flat is one flat buffer of trained parameters and its gradients, as
// ZeRO shards it.
type Flat struct {
	// Name names the buffer in checkpoints ("model", "lora"); a Trainable's
	// State entry of the same name is this buffer's parameters.
	Name string
	// Params and Grads have the same length. A flat without Grads is
	// frozen (the base model under --only-optimize-lora): no optimizer
	// segment lies in it, and ZeRO-3 only partitions its parameters.
	Params, Grads kernels.Buffer
	// Units are the sizes of the consecutive runs ZeRO shards one by one
	// (nil: the buffer is one unit).
	Units []int
	// Model, when Params is this model's Params.Flat with one unit before
	// the layers, one per layer and one after, lets ZeRO 2 and 3 hook the
	// model's passes (model.ParamHook): gradients reduce-scattered layer by
	// layer as the backward pass completes them, parameters gathered layer
	// by layer.
	Model Hookable
}

// Hookable is a model whose passes call a model.ParamHook (see
// model.Model.Hook). *model.Model implements it.
type Hookable interface {
	ParamHook() model.ParamHook
	SetParamHook(h model.ParamHook)
}

// LayerLayout is what ModelUnits reads of a model: its layer count, where
// each layer's weights lie in the flat buffer, and the buffer's length.
// *model.Model implements it.
type LayerLayout interface {
	ModelConfig() *model.Config
	LayerRange(l int) (off, n int)
	NumParams() int
}

// SegmentAt is where an optimizer segment lies: in Flats[Flat], from
// element Off.
type SegmentAt struct{ Flat, Off int }

// flats returns tr's flat buffers and where each segment lies. A
// Trainable without Flats has one flat per segment, named by it.
func (tr Trainable) flats() ([]Flat, [][]SegmentAt, error) {
	if tr.Flats != nil {
		if len(tr.At) != len(tr.Groups) {
			return nil, nil, fmt.Errorf("train: %d groups but %d segment positions", len(tr.Groups), len(tr.At))
		}
		return tr.Flats, tr.At, nil
	}
	var fs []Flat
	at := make([][]SegmentAt, len(tr.Groups))
	seen := map[string]bool{}
	for g, grp := range tr.Groups {
		for _, s := range grp.Segments {
			if seen[s.Name] {
				return nil, nil, fmt.Errorf("train: two segments named %q; name them apart or give the Trainable Flats", s.Name)
			}
			seen[s.Name] = true
			at[g] = append(at[g], SegmentAt{Flat: len(fs)})
			fs = append(fs, Flat{Name: s.Name, Params: s.Params, Grads: s.Grads})
		}
	}
	return fs, at, nil
}

// ModelUnits are a model's ZeRO units: everything before the first
// decoder layer, each layer, everything after the last (possibly empty).
func ModelUnits(m LayerLayout) []int {
	L := m.ModelConfig().NumLayers
	first, _ := m.LayerRange(0)
	last, n := m.LayerRange(L - 1)
	units := []int{first}
	for l := range L {
		_, k := m.LayerRange(l)
		units = append(units, k)
	}
	return append(units, m.NumParams()-(last+n))
}

// sharded is one flat buffer under ZeRO stages 1-3: its layout over the
// ranks and the collectives that move it.
type sharded struct {
	flat   Flat
	x      *zero.Exchange
	hooked bool // the model's passes reduce (stage ≥ 2) and gather (stage 3) it
}

// frozen reports whether the flat has no gradients (see Flat).
func (f *sharded) frozen() bool { return f.flat.Grads == nil }

// shardedOptimizer is the part of an Optimizer that ZeRO stages 1-3 add.
type shardedOptimizer struct {
	stage zero.Stage
	comm  dist.Comm
	dev   kernels.Device
	flats []*sharded
	// whole: the ZeRO-3 parameters are gathered and kept whole (Gather)
	// until Partition: the model's passes neither gather nor release them.
	whole bool
}

// newSharded lays out tr's flats over comm's ranks and returns the groups
// AdamW updates on this rank (the segments cut to the ranges it owns) and
// where each lies.
func newSharded(dev kernels.Device, comm dist.Comm, stage zero.Stage, tr Trainable) (*shardedOptimizer, []optim.Group, [][]SegmentAt, error) {
	flats, at, err := tr.flats()
	if err != nil {
		return nil, nil, nil, err
	}
	so := &shardedOptimizer{stage: stage, comm: comm, dev: dev}
	for _, f := range flats {
		units := f.Units
		if units == nil {
			units = []int{f.Params.Len()}
		}
		lay, err := zero.NewLayout(units, comm.Size(), comm.Rank())
		if err != nil {
			return nil, nil, nil, fmt.Errorf("ZeRO layout of %s: %w", f.Name, err)
		}
		if lay.N != f.Params.Len() || (f.Grads != nil && f.Grads.Len() != lay.N) {
			return nil, nil, nil, fmt.Errorf("train: ZeRO flat %s: units cover %d elements of %d", f.Name, lay.N, f.Params.Len())
		}
		x, err := zero.NewExchange(dev, comm, lay, 0)
		if err != nil {
			return nil, nil, nil, err
		}
		// A frozen flat has nothing to reduce: only ZeRO-3 hooks it.
		hooked := f.Model != nil && stage.PartitionsGrads() && (f.Grads != nil || stage.PartitionsParams())
		if hooked && f.Model.ParamHook() != nil {
			return nil, nil, nil, fmt.Errorf("train: ZeRO-%d: model of %s already has a hook (one optimizer per model)", int(stage), f.Name)
		}
		so.flats = append(so.flats, &sharded{flat: f, x: x, hooked: hooked})
	}
	var groups []optim.Group
	var where [][]SegmentAt
	for g, grp := range tr.Groups {
		out := grp
		out.Segments = nil
		var w []SegmentAt
		for s, seg := range grp.Segments {
			a := at[g][s]
			lay := so.flats[a.Flat].x.Layout()
			f := so.flats[a.Flat].flat
			for _, r := range lay.Intersect(a.Off, a.Off+seg.Params.Len()) {
				if r.Lo%2 != 0 {
					return nil, nil, nil, fmt.Errorf("train: ZeRO: segment %s of %s is cut at odd element %d", seg.Name, f.Name, r.Lo)
				}
				out.Segments = append(out.Segments, optim.Segment{Name: seg.Name,
					Params: f.Params.Slice(r.Lo, r.Len()), Grads: f.Grads.Slice(r.Lo, r.Len())})
				w = append(w, SegmentAt{Flat: a.Flat, Off: r.Lo})
			}
		}
		groups, where = append(groups, out), append(where, w)
	}
	for _, f := range so.flats {
		if f.hooked {
			f.flat.Model.SetParamHook(&zeroHook{so: so, f: f})
		}
	}
	// Only the owned ranges stay resident between passes: the gradients
	// (stage ≥ 2; the passes commit a part's before its backward) and at
	// stage 3 the parameters (gathered part by part).
	for _, f := range so.flats {
		if !f.hooked {
			continue
		}
		for u := range f.x.Layout().Units {
			if !f.frozen() {
				f.x.Release(f.flat.Grads, u)
			}
			if stage.PartitionsParams() {
				f.x.Release(f.flat.Params, u)
			}
		}
	}
	return so, groups, where, nil
}

// gatherParams all-gathers every unit of the flat's parameters.
func (f *sharded) gatherParams() error {
	for u := range f.x.Layout().Units {
		if err := f.x.Gather(f.flat.Params, u); err != nil {
			return fmt.Errorf("parameters of %s: %w", f.flat.Name, err)
		}
	}
	return nil
}

// free releases the staging memory and unhooks the models.
func (so *shardedOptimizer) free() {
	for _, f := range so.flats {
		f.x.Free()
		if f.hooked {
			f.flat.Model.SetParamHook(nil)
		}
	}
}

// reduce leaves in every owned range the gradients summed over the ranks:
// flats the model's passes did not reduce are reduce-scattered now.
func (so *shardedOptimizer) reduce() error {
	for _, f := range so.flats {
		if f.hooked || f.frozen() {
			continue
		}
		for u := range f.x.Layout().Units {
			if err := f.x.ReduceScatter(f.flat.Grads, u); err != nil {
				return fmt.Errorf("gradients of %s: %w", f.flat.Name, err)
			}
		}
	}
	return nil
}

// sumSquares is the sum of squares of the reduced gradients over every
// rank's owned ranges, summed across ranks: each rank's sum is shared
// exactly (dist.ShareFloat64s) and the sums added in rank order.
func (so *shardedOptimizer) sumSquares() (float64, error) {
	var bufs []kernels.Buffer
	for _, f := range so.flats {
		if f.frozen() {
			continue
		}
		for _, r := range f.x.Layout().Owned() {
			bufs = append(bufs, f.flat.Grads.Slice(r.Lo, r.Len()))
		}
	}
	parts := make([]float64, so.comm.Size())
	if len(bufs) > 0 {
		parts[so.comm.Rank()] = so.dev.SumSquares(bufs...)
	}
	if err := dist.ShareFloat64s(so.comm, so.dev, parts); err != nil {
		return 0, fmt.Errorf("gradient norm: %w", err)
	}
	sum := 0.0
	for _, v := range parts {
		sum += v
	}
	return sum, nil
}

// gather all-gathers the updated parameters (stages 1 and 2, and flats
// the model does not gather itself at stage 3; frozen flats never change).
func (so *shardedOptimizer) gather() error {
	for _, f := range so.flats {
		if (f.hooked && so.stage.PartitionsParams()) || f.frozen() {
			continue
		}
		if err := f.gatherParams(); err != nil {
			return err
		}
	}
	return nil
}

// zeroGrads zeroes the gradients for the next step: for flats the model's
// passes reduce, only the owned ranges (the rest is already zero and
// stays uncommitted).
func (so *shardedOptimizer) zeroGrads() {
	for _, f := range so.flats {
		if f.frozen() {
			continue
		}
		if !f.hooked {
			so.dev.Zero(f.flat.Grads)
			continue
		}
		for _, r := range f.x.Layout().Owned() {
			so.dev.Zero(f.flat.Grads.Slice(r.Lo, r.Len()))
		}
	}
}

// idle makes the collectives of the given passes (false: forward, true:
// backward) without computing anything: a rank with no batch left in a
// round calls it for each batch it lacks, so its hooked collectives pair
// with those of the ranks that compute.
func (so *shardedOptimizer) idle(passes ...bool) error {
	for _, f := range so.flats {
		if !f.hooked {
			continue
		}
		h := f.flat.Model.ParamHook()
		L := len(f.x.Layout().Units) - 2
		for _, backward := range passes {
			if err := h.Acquire(-1, backward); err != nil {
				return err
			}
			for i := range L {
				l := i
				if backward {
					l = L - 1 - i
				}
				if err := h.Acquire(l, backward); err != nil {
					return err
				}
				if err := h.Release(l, backward); err != nil {
					return err
				}
			}
			if err := h.Release(-1, backward); err != nil {
				return err
			}
		}
	}
	return nil
}

// zeroHook is the model.ParamHook of a hooked flat: part l is unit l+1,
// part −1 the first and last units.
type zeroHook struct {
	so *shardedOptimizer
	f  *sharded
}

func (h *zeroHook) units(part int) []int {
	if part >= 0 {
		return []int{part + 1}
	}
	return []int{0, len(h.f.x.Layout().Units) - 1}
}

// Acquire implements model.ParamHook: before a backward pass writes the
// part's gradients it commits their memory (Release returned all but the
// owned ranges); at stage 3 it gathers the part's parameters (committing
// them).
func (h *zeroHook) Acquire(part int, backward bool) error {
	for _, u := range h.units(part) {
		if backward && !h.f.frozen() {
			if err := h.f.x.Commit(h.f.flat.Grads, u); err != nil {
				return fmt.Errorf("gradients of %s: %w", h.f.flat.Name, err)
			}
		}
		if h.so.stage.PartitionsParams() && !h.so.whole {
			if err := h.f.x.Gather(h.f.flat.Params, u); err != nil {
				return fmt.Errorf("parameters of %s: %w", h.f.flat.Name, err)
			}
		}
	}
	return nil
}

// Release implements model.ParamHook: after a backward pass it
// reduce-scatters the part's gradients into the owners' ranges and
// releases the rest (a frozen flat has none); at stage 3 it releases the
// part's parameters.
func (h *zeroHook) Release(part int, backward bool) error {
	for _, u := range h.units(part) {
		if backward && !h.f.frozen() {
			if err := h.f.x.ReduceScatter(h.f.flat.Grads, u); err != nil {
				return err
			}
			h.f.x.Release(h.f.flat.Grads, u)
		}
		if h.so.stage.PartitionsParams() && !h.so.whole {
			h.f.x.Release(h.f.flat.Params, u)
		}
	}
	return nil
}
