package model

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
)

// countingDev counts the device allocations a model makes.
type countingDev struct {
	kernels.Device
	allocs, elems int
}

func (d *countingDev) Alloc(dt kernels.DType, n int) (kernels.Buffer, error) {
	d.allocs++
	d.elems += n
	return d.Device.Alloc(dt, n)
}

// actsModels are models that between them take every branch of the
// activation layout: pre-LN (P == H, final LayerNorm), post-LN with
// project_in/out, and a pre-LN GELU model without a final LayerNorm and with
// a value head (random weights).
func actsModels(t *testing.T, dev kernels.Device) map[string]*Model {
	t.Helper()
	ms := map[string]*Model{}
	for _, name := range []string{"preln", "postln"} {
		m, err := Load(dev, filepath.Join("testdata", "golden", name), LoadOptions{ValueHead: "yes", ValueHeadSeed: 3})
		if err != nil {
			t.Fatal(err)
		}
		ms[name] = m
	}
	cfg := *ms["preln"].Config
	cfg.Activation, cfg.RemoveFinalLayerNorm, cfg.NumLayers = "gelu", true, 3
	m, err := New(dev, &cfg, Options{ValueHead: true})
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, m.NumParams())
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.2)
	}
	m.Dev.WriteF32(m.Params.Flat, w)
	ms["gelu-nofinal"] = m
	return ms
}

// actsBatch is a random left-padded batch with targets (some ignored),
// value gradients and a dropout seed.
func actsBatch(rng *rand.Rand, m *Model, b, t int) (Batch, []float32) {
	pads := make([]int, b)
	for i := range pads {
		pads[i] = rng.IntN(t)
	}
	ids, mask := leftPadded(rng, m, t, pads)
	targets := ShiftLabels(ids, b, t)
	for i := range targets {
		if mask[i] == 0 || rng.IntN(5) == 0 {
			targets[i] = IgnoreIndex
		}
	}
	dv := make([]float32, b*t)
	for i := range dv {
		dv[i] = float32(rng.NormFloat64())
	}
	return Batch{IDs: ids, Mask: mask, Targets: targets, Seed: rng.Uint64()}, dv
}

// passResult is everything a pass produces.
type passResult struct {
	logits, losses, values, grads []float32
	loss                          float32
}

func runPass(t *testing.T, m *Model, a *Acts, in Batch, dv []float32) passResult {
	t.Helper()
	var r passResult
	if err := m.Forward(a, in); err != nil {
		t.Fatal(err)
	}
	var g Grad
	if !a.opts.NoLogits {
		r.logits, _ = m.Logits(a)
		var err error
		if r.losses, err = m.Losses(a); err != nil {
			t.Fatal(err)
		}
		r.loss, _, _ = m.MeanLoss(a)
		g = m.MeanLossGrad(a)
	}
	if m.HasValueHead() {
		r.values, _ = m.Values(a)
		g.DValues = dv
	}
	if a.opts.Train {
		m.ZeroGrads()
		if err := m.Backward(a, g); err != nil {
			t.Fatal(err)
		}
		r.grads = make([]float32, m.NumParams())
		m.Dev.ReadF32(r.grads, m.Grads.Flat)
	}
	return r
}

func (r passResult) diff(o passResult) string {
	for _, c := range []struct {
		name string
		a, b []float32
	}{{"logits", r.logits, o.logits}, {"losses", r.losses, o.losses}, {"values", r.values, o.values}, {"gradients", r.grads, o.grads}} {
		if !slices.Equal(c.a, c.b) {
			return c.name
		}
	}
	if r.loss != o.loss {
		return "mean loss"
	}
	return ""
}

var actsOptionSets = []ActsOptions{
	{},
	{NoLogits: true},
	{Train: true},
	{Train: true, Dropout: true},
	{Train: true, Checkpoint: true},
	{Train: true, Dropout: true, Checkpoint: true},
	{Train: true, Dropout: true, NoLogits: true},
	{Train: true, Checkpoint: true, NoLogits: true},
}

