package train

import (
	"math/rand/v2"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
)

// TestOffloadFrozen: a frozen model whose weights live on the host
// (--offload-reference-model, --offload-reward-model) gives the logits
// and values of the resident model bit for bit, pass after pass, holds
// no weights on the device between passes, and gets them back whole from
// Free. fp32 and bf16, with a value head (the reward model's scores).
func TestOffloadFrozen(t *testing.T) {
	cfg := &model.Config{ModelType: "opt", VocabSize: 96, HiddenSize: 32, FFNDim: 64, NumLayers: 3, NumHeads: 4,
		MaxPositions: 16, WordEmbedProjDim: 32, DoLayerNormBefore: true, EnableBias: true,
		LayerNormElementwiseAffine: true, Activation: "relu", TieWordEmbeddings: true}
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]int32, 2*8)
	for i := range ids {
		ids[i] = int32(r.IntN(cfg.VocabSize))
	}
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		dev := must(cpu.New(cpu.Options{Threads: 1}))
		host := must(cpu.New(cpu.Options{Threads: 1}))
		m, err := model.New(dev, cfg, model.Options{DType: dt, ValueHead: true})
		if err != nil {
			t.Fatal(err)
		}
		m.InitRandom(3, 0.05)
		m.InitValueHead(4)
		a, err := m.NewActs(2, 8, model.ActsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pass := func() (logits, values []float32) {
			t.Helper()
			if err := m.Forward(a, model.Batch{IDs: ids}); err != nil {
				t.Fatal(err)
			}
			return must(m.Logits(a)), must(m.Values(a))
		}
		wantL, wantV := pass()
		weights := make([]float32, m.NumParams())
		dev.ReadF32(weights, m.Params.Flat)

		off, err := OffloadFrozen(host, m, dev)
		if err != nil {
			t.Fatal(err)
		}
		if !off.Saves() || off.HostBytes() != int64(m.NumParams()*dt.Size()) {
			t.Fatalf("%v: saves %v, %d bytes on the host", dt, off.Saves(), off.HostBytes())
		}
		for k := range 2 {
			l, v := pass()
			if i := bitsEqual(l, wantL); i >= 0 {
				t.Errorf("%v, pass %d: logit %d is %v, resident %v", dt, k, i, l[i], wantL[i])
			}
			if i := bitsEqual(v, wantV); i >= 0 {
				t.Errorf("%v, pass %d: value %d is %v, resident %v", dt, k, i, v[i], wantV[i])
			}
			between := make([]float32, m.NumParams())
			dev.ReadF32(between, m.Params.Flat)
			for i, w := range between {
				if w != 0 {
					t.Fatalf("%v: weight %d is on the device between passes", dt, i)
				}
			}
		}
		if err := off.Free(); err != nil {
			t.Fatal(err)
		}
		back := make([]float32, m.NumParams())
		dev.ReadF32(back, m.Params.Flat)
		if i := bitsEqual(back, weights); i >= 0 || m.Hook != nil || host.MemStats().Live != 0 {
			t.Errorf("%v: after Free weight %d differs, hook %v, %d host bytes", dt, i, m.Hook, host.MemStats().Live)
		}
	}
}
