package train

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/zero"
)

// FrozenModel is what OffloadFrozen uses of a model that is only run
// forward (step 3's reference and reward models). *model.Model
// implements it.
type FrozenModel interface {
	LayerLayout
	Hookable
	Parameters() *model.Params
}

// FrozenOffload keeps a frozen model's weights in host memory
// (DeepSpeed-Chat's --offload_reference_model and --offload_reward_model,
// ZeRO-3's parameter offload for a model that is not trained): the model's
// passes bring each part of the weights to the device just before it runs
// (the decoder layers one at a time; the embeddings, projections, final
// norm and heads for the whole pass) and release it after, through the
// model's ParamHook. The outputs are those of the resident model: the
// device computes on the same bits. A device that can return memory
// (kernels.Decommitter) holds one layer at a time besides the parts
// outside the layers; on another the released parts stay allocated (the
// copies still run) and nothing is saved.
type FrozenOffload struct {
	dev   kernels.Device
	cp    kernels.HostCopier
	host  kernels.Device
	mem   kernels.HostMemory
	m     FrozenModel
	hbuf  kernels.Buffer // the weights, on the host
	units [][2]int       // ModelUnits as (offset, length)
}

// OffloadFrozen copies m's weights to host (a kernels.HostMemory device),
// releases them on the device (m's, a kernels.HostCopier) and hooks m so
// that its passes bring them back part by part. m must have no hook
// (ZeRO-3 does not partition frozen models in gochat). Free undoes it.
func OffloadFrozen(host kernels.Device, m FrozenModel, dev kernels.Device) (*FrozenOffload, error) {
	cp, ok := dev.(kernels.HostCopier)
	if !ok {
		return nil, fmt.Errorf("train: offload: %s cannot copy to and from host memory", dev.Name())
	}
	mem, ok := host.(kernels.HostMemory)
	if !ok {
		return nil, fmt.Errorf("train: offload: %s is not host memory", host.Name())
	}
	if m.ParamHook() != nil {
		return nil, fmt.Errorf("train: offload of a frozen model that already has a parameter hook")
	}
	flat := m.Parameters().Flat
	f := &FrozenOffload{dev: dev, cp: cp, host: host, mem: mem, m: m}
	off := 0
	for _, n := range ModelUnits(m) {
		f.units = append(f.units, [2]int{off, n})
		off += n
	}
	if off != flat.Len() {
		return nil, fmt.Errorf("train: offload: the model's units cover %d of its %d weights", off, flat.Len())
	}
	var err error
	if f.hbuf, err = host.Alloc(flat.DType(), flat.Len()); err != nil {
		return nil, fmt.Errorf("train: offload: host copy of the weights: %w", err)
	}
	cp.CopyToHost(mem.Bytes(f.hbuf), flat)
	if err := dev.Sync(); err != nil {
		host.Free(f.hbuf)
		return nil, fmt.Errorf("train: offload: weights to the host: %w", err)
	}
	for u := range f.units {
		f.release(u)
	}
	m.SetParamHook(f)
	return f, nil
}

// Saves reports whether the device returns released weights' memory.
func (f *FrozenOffload) Saves() bool { return ReturnsMemory(f.dev) }

// ReturnsMemory reports whether dev gives decommitted memory back
// (kernels.Decommitter; a device that can say it does not, such as
// kernels/cuda without the driver's virtual memory management or
// kernels/cpu on page-locked memory, only zeroes).
func ReturnsMemory(dev kernels.Device) bool {
	if _, ok := dev.(kernels.Decommitter); !ok {
		return false
	}
	if r, ok := dev.(interface{ DecommitReturnsMemory() bool }); ok {
		return r.DecommitReturnsMemory()
	}
	return true
}

// HostBytes is the host memory the weights take.
func (f *FrozenOffload) HostBytes() int64 { return int64(f.hbuf.Len() * f.hbuf.DType().Size()) }

// parts are the units of a ParamHook part: layer l is unit l+1, part −1
// the first and last units.
func (f *FrozenOffload) parts(part int) []int {
	if part >= 0 {
		return []int{part + 1}
	}
	return []int{0, len(f.units) - 1}
}

func (f *FrozenOffload) release(u int) {
	if !f.Saves() {
		return // the memory stays: zeroing it would only cost time
	}
	o, n := f.units[u][0], f.units[u][1]
	zero.Decommit(f.dev, f.m.Parameters().Flat.Slice(o, n))
}

// Acquire implements model.ParamHook: the part's weights are committed
// and copied to the device (queued before the pass's work on them).
func (f *FrozenOffload) Acquire(part int, _ bool) error {
	for _, u := range f.parts(part) {
		if err := f.bring(u); err != nil {
			return err
		}
	}
	return nil
}

// bring commits unit u's memory on the device and copies its weights
// there.
func (f *FrozenOffload) bring(u int) error {
	o, n := f.units[u][0], f.units[u][1]
	dst := f.m.Parameters().Flat.Slice(o, n)
	if err := zero.Commit(f.dev, dst); err != nil {
		return fmt.Errorf("train: offload: weights of unit %d (elements %d to %d): %w", u, o, o+n, err)
	}
	f.cp.CopyFromHost(dst, f.mem.Bytes(f.hbuf.Slice(o, n)))
	return nil
}

// Release implements model.ParamHook: the part's weights leave the device
// (a frozen model has no gradients to act on).
func (f *FrozenOffload) Release(part int, _ bool) error {
	for _, u := range f.parts(part) {
		f.release(u)
	}
	return nil
}

// Free brings the weights back to the device, unhooks the model and
// releases the host copy. When the device has not the memory for them
// all, it returns the error and leaves the offload as it was (the model
// still hooked, the host copy kept).
func (f *FrozenOffload) Free() error {
	if f.hbuf == nil {
		return nil
	}
	for u := range f.units {
		if err := f.bring(u); err != nil {
			for v := range u {
				f.release(v)
			}
			return err
		}
	}
	err := f.dev.Sync()
	f.m.SetParamHook(nil)
	f.host.Free(f.hbuf)
	f.hbuf = nil
	return err
}
