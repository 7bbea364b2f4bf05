package train

import (
	"fmt"
	"math"
	"sort"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/optim"
)

// Offload configures ZeRO-Offload (DeepSpeed's offload_optimizer,
// DeepSpeed-Chat's --offload): the optimizer state of a fraction of the
// parameters — AdamW's moments and the fp32 master weights — lives in
// host memory, where the host's AdamW updates it, while the device's
// AdamW updates the rest at the same time.
type Offload struct {
	// Host is the device whose memory holds the offloaded state and which
	// updates it: a kernels/cpu Device (on page-locked memory when the
	// compute device is a GPU), whose work is done when its calls return.
	// It must implement kernels.HostMemory, and the compute device
	// kernels.HostCopier. nil: no offload.
	Host kernels.Device
	// Ratio is DeepSpeed's offload_optimizer.ratio: the fraction of each
	// model's parameters (of the ranges this rank updates, under ZeRO
	// 1-3) whose optimizer state and update live on Host; the device
	// keeps and updates the rest. 1 offloads everything, 0 nothing.
	Ratio float64
}

// Enabled reports whether some state goes to the host.
func (c Offload) Enabled() bool { return c.Host != nil && c.Ratio > 0 }

// Validate checks the ratio.
func (c Offload) Validate() error {
	if c.Ratio < 0 || c.Ratio > 1 || math.IsNaN(c.Ratio) {
		return fmt.Errorf("train: offload ratio %v: want a fraction in [0, 1]", c.Ratio)
	}
	return nil
}

// offloaded is the part of an Optimizer that ZeRO-Offload keeps on the
// host: for each offloaded piece of a segment, a host copy of its
// parameters (in the parameters' type: for BF16 the high halves of the
// fp32 masters, whose low halves AdamW keeps beside them, as on the
// device) and of its gradients, and host AdamW's moments. The host copy
// of the parameters equals the device's between steps, so checkpoints
// keep saving the device's parameters and the state of the two AdamWs
// under the same names as without offload.
//
// A step copies the offloaded gradients to the host (one copy per run of
// pieces adjacent on both sides), queues the device's AdamW on its part,
// then runs the host's AdamW piece by piece, queueing each run's updated
// parameters back to the device as soon as its last piece is done: the
// device updates its part, and the copies move, while the host computes.
type offloaded struct {
	dev, host kernels.Device
	cp        kernels.HostCopier
	mem       kernels.HostMemory
	adam      *optim.AdamW // one group per piece, in flat order
	pieces    []piece
	runs      []run
	alloc     []kernels.Buffer // the host buffers the pieces are views of
	// stale: the device's parameters were restored (a checkpoint) and the
	// host's copy must be taken again before the next update.
	stale bool
}

// piece is an offloaded part of an optimizer segment.
type piece struct {
	at     SegmentAt
	params kernels.Buffer // the device's parameters (a view)
	run    int            // the run it belongs to
	last   bool           // the last piece of its run
}

// run is a stretch of pieces contiguous on the device and on the host.
type run struct {
	params, grads   kernels.Buffer // device views
	hparams, hgrads kernels.Buffer // host views
}

