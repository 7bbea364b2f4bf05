package cuda

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/train"
	"github.com/gochat-ai/gochat/zero"
)

// The Commit/Decommit sequences ZeRO-2/3 and the frozen-model offload
// issue, run on fake GPUs with VMM: the fake executes few kernels (the
// numbers are not checked here; the CPU tests of train and zero check
// them), but it checks every byte each copy, memset, kernel argument and
// GEMM operand touches, so a read or write of released memory that no
// Commit preceded fails these tests, and it counts the device memory
// mapped.

const vmmTestGran = 1024 // bytes per chunk: the tiny model's layers span many

func tinyOPT() *model.Config {
	return &model.Config{ModelType: "opt", VocabSize: 96, HiddenSize: 32, FFNDim: 64, NumLayers: 3, NumHeads: 4,
		MaxPositions: 16, WordEmbedProjDim: 32, DoLayerNormBefore: true, EnableBias: true,
		LayerNormElementwiseAffine: true, Activation: "relu", TieWordEmbeddings: true}
}

// mappedBytes is the memory mapped under b's reservation.
func mappedBytes(g *fakeGPU, b kernels.Buffer) int64 {
	return int64(len(g.vm.mappedChunks(b))) * g.vm.gran
}

// TestZeROOnVMM trains a tiny OPT on 2 ranks under ZeRO-2 and ZeRO-3 with
// two micro-batches per step (gradient accumulation), an evaluation-only
// forward, a Gather/Partition cycle (generation) and a Consolidate: no
// access to released memory, and between passes each rank holds only
// its share of the partitioned buffers (plus the chunks at unit edges).
func TestZeROOnVMM(t *testing.T) {
	for _, stage := range []zero.Stage{2, 3} {
		t.Run(fmt.Sprintf("ZeRO-%d", stage), func(t *testing.T) {
			const ranks = 2
			var bad violations
			devs := make([]*Device, ranks)
			gpus := make([]*fakeGPU, ranks)
			for r := range devs {
				d, g := newFakeVMMDevice(t, 1<<30, vmmTestGran, 0)
				g.unmapped = bad.add
				devs[r], gpus[r] = d, g
			}
			err := runStaged(t, devs, func(c dist.Comm, dev kernels.Device) error {
				return zeroSteps(c, dev, gpus[c.Rank()], stage)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(bad.msg) > 0 {
				t.Fatalf("%d accesses to released memory, the first: %s", len(bad.msg), bad.msg[0])
			}
		})
	}
}

func zeroSteps(c dist.Comm, dev kernels.Device, g *fakeGPU, stage zero.Stage) error {
	m, err := model.New(dev, tinyOPT(), model.Options{DType: kernels.F32})
	if err != nil {
		return err
	}
	m.InitRandom(3, 0.05)
	tr, err := train.ModelTrainable(m, train.ParamOptions{LR: 1e-3, WeightDecay: 0.1})
	if err != nil {
		return err
	}
	opt, err := train.NewOptimizer(dev, tr, train.OptimizerConfig{AdamW: optim.DefaultAdamW, Schedule: "constant", Total: 10, ClipNorm: 1, Comm: c, ZeRO: stage})
	if err != nil {
		return err
	}
	defer opt.Free()
	const B, T = 2, 8
	a, err := m.NewActs(B, T, model.ActsOptions{Train: true})
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(uint64(c.Rank()), 5))
	batch := func() model.Batch {
		ids := make([]int32, B*T)
		for i := range ids {
			ids[i] = int32(r.IntN(96))
		}
		return model.Batch{IDs: ids, Targets: model.ShiftLabels(ids, B, T), Seed: r.Uint64()}
	}
	flatBytes := int64(m.Params.Flat.Len() * 4)
	units := int64(m.ModelConfig().NumLayers + 2)
	// What a rank may hold of a partitioned buffer between passes: its
	// share and the partial chunks at the ends of each unit's pieces.
	share := flatBytes/int64(c.Size()) + 2*units*vmmTestGran
	check := func(when string) error {
		if err := dev.Sync(); err != nil {
			return err
		}
		if got := mappedBytes(g, m.Grads.Flat); got > share {
			return fmt.Errorf("rank %d, %s: %d bytes of gradients mapped, want at most %d of %d", c.Rank(), when, got, share, flatBytes)
		}
		if p := mappedBytes(g, m.Params.Flat); stage == 3 && p > share {
			return fmt.Errorf("rank %d, %s: %d bytes of parameters mapped, want at most %d of %d", c.Rank(), when, p, share, flatBytes)
		}
		return nil
	}
	if err := check("after setup"); err != nil {
		return err
	}
	for step := range 2 {
		for range 2 { // micro-batches
			if err := m.Forward(a, batch()); err != nil {
				return err
			}
			if err := check(fmt.Sprintf("step %d, after a forward", step)); err != nil {
				return err
			}
			if err := m.Backward(a, m.MeanLossGrad(a)); err != nil {
				return err
			}
			if err := check(fmt.Sprintf("step %d, after a backward", step)); err != nil {
				return err
			}
		}
		if _, err := opt.Step(step, 2*c.Size()); err != nil {
			return err
		}
		if err := check(fmt.Sprintf("step %d, after the update", step)); err != nil {
			return err
		}
	}
	// An evaluation forward, and a rank with no batch (Idle).
	if err := m.Forward(a, batch()); err != nil {
		return err
	}
	if err := opt.Idle(); err != nil {
		return err
	}
	// Generation: the whole model, then partitioned again.
	if err := opt.Gather(); err != nil {
		return err
	}
	if got := mappedBytes(g, m.Params.Flat); got < flatBytes {
		return fmt.Errorf("rank %d: %d bytes of parameters mapped after Gather, want all %d", c.Rank(), got, flatBytes)
	}
	if err := m.Forward(a, batch()); err != nil {
		return err
	}
	opt.Partition()
	if err := check("after Partition"); err != nil {
		return err
	}
	if err := opt.Consolidate(); err != nil {
		return err
	}
	w := make([]float32, m.Params.Flat.Len())
	dev.ReadF32(w, m.Params.Flat) // all of it: must be committed
	return dev.Sync()
}

// TestFrozenOffloadOnVMM: a frozen model offloaded to the host
// (--offload-reference-model) holds about one layer's weights on the
// device during a pass and only unit-edge chunks between passes, touches
// no released memory, and Free brings every weight back.
func TestFrozenOffloadOnVMM(t *testing.T) {
	d, g := newFakeVMMDevice(t, 1<<30, vmmTestGran, 0)
	var bad violations
	g.unmapped = bad.add
	host, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(d, tinyOPT(), model.Options{DType: kernels.F32, ValueHead: true})
	if err != nil {
		t.Fatal(err)
	}
	m.InitRandom(3, 0.05)
	m.InitValueHead(4)
	want := read(d, m.Params.Flat)
	a, err := m.NewActs(2, 8, model.ActsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := train.OffloadFrozen(host, m, d)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Saves() {
		t.Fatal("Saves is false on a device with VMM")
	}
	units := train.ModelUnits(m)
	edges := int64(len(units)+1) * vmmTestGran
	if got := mappedBytes(g, m.Params.Flat); got > edges {
		t.Fatalf("%d bytes of weights mapped after the offload, want at most %d", got, edges)
	}
	// During a pass: the weights outside the layers and one layer.
	biggest := int64(units[0]+units[len(units)-1]+units[1])*4 + 3*edges
	var peak int64
	m.SetParamHook(&peakHook{inner: f, f: func() { peak = max(peak, mappedBytes(g, m.Params.Flat)) }})
	for range 2 {
		if err := m.Forward(a, model.Batch{IDs: make([]int32, 16)}); err != nil {
			t.Fatal(err)
		}
	}
	if peak == 0 || peak > biggest {
		t.Errorf("%d bytes of weights mapped at most during a pass, want at most %d (of %d)", peak, biggest, len(want)*4)
	}
	m.SetParamHook(f)
	if err := f.Free(); err != nil {
		t.Fatal(err)
	}
	if got := read(d, m.Params.Flat); !equalF32(got, want) {
		t.Fatal("the weights after Free differ from before the offload")
	}
	if len(bad.msg) > 0 {
		t.Fatalf("%d accesses to released memory, the first: %s", len(bad.msg), bad.msg[0])
	}
}

// peakHook wraps a ParamHook and samples after each Acquire.
type peakHook struct {
	inner model.ParamHook
	f     func()
}

func (h *peakHook) Acquire(part int, backward bool) error {
	err := h.inner.Acquire(part, backward)
	h.f()
	return err
}

func (h *peakHook) Release(part int, backward bool) error { return h.inner.Release(part, backward) }

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestZeROMissingCommitCaught: the checks above fail when a writer skips
// Commit (a unit released and then gathered by hand without it).
func TestZeROMissingCommitCaught(t *testing.T) {
	const ranks = 2
	var bad violations
	devs := make([]*Device, ranks)
	for r := range devs {
		d, g := newFakeVMMDevice(t, 1<<30, vmmTestGran, 0)
		g.unmapped = bad.add
		devs[r] = d
	}
	err := runStaged(t, devs, func(c dist.Comm, dev kernels.Device) error {
		lay, err := zero.NewLayout([]int{5000, 3000}, c.Size(), c.Rank())
		if err != nil {
			return err
		}
		x, err := zero.NewExchange(dev, c, lay, 0)
		if err != nil {
			return err
		}
		defer x.Free()
		buf, err := dev.Alloc(kernels.F32, lay.N)
		if err != nil {
			return err
		}
		x.Release(buf, 0)
		if err := x.Gather(buf, 0); err != nil { // commits: fine
			return err
		}
		x.Release(buf, 0)
		dev.Zero(buf.Slice(0, lay.Units[0].N)) // no Commit: caught
		return dev.Sync()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad.msg) == 0 || !strings.Contains(bad.msg[0], "a Commit is missing") {
		t.Fatalf("a write to released memory went unnoticed: %v", bad.msg)
	}
}

// runStaged runs f on in-process ranks, one fake GPU each: disttest's
// collectives read every rank's buffers from one goroutine, which a GPU
// device does not allow, so each collective goes through host copies on
// CPU devices (stagedComm).
func runStaged(t *testing.T, devs []*Device, f func(c dist.Comm, dev kernels.Device) error) error {
	hosts := make([]kernels.Device, len(devs))
	for r := range hosts {
		h, err := cpu.New(cpu.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		hosts[r] = h
	}
	return disttest.Run(hosts, func(c dist.Comm, host kernels.Device) error {
		return f(stagedComm{Comm: c, host: host, dev: devs[c.Rank()]}, devs[c.Rank()])
	})
}

// stagedComm runs a Comm over host buffers on device buffers: each
// collective copies its operands to the host (reading the device memory:
// the fake checks it is mapped) and its result back.
type stagedComm struct {
	dist.Comm
	host kernels.Device
	dev  *Device
}

func (s stagedComm) toHost(b kernels.Buffer) (kernels.Buffer, error) {
	h, err := s.host.Alloc(kernels.F32, b.Len())
	if err != nil {
		return nil, err
	}
	s.host.WriteF32(h, read(s.dev, b))
	return h, nil
}

func (s stagedComm) back(dst, h kernels.Buffer) {
	v := make([]float32, h.Len())
	s.host.ReadF32(v, h)
	s.dev.WriteF32(dst, v)
	s.host.Free(h)
}

func (s stagedComm) AllReduceSum(buf kernels.Buffer) error {
	h, err := s.toHost(buf)
	if err != nil {
		return err
	}
	err = s.Comm.AllReduceSum(h)
	s.back(buf, h)
	return err
}

func (s stagedComm) ReduceScatterSum(out, in kernels.Buffer) error {
	hi, err := s.toHost(in)
	if err != nil {
		return err
	}
	ho, _ := s.host.Alloc(kernels.F32, out.Len())
	err = s.Comm.ReduceScatterSum(ho, hi)
	s.host.Free(hi)
	s.back(out, ho)
	return err
}

func (s stagedComm) AllGather(out, in kernels.Buffer) error {
	hi, err := s.toHost(in)
	if err != nil {
		return err
	}
	ho, _ := s.host.Alloc(kernels.F32, out.Len())
	err = s.Comm.AllGather(ho, hi)
	s.host.Free(hi)
	s.back(out, ho)
	return err
}

func (s stagedComm) Broadcast(buf kernels.Buffer, root int) error {
	h, err := s.toHost(buf)
	if err != nil {
		return err
	}
	err = s.Comm.Broadcast(h, root)
	s.back(buf, h)
	return err
}
