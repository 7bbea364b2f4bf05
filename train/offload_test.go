package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/zero"
)

// offloadRun trains the lmStage on ranks in-process ranks at a ZeRO stage,
// with the optimizer state of ratio of the parameters on a second CPU
// device standing in for the host (ratio < 0: no offload), and returns
// rank 0's weights. failAt is a batch that fails (-1: none).
func offloadRun(t *testing.T, ranks int, stage zero.Stage, dt kernels.DType, cfg Config, ratio float64, failAt int) ([]float32, error) {
	t.Helper()
	devs := make([]kernels.Device, ranks)
	for i := range devs {
		devs[i] = must(cpu.New(cpu.Options{Threads: 1}))
	}
	out := make([][]float32, ranks)
	err := disttest.Run(devs, func(c dist.Comm, dev kernels.Device) error {
		s, tr := newLMStage(t, dev, dt, cfg.TrainSize, 0)
		if failAt >= 0 {
			s.failSeed = microSeed(cfg.Seed, failAt)
		}
		cfg := cfg
		cfg.Comm, cfg.ZeRO = c, stage
		var host *cpu.Device
		if ratio >= 0 {
			host = must(cpu.New(cpu.Options{Threads: 2}))
			cfg.Offload = Offload{Host: host, Ratio: ratio}
		}
		if _, err := Run(context.Background(), dev, cfg, s, tr); err != nil {
			return err
		}
		if host != nil && host.MemStats().Live != 0 {
			return fmt.Errorf("the host holds %d bytes after Run", host.MemStats().Live)
		}
		w := make([]float32, s.m.NumParams())
		dev.ReadF32(w, s.m.Params.Flat)
		out[c.Rank()] = w
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// bitsEqual reports the first element where a and b differ in bits, or -1.
func bitsEqual(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestOffloadMatchesDevice: with the optimizer state of 0, half or all
// of the parameters on the host, 10 AdamW steps with clipping give the
// weights of the same run without offload bit for bit, in fp32 and bf16
// (masters split in halves), on one process and on 2 ranks at ZeRO 1, 2
// and 3 (each rank offloads only its own ranges).
func TestOffloadMatchesDevice(t *testing.T) {
	cfg := Config{TrainSize: 20, MicroBatch: 2, GradAccum: 1, MaxSteps: 10, Schedule: "linear", Warmup: 2,
		ClipNorm: 0.05, AdamW: optim.DefaultAdamW, Seed: 5, Fingerprint: "offload", Log: zerolog.Nop()}
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		for _, par := range []struct {
			ranks int
			stage zero.Stage
		}{{1, 0}, {2, 1}, {2, 2}, {2, 3}} {
			want, err := offloadRun(t, par.ranks, par.stage, dt, cfg, -1, -1)
			if err != nil {
				t.Fatal(err)
			}
			for _, ratio := range []float64{0, 0.5, 1} {
				got, err := offloadRun(t, par.ranks, par.stage, dt, cfg, ratio, -1)
				if err != nil {
					t.Fatalf("%v, %d ranks, ZeRO-%d, ratio %v: %v", dt, par.ranks, par.stage, ratio, err)
				}
				if i := bitsEqual(got, want); i >= 0 {
					t.Errorf("%v, %d ranks, ZeRO-%d, ratio %v: weight %d is %v, without offload %v",
						dt, par.ranks, par.stage, ratio, i, got[i], want[i])
				}
			}
		}
	}
}

// TestOffloadClips: the comparison above clips (its gradient norm is
// above ClipNorm), so the host's AdamW takes the clipping scale too.
func TestOffloadClips(t *testing.T) {
	dev := must(cpu.New(cpu.Options{Threads: 1}))
	s, tr := newLMStage(t, dev, kernels.F32, 2, 0)
	opt, err := NewOptimizer(dev, tr, OptimizerConfig{AdamW: optim.DefaultAdamW, Schedule: "constant", Total: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Free()
	if _, err := s.TrainBatch([]int{0, 1}, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := opt.Norm(1); err != nil || n < 0.5 {
		t.Fatalf("gradient norm %v (%v): the offload test's clipping at 0.05 would not clip", n, err)
	}
}

// hostState reads every buffer of an optimizer's checkpoint state, the
// host's through the host device.
func hostState(dev kernels.Device, o *Optimizer) map[string][]float32 {
	bufs := map[string]kernels.Buffer{}
	o.StateBuffers(bufs, "")
	out := map[string][]float32{}
	for name, b := range bufs {
		d, b := bufferDevice(dev, b)
		v := make([]float32, b.Len())
		if b.DType() == kernels.I32 {
			h := make([]int32, b.Len())
			d.ReadI32(h, b)
			for i, x := range h {
				v[i] = math.Float32frombits(uint32(x))
			}
		} else {
			d.ReadF32(v, b)
		}
		out[name] = v
	}
	return out
}

// TestOffloadNonFinite: a step whose gradient norm is NaN is refused
// before anything moves: the device's parameters and the host's state
// (moments, master halves) are as they were, and the next finite step
// updates both.
func TestOffloadNonFinite(t *testing.T) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		dev := must(cpu.New(cpu.Options{Threads: 1}))
		host := must(cpu.New(cpu.Options{Threads: 1}))
		s, tr := newLMStage(t, dev, dt, 2, 0)
		opt, err := NewOptimizer(dev, tr, OptimizerConfig{AdamW: optim.DefaultAdamW, Schedule: "constant", Total: 3,
			ClipNorm: 1, Offload: Offload{Host: host, Ratio: 0.5}})
		if err != nil {
			t.Fatal(err)
		}
		if opt.HostHeld() == 0 {
			t.Fatal("nothing offloaded")
		}
		step := func(poison bool) error {
			if _, err := s.TrainBatch([]int{0, 1}, 1); err != nil {
				t.Fatal(err)
			}
			if poison {
				g := tr.Grads[0]
				dev.WriteF32(g.Slice(0, 1), []float32{float32(math.NaN())})
			}
			_, err := opt.Step(0, 1)
			if err != nil {
				opt.ZeroGrads()
			}
			return err
		}
		if err := step(false); err != nil {
			t.Fatal(err)
		}
		before := hostState(dev, opt)
		var nf *NonFiniteError
		if err := step(true); !errors.As(err, &nf) {
			t.Fatalf("%v: a NaN gradient gave %v, want a NonFiniteError", dt, err)
		}
		after := hostState(dev, opt)
		for name, v := range before {
			if i := bitsEqual(after[name], v); i >= 0 {
				t.Errorf("%v: %s[%d] changed in a refused step: %v -> %v", dt, name, i, v[i], after[name][i])
			}
		}
		if err := step(false); err != nil {
			t.Fatal(err)
		}
		moved := hostState(dev, opt)
		for _, name := range []string{"param.model", "adam.m.model@0"} {
			if bitsEqual(moved[name], before[name]) < 0 {
				t.Errorf("%v: %s did not change in a finite step", dt, name)
			}
		}
		opt.Free()
		if host.MemStats().Live != 0 {
			t.Errorf("%v: the host holds %d bytes after Free", dt, host.MemStats().Live)
		}
	}
}

// TestOffloadResume: a run checkpointed with offload resumes without it,
// and the reverse, to the weights of an uninterrupted run without offload
// bit for bit: the offloaded state is saved under the names the device's
// has, and the host's copy of the parameters is taken again on resume.
func TestOffloadResume(t *testing.T) {
	cfg := Config{TrainSize: 20, MicroBatch: 2, GradAccum: 1, MaxSteps: 10, Schedule: "linear", Warmup: 2,
		ClipNorm: 0.05, AdamW: optim.DefaultAdamW, Seed: 5, SaveEvery: 1, Fingerprint: "offload", Log: zerolog.Nop()}
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		for _, tc := range []struct {
			name          string
			first, second float64
			ranks         int
			stage         zero.Stage
		}{
			{"offload then none", 0.5, -1, 1, 0},
			{"none then offload", -1, 1, 1, 0},
			{"offload then partial offload, ZeRO-3 on 2 ranks", 1, 0.3, 2, 3},
			{"ZeRO-2 offload then none, 2 ranks", 0.5, -1, 2, 2},
		} {
			c := cfg
			c.Dir = t.TempDir()
			want, err := offloadRun(t, tc.ranks, tc.stage, dt, c, -1, -1)
			if err != nil {
				t.Fatal(err)
			}
			c.Dir = t.TempDir()
			if _, err := offloadRun(t, tc.ranks, tc.stage, dt, c, tc.first, 6); err == nil {
				t.Fatalf("%s: the failing batch did not stop the run", tc.name)
			}
			if !HasCheckpoint(c.Dir) {
				t.Fatalf("%s: no checkpoint", tc.name)
			}
			c.Resume = true
			got, err := offloadRun(t, tc.ranks, tc.stage, dt, c, tc.second, -1)
			if err != nil {
				t.Fatalf("%v, %s: %v", dt, tc.name, err)
			}
			if i := bitsEqual(got, want); i >= 0 {
				t.Errorf("%v, %s: weight %d is %v, uninterrupted without offload %v", dt, tc.name, i, got[i], want[i])
			}
		}
	}
}

// TestSplitOffload: the cut takes the first ratio of the elements in flat
// order, at an even element, and the two parts cover every segment once.
func TestSplitOffload(t *testing.T) {
	dev := must(cpu.New(cpu.Options{Threads: 1}))
	_, tr := newLMStage(t, dev, kernels.BF16, 1, 0)
	flats, at, err := tr.flats()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, g := range tr.Groups {
		for _, s := range g.Segments {
			total += s.Params.Len()
		}
	}
	for _, ratio := range []float64{0.1, 0.37, 0.5, 0.999, 1} {
		devGroups, devAt, host, _ := splitOffload(flats, tr.Groups, at, ratio)
		covered := make([]int, flats[0].Params.Len())
		hostN := 0
		for _, p := range host {
			if p.at.Off%2 != 0 {
				t.Errorf("ratio %v: host piece at odd element %d", ratio, p.at.Off)
			}
			for i := range p.params.Len() {
				covered[p.at.Off+i]++
			}
			hostN += p.params.Len()
		}
		maxHost := 0
		for g, grp := range devGroups {
			for s, seg := range grp.Segments {
				a := devAt[g][s]
				if a.Off%2 != 0 {
					t.Errorf("ratio %v: device segment at odd element %d", ratio, a.Off)
				}
				for i := range seg.Params.Len() {
					covered[a.Off+i]++
				}
			}
		}
		for _, p := range host {
			maxHost = max(maxHost, p.at.Off+p.params.Len())
		}
		for i, n := range covered {
			if n != 1 {
				t.Fatalf("ratio %v: element %d covered %d times", ratio, i, n)
			}
		}
		if want := ratio * float64(total); math.Abs(float64(hostN)-want) > 2 {
			t.Errorf("ratio %v: %d of %d elements on the host, want about %.0f", ratio, hostN, total, want)
		}
		if maxHost != hostN { // a prefix of the flat
			t.Errorf("ratio %v: the host pieces end at %d but hold %d elements: not a prefix", ratio, maxHost, hostN)
		}
	}
}
