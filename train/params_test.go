package train

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
)

// TestModelTrainableOnlyLoRA checks that training only the adapters (and
// the value head) allocates only the value head's gradient, and trains
// exactly as it does on a model whose full gradients were allocated before
// (the layout ModelTrainable used to build on).
func TestModelTrainableOnlyLoRA(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	setup := func(fullFirst bool) (*model.Model, *lora.LoRA, Trainable) {
		m, err := model.Load(dev, filepath.Join("..", "model", "testdata", "golden", "preln"), model.LoadOptions{ValueHead: "yes", ValueHeadSeed: 5})
		if err != nil {
			t.Fatal(err)
		}
		lo, err := lora.New(m, lora.Config{Dim: 4}, 9)
		if err != nil {
			t.Fatal(err)
		}
		m.SetAdapter(lo)
		if fullFirst {
			m.AllocGrads()
		}
		return m, lo, must(ModelTrainable(m, ParamOptions{LR: 1e-2, WeightDecay: 0.1, LoRA: lo, LoRALR: 5e-2, OnlyLoRA: true}))
	}
	m, lo, tr := setup(false)
	ref, refLo, refTr := setup(true)
	P := m.Config.WordEmbedProjDim
	if !m.FreezeBase || m.Grads.Flat != nil || m.GradElems() != P {
		t.Fatalf("frozen base: %d gradient elements allocated, want the value head's %d", m.GradElems(), P)
	}
	if ref.GradElems() != ref.NumParams() {
		t.Fatalf("gradients allocated before ModelTrainable: %d elements, want %d kept", ref.GradElems(), ref.NumParams())
	}
	for _, x := range []Trainable{tr, refTr} {
		var names []string
		for _, g := range x.Groups {
			names = append(names, g.Name)
		}
		if !slices.Equal(names, []string{"decay", "lora"}) || len(x.Groups[0].Segments) != 1 ||
			x.Groups[0].Segments[0].Params.Len() != P || x.Groups[0].Segments[0].Grads.Len() != P {
			t.Fatalf("groups %v, want decay = [v_head] and lora", names)
		}
		if len(x.Grads) != 2 || x.Grads[0].Len() != P || x.Grads[1].Len() != lo.NumParams() {
			t.Fatalf("%d gradient buffers, want v_head's and the adapters'", len(x.Grads))
		}
	}

	rng := rand.New(rand.NewPCG(1, 2))
	const B, T = 2, 6
	ids := make([]int32, B*T)
	for i := range ids {
		ids[i] = int32(3 + rng.IntN(m.Config.VocabSize-3))
	}
	dv := make([]float32, B*T)
	for i := range dv {
		dv[i] = float32(rng.NormFloat64())
	}
	in := model.Batch{IDs: ids, Targets: model.ShiftLabels(ids, B, T)}
	run := func(m *model.Model, lo *lora.LoRA, tr Trainable) ([]float32, []float32) {
		opt, err := optim.NewAdamW(dev, tr.Groups, optim.DefaultAdamW)
		if err != nil {
			t.Fatal(err)
		}
		var a *model.Acts
		for range 3 {
			for _, g := range tr.Grads {
				dev.Zero(g)
			}
			a = must(m.ReuseActs(a, B, T, model.ActsOptions{Train: true}))
			if err := m.Forward(a, in); err != nil {
				t.Fatal(err)
			}
			g := m.MeanLossGrad(a)
			g.DValues = dv
			if err := m.Backward(a, g); err != nil {
				t.Fatal(err)
			}
			opt.Step(1, 1)
		}
		p, l := make([]float32, m.NumParams()), make([]float32, lo.NumParams())
		dev.ReadF32(p, m.Params.Flat)
		dev.ReadF32(l, lo.Params)
		return p, l
	}
	p0 := make([]float32, m.NumParams())
	dev.ReadF32(p0, m.Params.Flat)
	p, l := run(m, lo, tr)
	rp, rl := run(ref, refLo, refTr)
	if !slices.Equal(p, rp) || !slices.Equal(l, rl) {
		t.Error("training with value-head-only gradients differs from training with full ones")
	}
	off, _, _ := m.ParamRange("v_head.weight")
	if !slices.Equal(p[:off], p0[:off]) || slices.Equal(p[off:], p0[off:]) {
		t.Error("only the value head of the model should have changed")
	}

	// Training everything again afterwards allocates full gradients.
	tr = must(ModelTrainable(m, ParamOptions{LR: 1e-2}))
	if m.FreezeBase || m.GradElems() != m.NumParams() || len(tr.Grads) != 1 || tr.Grads[0].Len() != m.NumParams() {
		t.Errorf("unfrozen: %d gradient elements, %d buffers", m.GradElems(), len(tr.Grads))
	}
}
