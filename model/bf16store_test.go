package model

import (
	"math/rand/v2"
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
