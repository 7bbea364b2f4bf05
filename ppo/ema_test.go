package ppo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

func TestEMAUpdate(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 100_003
	ema0, theta := make([]float32, n), make([]float32, n)
	for i := range n {
		ema0[i] = float32(rng.NormFloat64())
		theta[i] = float32(rng.NormFloat64())
	}
	for _, beta := range []float64{0.992, 0.5, 0.01, 0, 1} {
		eb, tb := must(dev.Alloc(kernels.F32, n)), must(dev.Alloc(kernels.F32, n))
		dev.WriteF32(eb, ema0)
		dev.WriteF32(tb, theta)
		// Two steps: the second starts from the first's result.
		if err := EMAUpdate(dev, eb, tb, beta); err != nil {
			t.Fatal(err)
		}
		if err := EMAUpdate(dev, eb, tb, beta); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		dev.ReadF32(got, eb)
		var worst float64
		for i := range n {
			e := float64(ema0[i])
			for range 2 {
				e = beta*e + (1-beta)*float64(theta[i])
			}
			scale := math.Max(math.Abs(float64(ema0[i])), math.Abs(float64(theta[i])))
			worst = math.Max(worst, math.Abs(float64(got[i])-e)/scale)
		}
		if worst > 1e-6 {
			t.Errorf("beta %v: relative error %.3g", beta, worst)
		}
		if got := make([]float32, n); true {
			dev.ReadF32(got, tb)
			for i := range n {
				if got[i] != theta[i] {
					t.Fatalf("beta %v: theta changed", beta)
				}
			}
		}
	}

	// A view of part of the buffers.
	eb, tb := must(dev.Alloc(kernels.F32, 10)), must(dev.Alloc(kernels.F32, 10))
	dev.WriteF32(tb, []float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	if err := EMAUpdate(dev, eb.Slice(2, 3), tb.Slice(2, 3), 0.75); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 10)
	dev.ReadF32(got, eb)
	for i, v := range got {
		want := float32(0)
		if i >= 2 && i < 5 {
			want = 0.25
		}
		if math.Abs(float64(v-want)) > 1e-7 {
			t.Errorf("view: ema[%d] = %v, want %v", i, v, want)
		}
	}

	for _, tc := range []struct {
		name    string
		ema, th kernels.Buffer
		beta    float64
	}{
		{"lengths", must(dev.Alloc(kernels.F32, 3)), must(dev.Alloc(kernels.F32, 4)), 0.9},
		{"dtype", must(dev.Alloc(kernels.I32, 3)), must(dev.Alloc(kernels.F32, 3)), 0.9},
		{"beta above 1", must(dev.Alloc(kernels.F32, 3)), must(dev.Alloc(kernels.F32, 3)), 1.5},
		{"beta NaN", must(dev.Alloc(kernels.F32, 3)), must(dev.Alloc(kernels.F32, 3)), math.NaN()},
	} {
		if err := EMAUpdate(dev, tc.ema, tc.th, tc.beta); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