// splitOffload cuts the optimizer's segments (groups, located by at in
// flats) in two: the first ratio of their elements in flat order (the
// pieces the host updates; a segment may be cut, at an even element) and
// the rest, returned as the groups the device updates, with where each
// segment lies.
func splitOffload(flats []Flat, groups []optim.Group, at [][]SegmentAt, ratio float64) (dev []optim.Group, devAt [][]SegmentAt, host []piece, hostGroups []optim.Group) {
	type seg struct{ g, s int }
	var all []seg
	total := 0
	for g, grp := range groups {
		for s, sg := range grp.Segments {
			all = append(all, seg{g, s})
			total += sg.Params.Len()
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := at[all[i].g][all[i].s], at[all[j].g][all[j].s]
		return a.Flat < b.Flat || (a.Flat == b.Flat && a.Off < b.Off)
	})
	left := total
	if ratio < 1 {
		left = min(total, int(math.Round(ratio*float64(total)/2))*2)
	}
	cut := make(map[seg]int) // elements of each segment that go to the host
	for _, x := range all {
		if left <= 0 {
			break
		}
		sg, a := groups[x.g].Segments[x.s], at[x.g][x.s]
		k := min(left, sg.Params.Len())
		if k < sg.Params.Len() && (a.Off+k)%2 != 0 { // BF16 masters' halves come in pairs
			k++
		}
		cut[x] = k
		left -= k
		f := flats[a.Flat]
		host = append(host, piece{at: a, params: f.Params.Slice(a.Off, k)})
		hostGroups = append(hostGroups, optim.Group{Name: groups[x.g].Name, LR: groups[x.g].LR, WeightDecay: groups[x.g].WeightDecay,
			Segments: []optim.Segment{{Name: sg.Name, Params: sg.Params.Slice(0, k), Grads: sg.Grads.Slice(0, k)}}})
	}
	for g, grp := range groups {
		out := grp
		out.Segments = nil
		var w []SegmentAt
		for s, sg := range grp.Segments {
			k, n := cut[seg{g, s}], sg.Params.Len()
			if k == n {
				continue
			}
			out.Segments = append(out.Segments, optim.Segment{Name: sg.Name, Params: sg.Params.Slice(k, n-k), Grads: sg.Grads.Slice(k, n-k)})
			w = append(w, SegmentAt{Flat: at[g][s].Flat, Off: at[g][s].Off + k})
		}
		dev, devAt = append(dev, out), append(devAt, w)
	}
	return dev, devAt, host, hostGroups
}

// newOffloaded allocates the host side of the pieces (hostGroups, from
// splitOffload, name the device's views) and copies their parameters to
// the host.
func newOffloaded(dev kernels.Device, c Offload, flats []Flat, pieces []piece, hostGroups []optim.Group, cfg optim.AdamWConfig) (*offloaded, error) {
	cp, ok := dev.(kernels.HostCopier)
	if !ok {
		return nil, fmt.Errorf("train: offload: %s cannot copy to and from host memory", dev.Name())
	}
	mem, ok := c.Host.(kernels.HostMemory)
	if !ok {
		return nil, fmt.Errorf("train: offload: %s is not host memory", c.Host.Name())
	}
	f := &offloaded{dev: dev, host: c.Host, cp: cp, mem: mem, pieces: pieces}
	// The host buffers: per flat, the pieces packed in flat order.
	per := map[int]int{}
	for _, p := range pieces {
		per[p.at.Flat] += p.params.Len()
	}
	hp, hg := map[int]kernels.Buffer{}, map[int]kernels.Buffer{}
	for fi := range flats {
		n := per[fi]
		if n == 0 {
			continue
		}
		pb, err := c.Host.Alloc(flats[fi].Params.DType(), n)
		if err != nil {
			f.free()
			return nil, fmt.Errorf("train: offload: host copy of %s's parameters (%d): %w", flats[fi].Name, n, err)
		}
		f.alloc = append(f.alloc, pb)
		gb, err := c.Host.Alloc(kernels.F32, n)
		if err != nil {
			f.free()
			return nil, fmt.Errorf("train: offload: host copy of %s's gradients (%d): %w", flats[fi].Name, n, err)
		}
		f.alloc = append(f.alloc, gb)
		hp[fi], hg[fi] = pb, gb
	}
	used := map[int]int{}
	groups := make([]optim.Group, len(hostGroups))
	for i, p := range pieces {
		fi, n := p.at.Flat, p.params.Len()
		h := used[fi]
		used[fi] += n
		fl := flats[fi]
		hpar, hgr := hp[fi].Slice(h, n), hg[fi].Slice(h, n)
		g := hostGroups[i]
		g.Segments = []optim.Segment{{Name: g.Segments[0].Name, Params: hpar, Grads: hgr}}
		groups[i] = g
		// A piece continues the previous run when it follows it on the
		// device (same flat, next element); on the host it always does.
		if k := len(f.runs) - 1; i > 0 && pieces[i-1].at.Flat == fi && pieces[i-1].at.Off+pieces[i-1].params.Len() == p.at.Off {
			r := &f.runs[k]
			l := r.params.Len()
			r.params, r.grads = fl.Params.Slice(p.at.Off-l, l+n), fl.Grads.Slice(p.at.Off-l, l+n)
			r.hparams, r.hgrads = hp[fi].Slice(h-l, l+n), hg[fi].Slice(h-l, l+n)
			f.pieces[i-1].last = false
		} else {
			f.runs = append(f.runs, run{params: fl.Params.Slice(p.at.Off, n), grads: fl.Grads.Slice(p.at.Off, n), hparams: hpar, hgrads: hgr})
		}
		f.pieces[i].run, f.pieces[i].last = len(f.runs)-1, true
	}
	var err error
	if f.adam, err = optim.NewAdamW(c.Host, groups, cfg); err != nil {
		f.free()
		return nil, fmt.Errorf("train: offload: %w", err)
	}
	f.stale = true
	if err := f.pull(); err != nil {
		f.free()
		return nil, err
	}
	return f, nil
}

