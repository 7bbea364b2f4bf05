package model

import (
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// TestMemoryFunctionsMatchAllocations checks ParamCount, ActsBytes and
// CacheBytes against what New, NewActs and NewCache allocate, for models
// that take every branch of the layouts and every ActsOptions.
func TestMemoryFunctionsMatchAllocations(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range actsModels(t, dev) {
		for _, v := range []struct {
			drop float64
			dt   kernels.DType
		}{{0, kernels.F32}, {0.1, kernels.F32}, {0, kernels.BF16}, {0.1, kernels.BF16}} {
			drop := v.drop
			cfg := *m.Config
			cfg.Dropout = drop
			vh := m.HasValueHead()
			mm, err := New(dev, &cfg, Options{ValueHead: vh, DType: v.dt})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ParamCount(&cfg, vh), mm.NumParams(); got != want {
				t.Errorf("%s: ParamCount %d, NumParams %d", name, got, want)
			}
			if got, want := ParamCount(&cfg, false), ParamCount(&cfg, true)-cfg.WordEmbedProjDim; got != want {
				t.Errorf("%s: ParamCount without a value head %d, want %d", name, got, want)
			}
			if got, want := LargestParam(&cfg, vh), cfg.VocabSize*cfg.WordEmbedProjDim; got != want {
				t.Errorf("%s: LargestParam %d, want the token embedding's %d", name, got, want)
			}
			for _, bt := range [][2]int{{1, 1}, {2, 7}, {3, 16}} {
				for k := range 16 {
					o := ActsOptions{Train: k&1 != 0, Dropout: k&2 != 0, Checkpoint: k&4 != 0, NoLogits: k&8 != 0}
					a, err := mm.NewActs(bt[0], bt[1], o)
					if err != nil {
						t.Fatal(err)
					}
					if got, want := ActsBytes(&cfg, vh, bt[0], bt[1], o, mm.WeightsInfo()), a.Bytes(); got != want {
						t.Errorf("%s %v dropout %v %dx%d %+v: ActsBytes %d, NewActs holds %d", name, v.dt, drop, bt[0], bt[1], o, got, want)
					}
					a.Free()
				}
			}
			for _, c := range [][3]int{{1, 4, 1}, {2, 9, 5}, {3, 16, 16}} {
				kc, err := mm.NewCache(c[0], c[1], c[2])
				if err != nil {
					t.Fatal(err)
				}
				if got, want := CacheBytes(&cfg, c[0], c[1], c[2]), kc.Bytes(); got != want {
					t.Errorf("%s: CacheBytes%v = %d, NewCache holds %d", name, c, got, want)
				}
				kc.Free()
			}
			mm.Free()
		}
	}
}

// TestActsBytesScales shows what gradient checkpointing and NoLogits save
// on an opt-125m-shaped model: most of the layers' activations, and the
// [N,V] logits.
func TestActsBytesScales(t *testing.T) {
	cfg, err := PresetConfig("opt-125m")
	if err != nil {
		t.Fatal(err)
	}
	full := ActsBytes(cfg, false, 4, 128, ActsOptions{Train: true}, WeightsInfo{})
	noLogits := ActsBytes(cfg, false, 4, 128, ActsOptions{Train: true, NoLogits: true}, WeightsInfo{})
	ckpt := ActsBytes(cfg, false, 4, 128, ActsOptions{Train: true, Checkpoint: true, NoLogits: true}, WeightsInfo{})
	if !(ckpt < noLogits/4) {
		t.Errorf("checkpointing keeps %d of %d bytes", ckpt, noLogits)
	}
	logits := 4 * 128 * (cfg.VocabSize + 1) * kernels.F32.Size() // logits and losses
	if full-noLogits != logits {
		t.Errorf("NoLogits saves %d bytes, want %d", full-noLogits, logits)
	}
}