// TestReuseActsBitIdentical runs passes over shapes that shrink and grow on
// one reused Acts and on fresh ones: logits, losses, values and every
// gradient agree bit for bit.
func TestReuseActsBitIdentical(t *testing.T) {
	dev := newCPU(t, 3)
	shapes := [][2]int{{3, 9}, {2, 5}, {3, 9}, {1, 12}, {4, 7}, {2, 3}, {4, 12}, {1, 1}}
	for name, m := range actsModels(t, dev) {
		m.AllocGrads()
		for _, opts := range actsOptionSets {
			t.Run(fmt.Sprintf("%s/%+v", name, opts), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(21, 22))
				var r *Acts
				for _, s := range shapes {
					in, dv := actsBatch(rng, m, s[0], s[1])
					prev := r
					r = must(m.ReuseActs(r, s[0], s[1], opts))
					if prev != nil && r != prev {
						t.Fatalf("%v: ReuseActs made new Acts for the same options", s)
					}
					want := runPass(t, m, must(m.NewActs(s[0], s[1], opts)), in, dv)
					got := runPass(t, m, r, in, dv)
					if d := got.diff(want); d != "" {
						t.Fatalf("shape %v: %s of reused activations differ from fresh ones", s, d)
					}
					// A second pass on the same reused buffers, now dirty with
					// this shape's own data, is still identical.
					if d := runPass(t, m, r, in, dv).diff(want); d != "" {
						t.Fatalf("shape %v: %s differ on a repeated pass", s, d)
					}
				}
			})
		}
	}
}

