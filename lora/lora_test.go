package lora

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
)

func load(t *testing.T, name string) *model.Model {
	t.Helper()
	dev, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "model", "testdata", "golden", name)
	if l, ok := strings.CutPrefix(name, "llama/"); ok {
		dir = filepath.Join("..", "model", "testdata", "llama", l)
	}
	m, err := model.Load(dev, dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func batch(m *model.Model, b, tt int, seed uint64) model.Batch {
	rng := rand.New(rand.NewPCG(seed, 1))
	ids, mask := make([]int32, b*tt), make([]int32, b*tt)
	for i := range ids {
		ids[i] = int32(3 + rng.IntN(m.Config.VocabSize-3))
		mask[i] = 1
	}
	for j := 0; j < 2; j++ { // left-pad row 0
		ids[j], mask[j] = int32(m.Config.PadTokenID), 0
	}
	labels := slices.Clone(ids)
	for i := range labels {
		if mask[i] == 0 {
			labels[i] = model.IgnoreIndex
		}
	}
	return model.Batch{IDs: ids, Mask: mask, Targets: model.ShiftLabels(labels, b, tt)}
}

func randomize(lo *LoRA, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	h := make([]float32, lo.NumParams())
	for i := range h {
		h[i] = float32(rng.NormFloat64() * 0.3)
	}
	lo.dev.WriteF32(lo.Params, h)
}

func lossOf(t *testing.T, m *model.Model, b model.Batch, bs, tt int) (float32, []float32) {
	t.Helper()
	a := must(m.NewActs(bs, tt, model.ActsOptions{}))
	if err := m.Forward(a, b); err != nil {
		t.Fatal(err)
	}
	l, _, _ := m.MeanLoss(a)
	logits, _ := m.Logits(a)
	return l, logits
}

func TestSelection(t *testing.T) {
	m := load(t, "preln")
	for _, c := range []struct {
		pattern string
		want    int
	}{
		{"", 12}, {"decoder.layers.", 12}, {"q_proj", 2}, {"layers.1.self_attn", 4}, {"fc", 4},
	} {
		lo, err := New(m, Config{Dim: 4, ModuleName: c.pattern}, 1)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		if len(lo.Adapted()) != c.want {
			t.Errorf("%q adapts %v, want %d layers", c.pattern, lo.Adapted(), c.want)
		}
	}
	if _, err := New(m, Config{Dim: 4, ModuleName: "mlp.dense"}, 1); err == nil || !strings.Contains(err.Error(), "matches no linear layer") {
		t.Errorf("pattern matching nothing: %v", err)
	}
}

// testModels are OPT's (pre-LN, post-LN) and the LLaMA family's tiny
// golden models (GQA q/k/v of unequal widths, fused gate|up), with a
// pattern that selects every decoder linear layer of each.
var testModels = []struct{ name, all string }{
	{"preln", "decoder.layers."}, {"postln", "decoder.layers."},
	{"llama/llama", "layers."}, {"llama/qwen2", "model.layers."}, {"llama/qwen3", "layers."},
}

// TestLlamaSelection: the LLaMA family's module names (model.layers.N.*)
// and sites; DeepSpeed-Chat's default pattern matches OPT's names only, and
// the error shows the model's own.
func TestLlamaSelection(t *testing.T) {
	m := load(t, "llama/qwen3")
	for _, c := range []struct {
		pattern string
		want    int
	}{
		{"layers.", 14}, {"model.layers.", 14}, {"q_proj", 2}, {"self_attn", 8}, {"mlp", 6}, {"o_proj", 2}, {"layers.1.mlp.gate", 1},
	} {
		lo, err := New(m, Config{Dim: 4, ModuleName: c.pattern}, 1)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		if len(lo.Adapted()) != c.want {
			t.Errorf("%q adapts %v, want %d layers", c.pattern, lo.Adapted(), c.want)
		}
	}
	// The default selects every linear layer of the decoder layers, as
	// "layers." does; OPT's "decoder.layers." names no LLaMA module, and
	// the error shows the names there are.
	if lo, err := New(m, Config{Dim: 4}, 1); err != nil || len(lo.Adapted()) != 14 {
		t.Errorf("default pattern on a LLaMA-family model: %v", err)
	}
	_, err := New(m, Config{Dim: 4, ModuleName: "decoder.layers."}, 1)
	if err == nil || !strings.Contains(err.Error(), "model.layers.0.self_attn.q_proj") || !strings.Contains(err.Error(), "model.layers.0.mlp.down_proj") {
		t.Errorf("OPT's pattern on a LLaMA-family model: %v", err)
	}
}

func TestZeroInitChangesNothingAndFuseMatches(t *testing.T) {
	for _, tm := range testModels {
		name := tm.name
		m := load(t, name)
		b := batch(m, 2, 6, 1)
		_, base := lossOf(t, m, b, 2, 6)
		lo, err := New(m, Config{Dim: 3, ModuleName: tm.all}, 7)
		if err != nil {
			t.Fatal(err)
		}
		m.SetAdapter(lo)
		_, got := lossOf(t, m, b, 2, 6)
		if !slices.Equal(base, got) {
			t.Errorf("%s: zero-initialised LoRA changed the logits", name)
		}
		randomize(lo, 3)
		_, adapted := lossOf(t, m, b, 2, 6)
		// Fused weights in a copy, no adapter: the same function.
		saved := must(m.Dev.Alloc(kernels.F32, m.NumParams()))
		m.Dev.Copy(saved, m.Params.Flat)
		lo.Fuse(m.Params.Flat)
		m.SetAdapter(nil)
		_, fused := lossOf(t, m, b, 2, 6)
		var maxDiff, maxRef float64
		for i := range fused {
			maxDiff = math.Max(maxDiff, math.Abs(float64(fused[i]-adapted[i])))
			maxRef = math.Max(maxRef, math.Abs(float64(adapted[i])))
		}
		if maxDiff > 1e-5*maxRef {
			t.Errorf("%s: fused logits differ from adapter logits by %g (scale %g)", name, maxDiff, maxRef)
		}
		if slices.Equal(adapted, base) {
			t.Errorf("%s: random LoRA weights had no effect", name)
		}
		m.Dev.Copy(m.Params.Flat, saved)
	}
}

// TestGradients checks the adapter gradients (and the frozen base) with
// directional finite differences of the mean loss in float32.
func TestGradients(t *testing.T) {
	for _, tm := range testModels {
		name := tm.name
		m := load(t, name)
		b := batch(m, 2, 6, 2)
		lo, err := New(m, Config{Dim: 4, Scaling: 2, ModuleName: tm.all}, 5)
		if err != nil {
			t.Fatal(err)
		}
		randomize(lo, 4)
		m.SetAdapter(lo)
		m.FreezeBase = true
		m.AllocGrads()
		m.ZeroGrads()
		lo.ZeroGrads()
		a := must(m.NewActs(2, 6, model.ActsOptions{Train: true, Checkpoint: name == "postln" || name == "llama/qwen2"}))
		if err := m.Forward(a, b); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(a, m.MeanLossGrad(a)); err != nil {
			t.Fatal(err)
		}
		g := make([]float32, lo.NumParams())
		lo.dev.ReadF32(g, lo.Grads)
		// A frozen base has no gradient buffer: AllocGrads with FreezeBase
		// allocates only the value head's (postln has one).
		if m.Grads.Flat != nil || m.GradElems() > m.Config.WordEmbedProjDim {
			t.Fatalf("%s: frozen base has %d gradient elements", name, m.GradElems())
		}
		p0 := make([]float32, lo.NumParams())
		lo.dev.ReadF32(p0, lo.Params)
		rng := rand.New(rand.NewPCG(9, 9))
		for trial := range 3 {
			v := make([]float32, len(p0)) // a random unit direction
			var norm, gv float64
			for i := range v {
				v[i] = float32(rng.NormFloat64())
				norm += float64(v[i]) * float64(v[i])
			}
			for i := range v {
				v[i] /= float32(math.Sqrt(norm))
				gv += float64(v[i]) * float64(g[i])
			}
			const h = 5e-3
			at := func(s float32) float64 {
				p := make([]float32, len(p0))
				for i := range p {
					p[i] = p0[i] + s*v[i]
				}
				lo.dev.WriteF32(lo.Params, p)
				l, _ := lossOf(t, m, b, 2, 6)
				return float64(l)
			}
			fd := (at(h) - at(-h)) / (2 * h)
			if math.Abs(fd-gv) > 5e-4+1e-2*math.Abs(gv) { // float32 loss: FD noise ~3e-4
				t.Errorf("%s trial %d: directional derivative %v, finite difference %v", name, trial, gv, fd)
			}
		}
		lo.dev.WriteF32(lo.Params, p0)
	}
}

// TestSizeMatchesNew checks Size and ActsBytes against what New and
// Reserve allocate.
func TestSizeMatchesNew(t *testing.T) {
	m := load(t, "preln")
	for _, pattern := range []string{"", "q_proj", "layers.1.self_attn", "fc"} {
		for _, dim := range []int{1, 4} {
			cfg := Config{Dim: dim, ModuleName: pattern}
			params, layers, err := Size(m.Config, cfg)
			if err != nil {
				t.Fatal(err)
			}
			before := m.Dev.MemStats().Live
			lo, err := New(m, cfg, 1)
			if err != nil {
				t.Fatal(err)
			}
			if params != lo.NumParams() || layers != len(lo.Adapted()) {
				t.Errorf("%q r=%d: Size %d params on %d layers, New %d on %d", pattern, dim, params, layers, lo.NumParams(), len(lo.Adapted()))
			}
			if got, want := m.Dev.MemStats().Live-before, int64(2*params*kernels.F32.Size()); got != want {
				t.Errorf("%q r=%d: New holds %d bytes, want %d (parameters and gradients)", pattern, dim, got, want)
			}
			before = m.Dev.MemStats().Live
			if err := lo.Reserve(7); err != nil {
				t.Fatal(err)
			}
			if got, want := m.Dev.MemStats().Live-before, int64(ActsBytes(layers, dim, 7)); got != want {
				t.Errorf("%q r=%d: Reserve(7) holds %d bytes, ActsBytes says %d", pattern, dim, got, want)
			}
		}
	}
	if _, _, err := Size(m.Config, Config{Dim: 4, ModuleName: "mlp.dense"}); err == nil || !strings.Contains(err.Error(), "matches no linear layer") {
		t.Errorf("pattern matching nothing: %v", err)
	}
	if _, _, err := Size(m.Config, Config{}); err == nil {
		t.Error("Size with dimension 0: no error")
	}
}
