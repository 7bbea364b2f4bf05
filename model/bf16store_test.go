package model

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// TestBF16StoreBitIdentical: with BF16 weights, training activations keep
// ln1, ln2, atty and fchAct in BF16 (the bf16 store), and every output and
// gradient is bit for bit what keeping them F32 (F32Acts) gives — pre-LN,
// post-LN and GELU, with and without dropout, on both the native and the
// portable bf16 path — in fewer bytes, which ActsBytes predicts. Gradient
// checkpointing, an adapter and F32 weights turn the store off.
func TestBF16StoreBitIdentical(t *testing.T) {
	for _, isa := range []string{"", "generic"} {
		dev, err := cpu.New(cpu.Options{Threads: 2, ISA: isa})
		if err != nil {
			t.Fatal(err)
		}
		for name, m32 := range actsModels(t, dev) {
			vh := m32.HasValueHead()
			m := must(New(dev, m32.Config, Options{ValueHead: vh, DType: kernels.BF16}))
			dev.Copy(m.Params.Flat, m32.Params.Flat)
			if err := m.AllocGrads(); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(5, 6))
			for _, opts := range []ActsOptions{{Train: true}, {Train: true, Dropout: true}, {Train: true, Dropout: true, NoLogits: true}} {
				in, dv := actsBatch(rng, m, 3, 9)
				kept := must(m.NewActs(3, 9, opts))
				f32opts := opts
				f32opts.F32Acts = true
				all := must(m.NewActs(3, 9, f32opts))
				if !kept.store || all.store {
					t.Fatalf("%s %+v: store %v, with F32Acts %v", name, opts, kept.store, all.store)
				}
				if got := ActsBytes(m.Config, vh, 3, 9, opts, m.WeightsInfo()); got != kept.Bytes() || got >= all.Bytes() {
					t.Errorf("%s %+v: ActsBytes %d, the store holds %d, F32 activations %d", name, opts, got, kept.Bytes(), all.Bytes())
				}
				r1, r2 := runPass(t, m, kept, in, dv), runPass(t, m, all, in, dv)
				if d := r1.diff(r2); d != "" {
					t.Errorf("%s isa=%q %+v: %s differ between the bf16 store and F32 activations", name, isa, opts, d)
				}
				kept.Free()
				all.Free()
			}
			for _, c := range []struct {
				what string
				w    WeightsInfo
				o    ActsOptions
			}{
				{"gradient checkpointing", WeightsInfo{DType: kernels.BF16}, ActsOptions{Train: true, Checkpoint: true}},
				{"an adapter", WeightsInfo{DType: kernels.BF16, Adapter: true}, ActsOptions{Train: true}},
				{"F32 weights", WeightsInfo{DType: kernels.F32}, ActsOptions{Train: true}},
				{"no training", WeightsInfo{DType: kernels.BF16}, ActsOptions{}},
			} {
				if bf16Store(c.w, c.o) {
					t.Errorf("%s keeps the bf16 store", c.what)
				}
			}
			m.Free()
		}
	}
}

// TestLlamaBF16StoreBitIdentical is TestBF16StoreBitIdentical for the LLaMA
// family (GQA with llama3 rope scaling, Qwen2's biases, Qwen3's q/k norm
// and head_dim ≠ H/NH): the bf16 store keeps the RMSNorm outputs, the
// attention output and silu(gate)·up in BF16, and every output and gradient
// is bit for bit that of F32 activations, on both bf16 paths, also when a
// reused set shrinks and grows. The store saves exactly half of those
// tensors' bytes, less its two F32 working buffers, as ActsBytes says.
func TestLlamaBF16StoreBitIdentical(t *testing.T) {
	for _, isa := range []string{"", "generic"} {
		dev := must(cpu.New(cpu.Options{Threads: 2, ISA: isa}))
		for _, name := range llamaCases {
			m := must(Load(dev, filepath.Join("testdata", "llama", name), LoadOptions{DType: kernels.BF16, ValueHead: "yes", ValueHeadSeed: 3}))
			must(0, m.AllocGrads())
			c := m.Config
			H, F, A, L := c.HiddenSize, c.FFNDim, c.NumHeads*c.HeadSize(), c.NumLayers
			rng := rand.New(rand.NewPCG(7, 8))
			for _, opts := range []ActsOptions{{Train: true}, {Train: true, NoLogits: true}} {
				f32opts := opts
				f32opts.F32Acts = true
				var kept, all *Acts
				for _, bt := range [][2]int{{3, 9}, {2, 5}, {4, 11}} {
					b, tt := bt[0], bt[1]
					kept, all = must(m.ReuseActs(kept, b, tt, opts)), must(m.ReuseActs(all, b, tt, f32opts))
					if !kept.store || all.store {
						t.Fatalf("%s %+v: store %v, with F32Acts %v", name, opts, kept.store, all.store)
					}
					n := b * tt
					saved := L*(2*n*H+n*A+n*F)*2 - n*(max(H, A)+F)*4
					got, f32 := ActsBytes(c, true, b, tt, opts, m.WeightsInfo()), ActsBytes(c, true, b, tt, f32opts, m.WeightsInfo())
					if f32-got != saved {
						t.Errorf("%s %dx%d %+v: the store saves %d bytes, want %d", name, b, tt, opts, f32-got, saved)
					}
					in, dv := actsBatch(rng, m, b, tt)
					r1, r2 := runPass(t, m, kept, in, dv), runPass(t, m, all, in, dv)
					if d := r1.diff(r2); d != "" {
						t.Errorf("%s isa=%q %dx%d %+v: %s differ between the bf16 store and F32 activations", name, isa, b, tt, opts, d)
					}
				}
				kept.Free()
				all.Free()
			}
			m.Free()
		}
	}
}