// TestReuseActsAllocations counts device allocations: once the buffers have
// grown to the largest shape, passes over any smaller or equal shape
// allocate nothing, and NewActs would have allocated every time.
func TestReuseActsAllocations(t *testing.T) {
	dev := &countingDev{Device: newCPU(t, 2)}
	m, err := Load(dev, filepath.Join("testdata", "golden", "postln"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.AllocGrads()
	opts := ActsOptions{Train: true, Dropout: true}
	// The sizes scale with B·T (most buffers) and B·T² (attention), so
	// neither of these shapes covers the other.
	shapes := [][2]int{{4, 6}, {1, 16}, {3, 3}, {2, 12}, {4, 6}}
	rng := rand.New(rand.NewPCG(1, 2))
	var a *Acts
	for _, s := range shapes {
		a = must(m.ReuseActs(a, s[0], s[1], opts))
		in, _ := actsBatch(rng, m, s[0], s[1])
		runPass(t, m, a, in, nil)
	}
	bytes := a.Bytes()
	dev.allocs, dev.elems = 0, 0
	for range 3 {
		for _, s := range shapes {
			a = must(m.ReuseActs(a, s[0], s[1], opts))
			in, _ := actsBatch(rng, m, s[0], s[1])
			runPass(t, m, a, in, nil)
		}
	}
	if dev.allocs != 0 {
		t.Errorf("passes over known shapes allocated %d device buffers (%d elements)", dev.allocs, dev.elems)
	}
	if a.Bytes() != bytes {
		t.Errorf("capacity changed from %d to %d bytes", bytes, a.Bytes())
	}
	fresh := must(m.NewActs(4, 6, opts))
	if dev.allocs == 0 || fresh.Bytes() >= bytes {
		t.Errorf("NewActs: %d allocations of %d bytes; the reused Acts hold %d", dev.allocs, fresh.Bytes(), bytes)
	}

	// Other options get fresh buffers and leave a alone.
	dev.allocs = 0
	b := must(m.ReuseActs(a, 2, 3, ActsOptions{}))
	if b == a || dev.allocs == 0 || a.B != 4 || a.T != 6 {
		t.Errorf("ReuseActs with other options: same Acts %v, %d allocations, a now [%d,%d]", b == a, dev.allocs, a.B, a.T)
	}
	// A WithParams view of m shares its activations.
	dev.allocs = 0
	v := m.WithParams(m.Params.Flat)
	if c := must(v.ReuseActs(b, 1, 3, ActsOptions{})); c != b || dev.allocs != 0 {
		t.Errorf("a view of the model reallocated (%d allocations)", dev.allocs)
	}
}

// TestReuseActsResetsState checks that nothing of the last pass survives
// ReuseActs, and that a rejected batch leaves the Acts as they were.
func TestReuseActsResetsState(t *testing.T) {
	m := loadGolden(t, "preln")
	m.AllocGrads()
	rng := rand.New(rand.NewPCG(5, 5))
	in, _ := actsBatch(rng, m, 2, 6)
	a := must(m.NewActs(2, 6, ActsOptions{Train: true}))
	if err := m.Forward(a, in); err != nil {
		t.Fatal(err)
	}
	want, _ := m.Logits(a)
	bad := in
	bad.Targets = slices.Clone(in.Targets)
	bad.Targets[3] = 5000
	if err := m.Forward(a, Batch{IDs: in.IDs, Targets: bad.Targets}); err == nil {
		t.Fatal("bad targets accepted")
	}
	if got, err := m.Logits(a); err != nil || !slices.Equal(got, want) || !a.hasMask || !slices.Equal(a.hostTargets, in.Targets) {
		t.Errorf("a rejected batch changed the Acts (logits error %v)", err)
	}

	a = must(m.ReuseActs(a, 2, 4, ActsOptions{Train: true}))
	if _, err := m.Logits(a); err == nil {
		t.Error("Logits after ReuseActs: no error")
	}
	if _, err := m.Losses(a); err == nil {
		t.Error("Losses after ReuseActs: no error")
	}
	if a.hasMask || a.seed != 0 || len(a.hostTargets) != 0 {
		t.Error("ReuseActs kept the mask, seed or targets of the last pass")
	}
	if err := m.Backward(a, Grad{DLosses: make([]float32, 8)}); err == nil || !strings.Contains(err.Error(), "no loss") {
		t.Errorf("Backward after ReuseActs: %v", err)
	}
	// A pass without targets after one with them has no loss.
	in2, _ := actsBatch(rng, m, 2, 4)
	if err := m.Forward(a, in2); err != nil {
		t.Fatal(err)
	}
	if err := m.Forward(a, Batch{IDs: in2.IDs}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.MeanLoss(a); err == nil {
		t.Error("MeanLoss of a pass without targets: no error")
	}
	if g := m.MeanLossGrad(a); slices.ContainsFunc(g.DLosses, func(x float32) bool { return x != 0 }) {
		t.Error("MeanLossGrad used the targets of an earlier pass")
	}
}

// BenchmarkActs compares NewActs with ReuseActs over varying shapes of a
// mid-sized model (the fp32 logits [B·T,V] dominate). allocB/op is the
// device memory allocated per call, after ReuseActs has grown to the shapes.
func BenchmarkActs(b *testing.B) {
	cfg := &Config{ModelType: "opt", VocabSize: 8192, HiddenSize: 256, FFNDim: 1024, NumLayers: 4, NumHeads: 4,
		MaxPositions: 512, WordEmbedProjDim: 256, DoLayerNormBefore: true, EnableBias: true,
		LayerNormElementwiseAffine: true, Activation: "relu"}
	dev := &countingDev{Device: newCPU(b, 4)}
	m, err := New(dev, cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	shapes := [][2]int{{8, 128}, {6, 96}, {8, 112}, {4, 128}}
	opts := ActsOptions{Train: true}
	for _, reuse := range []bool{false, true} {
		b.Run(map[bool]string{false: "NewActs", true: "ReuseActs"}[reuse], func(b *testing.B) {
			var a *Acts
			if reuse { // grow to the shapes once: the loop measures the steady state
				for _, s := range shapes {
					a = must(m.ReuseActs(a, s[0], s[1], opts))
				}
			}
			dev.elems = 0
			i := 0
			for b.Loop() {
				s := shapes[i%len(shapes)]
				i++
				if reuse {
					a = must(m.ReuseActs(a, s[0], s[1], opts))
				} else {
					a = must(m.NewActs(s[0], s[1], opts))
				}
			}
			b.ReportMetric(float64(dev.elems)*4/float64(i), "allocB/op")
		})
	}
}