// pull copies the device's parameters of the pieces to the host, when
// the host's copy is stale.
func (f *offloaded) pull() error {
	if !f.stale {
		return nil
	}
	for _, r := range f.runs {
		f.cp.CopyToHost(f.mem.Bytes(r.hparams), r.params)
	}
	if err := f.dev.Sync(); err != nil {
		return fmt.Errorf("offload: parameters to the host: %w", err)
	}
	f.stale = false
	return nil
}

// step updates the parameters: the offloaded gradients to the host, the
// device's AdamW (devAdam, queued first), the host's AdamW, and each run
// of updated parameters back to the device as soon as it is done. The
// caller syncs the device before the parameters are used on the host
// side again.
func (f *offloaded) step(devAdam *optim.AdamW, lrScale float64, gradScale float32) error {
	if err := f.pull(); err != nil {
		return err
	}
	for _, r := range f.runs {
		f.cp.CopyToHost(f.mem.Bytes(r.hgrads), r.grads)
	}
	if err := f.dev.Sync(); err != nil {
		return fmt.Errorf("offload: gradients to the host: %w", err)
	}
	devAdam.Step(lrScale, gradScale)
	f.adam.StepEach(lrScale, gradScale, func(g, _ int) {
		if p := f.pieces[g]; p.last {
			r := f.runs[p.run]
			f.cp.CopyFromHost(r.params, f.mem.Bytes(r.hparams))
		}
	})
	return nil
}

// bytes is the host memory the offloaded state holds.
func (f *offloaded) bytes() int64 {
	var n int64
	for _, b := range f.alloc {
		n += int64(b.Len() * b.DType().Size())
	}
	for _, g := range f.adam.Groups() {
		for _, s := range g.Segments {
			m, lo := optim.StateBytes(s.Params.Len(), s.Params.DType())
			n += int64(m + lo)
		}
	}
	return n
}

// free releases the host memory.
func (f *offloaded) free() {
	if f.adam != nil {
		f.adam.Free()
	}
	for _, b := range f.alloc {
		f.host.Free(b)
	}
	f.alloc = nil
}

// stateBuffers adds the host AdamW's state under the names the device's
// would have (Optimizer.StateBuffers), as buffers the checkpoint reads
// and writes through the host device.
func (f *offloaded) stateBuffers(bufs map[string]kernels.Buffer, prefix string, flats []Flat) {
	m, v := f.adam.Moments()
	lows := f.adam.MasterLows()
	li := 0
	for i, p := range f.pieces {
		name := flats[p.at.Flat].Name
		bufs[RangeName(prefix+"adam.m."+name, p.at.Off)] = onDevice{m[i], f.host}
		bufs[RangeName(prefix+"adam.v."+name, p.at.Off)] = onDevice{v[i], f.host}
		if p.params.DType() != kernels.F32 {
			bufs[RangeName(prefix+"adam.master_lo."+name, p.at.Off/2)] = onDevice{lows[li], f.host}
			li++
		}
	}
}

// onDevice is a checkpoint buffer of another device than the loop's (the
// offloaded optimizer state, on the host): the checkpoint reads and writes
// it through dev.
type onDevice struct {
	kernels.Buffer
	dev kernels.Device
}

// Slice keeps the device.
func (b onDevice) Slice(off, n int) kernels.Buffer { return onDevice{b.Buffer.Slice(off, n), b.dev} }

// bufferDevice returns the device that holds b (dev, or an onDevice's)
// and the buffer as that device knows it.
func bufferDevice(dev kernels.Device, b kernels.Buffer) (kernels.Device, kernels.Buffer) {
	if o, ok := b.(onDevice); ok {
		return o.dev, o.Buffer
	}
	return dev, b
}
