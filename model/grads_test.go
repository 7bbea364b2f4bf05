package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFrozenBaseGrads checks that a model allocated with FreezeBase holds
// only the value head's gradient, that it equals the one a fully allocated
// model computes, and the transitions between frozen and full gradients.
func TestFrozenBaseGrads(t *testing.T) {
	for _, name := range []string{"preln", "postln"} {
		t.Run(name, func(t *testing.T) {
			dev := &countingDev{Device: newCPU(t, 2)}
			load := func() *Model {
				m, err := Load(dev, filepath.Join("testdata", "golden", name), LoadOptions{ValueHead: "yes", ValueHeadSeed: 1})
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			frozen, full := load(), load()
			P := frozen.Config.WordEmbedProjDim

			frozen.FreezeBase = true
			dev.elems = 0
			frozen.AllocGrads()
			if frozen.Grads.Flat != nil || frozen.Grads.VHead.Len() != P || dev.elems != P || frozen.GradElems() != P {
				t.Fatalf("frozen base: allocated %d gradient elements (GradElems %d), want the value head's %d", dev.elems, frozen.GradElems(), P)
			}
			// Full gradients allocated first, then frozen: still works.
			full.AllocGrads()
			full.FreezeBase = true
			if full.GradElems() != full.NumParams() {
				t.Fatalf("GradElems %d, want %d", full.GradElems(), full.NumParams())
			}

			rng := rand.New(rand.NewPCG(3, 4))
			in, dv := actsBatch(rng, frozen, 3, 7)
			vhead := func(m *Model) []float32 {
				m.ZeroGrads()
				a := must(m.NewActs(3, 7, ActsOptions{Train: true, Checkpoint: true}))
				if err := m.Forward(a, in); err != nil {
					t.Fatal(err)
				}
				g := m.MeanLossGrad(a)
				g.DValues = dv
				if err := m.Backward(a, g); err != nil {
					t.Fatal(err)
				}
				v, err := m.ParamView(m.Grads, "v_head.weight")
				if err != nil {
					t.Fatal(err)
				}
				out := make([]float32, P)
				m.Dev.ReadF32(out, v)
				return out
			}
			got, want := vhead(frozen), vhead(full)
			if !slices.Equal(got, want) || !slices.ContainsFunc(got, func(x float32) bool { return x != 0 }) {
				t.Errorf("value-head gradient %v, want %v", got[:4], want[:4])
			}
			base := make([]float32, full.NumParams())
			full.Dev.ReadF32(base, full.Grads.Flat)
			off, _, _ := full.ParamRange("v_head.weight")
			if slices.ContainsFunc(base[:off], func(x float32) bool { return x != 0 }) {
				t.Error("a frozen base got gradients")
			}
			if _, err := frozen.ParamView(frozen.Grads, "fc1.weight"); err == nil {
				t.Error("ParamView of a base gradient of a frozen model: no error")
			}
			if !slices.Equal(vhead(frozen), want) {
				t.Error("ZeroGrads did not zero the value-head gradient")
			}

			// Unfreezing needs full gradients: Backward says so, AllocGrads
			// provides them.
			frozen.FreezeBase = false
			a := must(frozen.NewActs(3, 7, ActsOptions{Train: true}))
			if err := frozen.Forward(a, in); err != nil {
				t.Fatal(err)
			}
			if err := frozen.Backward(a, Grad{DValues: dv}); err == nil || !strings.Contains(err.Error(), "AllocGrads") {
				t.Errorf("Backward with value-head-only gradients and an unfrozen base: %v", err)
			}
			frozen.AllocGrads()
			if frozen.GradElems() != frozen.NumParams() {
				t.Errorf("after unfreezing, AllocGrads gave %d elements, want %d", frozen.GradElems(), frozen.NumParams())
			}
			if err := frozen.Backward(a, Grad{DValues: dv}); err != nil {
				t.Error(err)
			}
		})
	}
	// No value head: nothing to allocate.
	m := loadGolden(t, "preln")
	m.FreezeBase = true
	m.AllocGrads()
	m.ZeroGrads()
	if m.Grads == nil || m.GradElems() != 0 {
		t.Fatalf("frozen model without a value head: %d gradient elements", m.GradElems())
	}
	a := must(m.NewActs(1, 4, ActsOptions{Train: true}))
	if err := m.Forward(a, Batch{IDs: []int32{5, 6, 7, 8}, Targets: []int32{6, 7, 8, IgnoreIndex}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(a, m.MeanLossGrad(a)); err != nil {
		t.Error(err)
	}
}

// wantVHead is the value head the CLI's step 2 gave before Load did it
// (internal/cli initVHead): nn.Linear(P, 1)'s U(−1/√P, 1/√P) from a PCG
// seeded (seed, 0x76686561).
func wantVHead(seed uint64, p int) []float32 {
	rng := rand.New(rand.NewPCG(seed, 0x76686561))
	b := 1 / math.Sqrt(float64(p))
	h := make([]float32, p)
	for i := range h {
		h[i] = float32((rng.Float64()*2 - 1) * b)
	}
	return h
}

func TestLoadInitialisesFreshValueHead(t *testing.T) {
	dev := newCPU(t, 1)
	vhead := func(dir string, opts LoadOptions) []float32 {
		t.Helper()
		m, err := Load(dev, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !m.HasValueHead() {
			return nil
		}
		h := make([]float32, m.Params.VHead.Len())
		m.Dev.ReadF32(h, m.Params.VHead)
		return h
	}
	dir := filepath.Join("testdata", "golden", "preln") // no v_head.weight
	for _, seed := range []uint64{0, 1234} {
		got := vhead(dir, LoadOptions{ValueHead: "yes", ValueHeadSeed: seed})
		want := wantVHead(seed, len(got))
		if len(got) != 32 || !slices.Equal(got, want) {
			t.Errorf("seed %d: value head %v..., want %v...", seed, got[:3], want[:3])
		}
		bound := float32(1 / math.Sqrt(float64(len(got))))
		if slices.ContainsFunc(got, func(x float32) bool { return x == 0 || x < -bound || x > bound }) {
			t.Errorf("value head outside (−%v, %v) or zero: %v", bound, bound, got)
		}
	}
	if slices.Equal(vhead(dir, LoadOptions{ValueHead: "yes", ValueHeadSeed: 1}), vhead(dir, LoadOptions{ValueHead: "yes", ValueHeadSeed: 2})) {
		t.Error("seeds 1 and 2 give the same value head")
	}
	if h := vhead(dir, LoadOptions{}); h != nil {
		t.Error("auto added a value head the checkpoint does not have")
	}
	// A value head in the checkpoint is loaded, not initialised.
	for _, dir := range []string{filepath.Join("testdata", "formats", "rw_valuehead"), filepath.Join("testdata", "golden", "postln")} {
		a, b := vhead(dir, LoadOptions{ValueHead: "yes", ValueHeadSeed: 1}), vhead(dir, LoadOptions{})
		if a == nil || !slices.Equal(a, b) || slices.Equal(a, wantVHead(1, len(a))) {
			t.Errorf("%s: the checkpoint's v_head.weight was not what Load kept", dir)
		}
	}

	// SavedValueHead tells a checkpoint with a value head from one
	// without, and ValueHead "require" refuses the latter, naming it.
	for _, c := range []struct {
		dir   string
		saved bool
	}{
		{filepath.Join("testdata", "golden", "preln"), false},
		{filepath.Join("testdata", "golden", "postln"), true},
		{filepath.Join("testdata", "formats", "rw_valuehead"), true},
	} {
		saved, err := SavedValueHead(c.dir)
		if err != nil || saved != c.saved {
			t.Errorf("SavedValueHead(%s) = %v, %v; want %v", c.dir, saved, err, c.saved)
		}
		m, err := Load(dev, c.dir, LoadOptions{ValueHead: "require"})
		switch {
		case c.saved && (err != nil || !m.HasValueHead()):
			t.Errorf("%s, require: %v", c.dir, err)
		case !c.saved && (!errors.Is(err, ErrNoValueHead) || !strings.Contains(err.Error(), c.dir) || !strings.Contains(err.Error(), "v_head.weight")):
			t.Errorf("%s, require without v_head.weight: %v, want ErrNoValueHead naming the directory", c.dir, err)
		}
	}

	// The point of the rule: a critic's first value gradients reach its body.
	m, err := Load(dev, filepath.Join("testdata", "golden", "preln"), LoadOptions{ValueHead: "yes", ValueHeadSeed: 7})
	if err != nil {
		t.Fatal(err)
	}
	m.AllocGrads()
	a2 := must(m.NewActs(1, 4, ActsOptions{Train: true, NoLogits: true}))
	if err := m.Forward(a2, Batch{IDs: []int32{5, 6, 7, 8}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(a2, Grad{DValues: []float32{1, -1, 0.5, 2}}); err != nil {
		t.Fatal(err)
	}
	g, _ := m.ParamView(m.Grads, "layers.0.fc1.weight")
	h := make([]float32, g.Len())
	m.Dev.ReadF32(h, g)
	if !slices.ContainsFunc(h, func(x float32) bool { return x != 0 }) {
		t.Error("no gradient reached the decoder from the fresh value head")
	}
}
