package sft

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/tensor"
	"github.com/gochat-ai/gochat/train"
)

// fixedBatches feeds the loop's micro-batches in the golden file's order
// (the loop shuffles; the golden step was computed on fixed micro-batches).
type fixedBatches struct {
	st   *Stage
	n    int // examples per micro-batch
	call int
}

func (f *fixedBatches) TrainBatch(_ []int, seed uint64) (train.BatchStats, error) {
	idx := make([]int, f.n)
	for i := range idx {
		idx[i] = f.call*f.n + i
	}
	f.call++
	return f.st.TrainBatch(idx, seed)
}

func (f *fixedBatches) Evaluate() (*train.Eval, error) { return &train.Eval{}, nil }

func readAll(t *testing.T, ck *tensor.Checkpoint, name string) []float32 {
	t.Helper()
	info, ok := ck.Info(name)
	if !ok {
		t.Fatalf("golden tensor %s missing", name)
	}
	out := make([]float32, info.Numel())
	if err := ck.ReadF32(name, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func readInts(t *testing.T, ck *tensor.Checkpoint, name string) []int32 {
	t.Helper()
	v, err := ck.ReadI64(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func relErr(got, want []float32) float64 {
	var d, r float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		r = math.Max(r, math.Abs(float64(want[i])))
	}
	return d / math.Max(r, 1e-30)
}

// TestOneStepMatchesPyTorch runs one optimizer step of the real loop (SFT
// stage, parameter groups, clipping, schedule, AdamW) and compares every
// weight with PyTorch's (scripts/gen_stage_golden.py).
func TestOneStepMatchesPyTorch(t *testing.T) {
	for _, c := range []struct {
		name       string
		micro      int
		lora, ckpt bool
	}{
		{"plain", 1, false, false},
		{"plain", 1, false, true},
		{"accum2", 2, false, false},
		{"lora", 1, true, false},
	} {
		t.Run(fmt.Sprintf("%s/checkpoint=%v", c.name, c.ckpt), func(t *testing.T) {
			dir := filepath.Join("testdata", c.name)
			dev, _ := cpu.New(cpu.Options{Threads: 2})
			m, err := model.Load(dev, dir, model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ck, err := tensor.Open(filepath.Join(dir, "step.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			set := &data.Set{Phase: data.PhaseSFT}
			promptLens := []int{2, 3, 1}
			for i := range c.micro {
				ids := readInts(t, ck, fmt.Sprintf("mb%d.ids", i))
				mask := readInts(t, ck, fmt.Sprintf("mb%d.mask", i))
				const T = 8
				for b := range 3 {
					n := 0
					for _, x := range mask[b*T : (b+1)*T] {
						n += int(x)
					}
					set.Examples = append(set.Examples, data.Example{IDs: ids[b*T : b*T+n], PromptLen: promptLens[b]})
				}
			}
			var lo *lora.LoRA
			if c.lora {
				if lo, err = lora.New(m, lora.Config{Dim: 4}, 1); err != nil {
					t.Fatal(err)
				}
				for _, tn := range lo.Tensors() {
					dev.WriteF32(tn.Buf, readAll(t, ck, "lora0."+tn.Name))
				}
				m.SetAdapter(lo)
			}
			st, err := New(m, set, nil, Options{MaxSeqLen: 8, PAD: 1, ResponseOnly: true, EvalBatch: 3, Checkpoint: c.ckpt})
			if err != nil {
				t.Fatal(err)
			}
			tr := must(train.ModelTrainable(m, train.ParamOptions{LR: 1e-3, WeightDecay: 0.1, LoRA: lo, LoRALR: 5e-3}))
			cfg := train.Config{TrainSize: len(set.Examples), MicroBatch: 3, GradAccum: c.micro, MaxSteps: 1,
				Schedule: "cosine", ClipNorm: 1, AdamW: optim.DefaultAdamW, Seed: 1, Log: zerolog.Nop()}
			if _, err := train.Run(context.Background(), dev, cfg, &fixedBatches{st: st, n: 3}, tr); err != nil {
				t.Fatal(err)
			}
			for _, name := range m.ParamNames() {
				view, _ := m.ParamView(m.Params, name)
				got := make([]float32, view.Len())
				dev.ReadF32(got, view)
				if e := relErr(got, readAll(t, ck, "after."+name)); e > 1e-5 {
					t.Errorf("weight %s after the step: relative error %.3g > 1e-5", name, e)
				}
			}
			if lo != nil {
				for _, tn := range lo.Tensors() {
					got := make([]float32, tn.Buf.Len())
					dev.ReadF32(got, tn.Buf)
					if e := relErr(got, readAll(t, ck, "after.lora."+tn.Name)); e > 1e-5 {
						t.Errorf("LoRA %s after the step: relative error %.3g > 1e-5", tn.Name, e)
					}
				}
			}
		})
	}
}
