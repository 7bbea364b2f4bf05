package cpu_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels/cpu"
)

// adamWInputs returns n parameters, gradients and moments whose values
// span many magnitudes, with signed zeros, denormals, infinities and NaNs
// among the gradients, and parameters on bf16 ties (low half 0x8000).
func adamWInputs(r *rand.Rand, n int) (p, g, m, v []float32) {
	wild := func() float32 {
		switch r.IntN(16) {
		case 0:
			return 0
		case 1:
			return float32(math.Copysign(0, -1))
		case 2:
			return math.Float32frombits(r.Uint32() & 0x807fffff) // denormal
		case 3:
			return float32(r.NormFloat64() * 1e30)
		}
		return float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(12)-8)))
	}
	p, g, m, v = make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		p[i], g[i], m[i] = wild(), wild(), wild()
		v[i] = float32(math.Abs(float64(wild())))
		if r.IntN(8) == 0 {
			p[i] = math.Float32frombits(math.Float32bits(p[i])&0xffff0000 | 0x8000)
		}
	}
	for i, x := range []float64{math.Inf(1), math.NaN(), math.Inf(-1)} {
		if 4*i+1 < n {
			g[4*i+1] = float32(x)
		}
	}
	return p, g, m, v
}

// TestAdamWVectorExact: the AVX-512 AdamW (fp32, and bf16 with master
// halves) gives bit for bit what the portable Go code gives, on every
// length up to 40 (tails under masks) and a long one, over several steps,
// with either form of the lerp (beta1 0.9 and 0.3), a gradient scale, and
// wild inputs.
func TestAdamWVectorExact(t *testing.T) {
	best, gen := vectorAndPortable(t, 1)
	same := func(a, b float32) bool {
		return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
	}
	r := rand.New(rand.NewPCG(3, 4))
	lengths := append(slices.Collect(func(yield func(int) bool) {
		for n := range 41 {
			yield(n)
		}
	}), 4099)
	for _, hp := range []struct{ b1, gs float32 }{{0.9, 1}, {0.3, 1}, {0.9, 0.37}} {
		for _, n := range lengths {
			p0, g, m0, v0 := adamWInputs(r, n)
			// fp32
			pa, ma, va := slices.Clone(p0), slices.Clone(m0), slices.Clone(v0)
			pb, mb, vb := slices.Clone(p0), slices.Clone(m0), slices.Clone(v0)
			// bf16: the master halves of p0
			ha, la := make(cpu.BF16, n), make(cpu.I32, (n+1)/2)
			for i, w := range p0 {
				h, l := cpu.SplitMaster(w)
				ha[i] = h
				la[i/2] |= int32(uint32(l) << (16 * (i % 2)))
			}
			hb, lb := slices.Clone(ha), slices.Clone(la)
			for step := 1; step <= 3; step++ {
				best.AdamWStep(cpu.F32(pa), cpu.F32(g), cpu.F32(ma), cpu.F32(va), n, 1e-3, hp.b1, 0.95, 1e-8, 0.1, hp.gs, step)
				gen.AdamWStep(cpu.F32(pb), cpu.F32(g), cpu.F32(mb), cpu.F32(vb), n, 1e-3, hp.b1, 0.95, 1e-8, 0.1, hp.gs, step)
			}
			for i := range n {
				if !same(pa[i], pb[i]) || !same(ma[i], mb[i]) || !same(va[i], vb[i]) {
					t.Fatalf("fp32 b1=%v gs=%v n=%d [%d]: vector p,m,v = %v %v %v, portable %v %v %v", hp.b1, hp.gs, n, i, pa[i], ma[i], va[i], pb[i], mb[i], vb[i])
				}
			}
			ma, va = slices.Clone(m0), slices.Clone(v0)
			mb, vb = slices.Clone(m0), slices.Clone(v0)
			for step := 1; step <= 3; step++ {
				best.AdamWStepBF16(ha, la, cpu.F32(g), cpu.F32(ma), cpu.F32(va), n, 1e-3, hp.b1, 0.95, 1e-8, 0.1, hp.gs, step)
				gen.AdamWStepBF16(hb, lb, cpu.F32(g), cpu.F32(mb), cpu.F32(vb), n, 1e-3, hp.b1, 0.95, 1e-8, 0.1, hp.gs, step)
			}
			for i := range n {
				if ha[i] != hb[i] || !same(ma[i], mb[i]) || !same(va[i], vb[i]) {
					t.Fatalf("bf16 b1=%v gs=%v n=%d [%d]: vector p,m,v = %#04x %v %v, portable %#04x %v %v", hp.b1, hp.gs, n, i, ha[i], ma[i], va[i], hb[i], mb[i], vb[i])
				}
			}
			if !slices.Equal(la, lb) {
				t.Fatalf("bf16 b1=%v gs=%v n=%d: low halves differ", hp.b1, hp.gs, n)
			}
		}
	}
}

// TestSumSquaresVectorExact: the AVX-512 sum of squares gives bit for bit
// the portable code's sum, for every length up to 70 (masked groups) and
// lengths over one and several blocks (values of similar magnitudes, so
// that a change of summation order shows).
func TestSumSquaresVectorExact(t *testing.T) {
	best, gen := vectorAndPortable(t, 2)
	r := rand.New(rand.NewPCG(5, 6))
	lengths := []int{1<<14 + 29, 3<<14 + 27, 100003}
	for n := range 71 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(7)-3)))
		}
		a, b := best.SumSquares(cpu.F32(x)), gen.SumSquares(cpu.F32(x))
		if math.Float64bits(a) != math.Float64bits(b) {
			t.Fatalf("n=%d: vector %.17g, portable %.17g", n, a, b)
		}
	}
}

// vectorAndPortable returns a device with the CPU's best ISA (threads
// threads) and one with the portable code; it skips without AVX-512.
func vectorAndPortable(t *testing.T, threads int) (best, gen *cpu.Device) {
	t.Helper()
	best, err := cpu.New(cpu.Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(best.Name(), "avx512") {
		t.Skip("no AVX-512 on this CPU: the portable code is the only one")
	}
	if gen, err = cpu.New(cpu.Options{Threads: 1, ISA: "generic"}); err != nil {
		t.Fatal(err)
	}
	return best, gen
}
