package optim

import (
	"math"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

func TestSchedules(t *testing.T) {
	const w, total = 2, 10
	cases := []struct {
		name string
		want map[int]float64
	}{
		{"constant", map[int]float64{0: 1, 5: 1, 20: 1}},
		{"constant_with_warmup", map[int]float64{0: 0, 1: 0.5, 2: 1, 9: 1}},
		{"linear", map[int]float64{0: 0, 1: 0.5, 2: 1, 6: 0.5, 10: 0, 12: 0}},
		// Past the total a schedule holds its end value: the cosine does
		// not climb back (at 14 the unclamped formula gives 0.5, at 18 1).
		{"cosine", map[int]float64{0: 0, 1: 0.5, 2: 1, 6: 0.5, 10: 0, 14: 0, 18: 0}},
		{"cosine_with_restarts", map[int]float64{2: 1, 6: 0.5, 10: 0, 14: 0}},
		{"polynomial", map[int]float64{1: 0.5, 2: 1, 6: 0.5 + 0.5e-7, 10: 1e-7, 11: 1e-7}},
	}
	for _, c := range cases {
		s, err := NewSchedule(c.name, w, total)
		if err != nil {
			t.Fatal(err)
		}
		for step, want := range c.want {
			if got := s(step); math.Abs(got-want) > 1e-12 {
				t.Errorf("%s(%d) = %v, want %v", c.name, step, got, want)
			}
		}
	}
	if _, err := NewSchedule("cosine_annealing", 0, 1); err == nil {
		t.Error("unknown schedule accepted")
	}
	// cosine_with_restarts with one cycle equals cosine before the end.
	a, _ := NewSchedule("cosine", 3, 50)
	b, _ := NewSchedule("cosine_with_restarts", 3, 50)
	for s := 0; s < 50; s++ {
		if math.Abs(a(s)-b(s)) > 1e-12 {
			t.Fatalf("step %d: cosine %v, with restarts %v", s, a(s), b(s))
		}
	}
}

func TestClipScale(t *testing.T) {
	if s := ClipScale(0.5, 1); s != 1 {
		t.Errorf("no clipping below the max: %v", s)
	}
	if s := ClipScale(4, 1); math.Abs(s-1/(4+1e-6)) > 1e-15 {
		t.Errorf("ClipScale(4, 1) = %v", s)
	}
	if s := ClipScale(1e9, 0); s != 1 {
		t.Errorf("maxNorm 0 must disable clipping")
	}
}

func TestNoDecay(t *testing.T) {
	for name, want := range map[string]bool{
		"layers.0.fc1.bias": true, "layers.0.self_attn_layer_norm.weight": true, "final_layer_norm.weight": true,
		"layers.0.fc1.weight": false, "embed_tokens.weight": false, "v_head.weight": false,
	} {
		if NoDecay(name) != want {
			t.Errorf("NoDecay(%s) = %v", name, !want)
		}
	}
}

// TestAdamWGroups checks two groups against the PyTorch formula in float64.
func TestAdamWGroups(t *testing.T) {
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	p := []float32{1, -2, 0.5, 3}
	g := []float32{0.1, -0.2, 0.3, 0.05}
	pb, gb := must(dev.Alloc(kernels.F32, 4)), must(dev.Alloc(kernels.F32, 4))
	dev.WriteF32(pb, p)
	dev.WriteF32(gb, g)
	groups := []Group{
		{Name: "decay", LR: 1e-2, WeightDecay: 0.1, Segments: []Segment{{"a", pb.Slice(0, 2), gb.Slice(0, 2)}}},
		{Name: "no_decay", LR: 2e-2, Segments: []Segment{{"b", pb.Slice(2, 2), gb.Slice(2, 2)}}},
	}
	o, err := NewAdamW(dev, groups, DefaultAdamW)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, 4)
	m, v := make([]float64, 4), make([]float64, 4)
	for i := range p {
		want[i] = float64(p[i])
	}
	for step := 1; step <= 3; step++ {
		o.Step(0.5, 2)
		for i := range want {
			lr, wd := 1e-2*0.5, 0.1
			if i >= 2 {
				lr, wd = 2e-2*0.5, 0
			}
			gi := float64(g[i]) * 2
			want[i] *= 1 - lr*wd
			m[i] = 0.9*m[i] + 0.1*gi
			v[i] = 0.95*v[i] + 0.05*gi*gi
			bc1, bc2 := 1-math.Pow(0.9, float64(step)), 1-math.Pow(0.95, float64(step))
			want[i] -= lr / bc1 * m[i] / (math.Sqrt(v[i])/math.Sqrt(bc2) + 1e-8)
		}
	}
	got := make([]float32, 4)
	dev.ReadF32(got, pb)
	for i := range got {
		if math.Abs(float64(got[i])-want[i]) > 1e-6 {
			t.Errorf("param %d = %v, want %v", i, got[i], want[i])
		}
	}
	if n := GradNorm(dev, gb); math.Abs(n-math.Sqrt(0.01+0.04+0.09+0.0025)) > 1e-7 {
		t.Errorf("GradNorm = %v", n)
	}
}

// TestStateBytes checks StateBytes against what NewAdamW allocates for F32
// and BF16 parameters (segments of even length, as every OPT tensor is).
func TestStateBytes(t *testing.T) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		dev, _ := cpu.New(cpu.Options{Threads: 1})
		pb, gb := must(dev.Alloc(dt, 10)), must(dev.Alloc(kernels.F32, 10))
		before := dev.MemStats().Live
		if _, err := NewAdamW(dev, []Group{{Name: "a", Segments: []Segment{{"a", pb.Slice(0, 6), gb.Slice(0, 6)}, {"b", pb.Slice(6, 4), gb.Slice(6, 4)}}}}, DefaultAdamW); err != nil {
			t.Fatal(err)
		}
		moments, master := StateBytes(10, dt)
		if got := dev.MemStats().Live - before; got != int64(moments+master) {
			t.Errorf("%v: NewAdamW holds %d bytes, StateBytes says %d + %d", dt, got, moments, master)
		}
	}
}
