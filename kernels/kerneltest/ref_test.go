package kerneltest

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The references check themselves: every reference backward agrees with
// float64 central differences of its reference forward.

func randn64(r *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	return x
}

func dot64(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// fd64 checks grad against central differences of L(x) = Σ w·f(x) at
// every element of x (only those in idx when idx is not nil).
func fd64(t *testing.T, name string, x, grad, w []float64, idx []int, f func(x []float64) []float64) {
	t.Helper()
	const h = 1e-6
	if idx == nil {
		for i := range x {
			idx = append(idx, i)
		}
	}
	var scale float64
	for _, g := range grad {
		scale = math.Max(scale, math.Abs(g))
	}
	xx := append([]float64(nil), x...)
	for _, i := range idx {
		xx[i] = x[i] + h
		lp := dot64(w, f(xx))
		xx[i] = x[i] - h
		lm := dot64(w, f(xx))
		xx[i] = x[i]
		num := (lp - lm) / (2 * h)
		if math.Abs(num-grad[i]) > 1e-6*(math.Abs(grad[i])+scale)+1e-9 {
			t.Fatalf("%s: grad[%d] = %.12g, finite differences %.12g", name, i, grad[i], num)
		}
	}
}

func TestRefMatmulGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	n, c, oc := 4, 5, 3
	inp, w, b, dout := randn64(r, n*c), randn64(r, oc*c), randn64(r, oc), randn64(r, n*oc)
	di, dw, db := RefMatmulBackward(dout, inp, w, n, c, oc)
	fd64(t, "dinp", inp, di, dout, nil, func(x []float64) []float64 { return RefMatmulForward(x, w, b, n, c, oc) })
	fd64(t, "dweight", w, dw, dout, nil, func(x []float64) []float64 { return RefMatmulForward(inp, x, b, n, c, oc) })
	fd64(t, "dbias", b, db, dout, nil, func(x []float64) []float64 { return RefMatmulForward(inp, w, x, n, c, oc) })
}

func TestRefLayerNormGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n, c := 3, 6
	for _, affine := range []bool{false, true} {
		x, dout := randn64(r, n*c), randn64(r, n*c)
		var w, b []float64
		if affine {
			w, b = randn64(r, c), randn64(r, c)
		}
		dx, dw, db := RefLayerNormBackward(dout, x, w, n, c, 1e-5)
		out := func(x, w, b []float64) []float64 { o, _, _ := RefLayerNormForward(x, w, b, n, c, 1e-5); return o }
		fd64(t, "dinp", x, dx, dout, nil, func(v []float64) []float64 { return out(v, w, b) })
		if affine {
			fd64(t, "dweight", w, dw, dout, nil, func(v []float64) []float64 { return out(x, v, b) })
			fd64(t, "dbias", b, db, dout, nil, func(v []float64) []float64 { return out(x, w, v) })
		}
	}
}

func TestRefGELUGrad(t *testing.T) {
	for x := -6.0; x <= 6; x += 0.37 {
		h := 1e-6
		num := (RefGELU(x+h) - RefGELU(x-h)) / (2 * h)
		if math.Abs(num-RefGELUGrad(x)) > 1e-8 {
			t.Fatalf("GELU'(%g) = %g, finite differences %g", x, RefGELUGrad(x), num)
		}
	}
	// Hugging Face's "gelu" is exact: GELU(1) = Φ(1) = 0.8413447460685429.
	if math.Abs(RefGELU(1)-0.8413447460685429) > 1e-15 {
		t.Fatalf("GELU(1) = %.17g", RefGELU(1))
	}
}

func TestRefAttentionGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 3))
	b, T, nh, hs := 3, 5, 2, 4
	c := nh * hs
	// batch 0: no padding; batch 1: two left pads; batch 2: only padding.
	mask := []int32{1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0}
	for _, m := range [][]int32{nil, mask} {
		qkv := randn64(r, b*T*3*c)
		grad := func(w []float64) []float64 { return RefAttentionBackward(w, qkv, m, b, T, nh, hs) }
		fwd := func(x []float64) []float64 { o, _ := RefAttentionForward(x, m, b, T, nh, hs); return o }
		// Every row weighted, fully masked ones included: their output
		// (the mean of all values) depends on v only, and so does the
		// reference gradient.
		w := randn64(r, b*T*c)
		fd64(t, "dqkv", qkv, grad(w), w, nil, fwd)
	}
	// Directly: with dout only on row 0 of batch 2 (all padding), q and k get
	// nothing and every value gets 1/T of dout.
	qkv := randn64(r, b*T*3*c)
	dout := make([]float64, b*T*c)
	for e := range c {
		dout[(2*T)*c+e] = 1
	}
	d := RefAttentionBackward(dout, qkv, mask, b, T, nh, hs)
	for j := range T {
		for e := range 3 * c {
			want := 0.0
			if e >= 2*c {
				want = 1 / float64(T)
			}
			if got := d[(2*T+j)*3*c+e]; math.Abs(got-want) > 1e-12 {
				t.Fatalf("fully masked row: dqkv[%d,%d] = %v, want %v", j, e, got, want)
			}
		}
	}
}

func TestRefAttentionDecodeMatchesForward(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 4))
	b, T, nh, hs := 2, 6, 2, 4
	c := nh * hs
	mask := []int32{0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1}
	qkv := randn64(r, b*T*3*c)
	out, _ := RefAttentionForward(qkv, mask, b, T, nh, hs)
	kc, vc := make([]float64, b*T*c), make([]float64, b*T*c)
	for bi := range b {
		for ti := range T {
			copy(kc[(bi*T+ti)*c:], qkv[(bi*T+ti)*3*c+c:][:c])
			copy(vc[(bi*T+ti)*c:], qkv[(bi*T+ti)*3*c+2*c:][:c])
		}
	}
	dec := RefAttentionDecode(qkv, kc, vc, mask, b, T, 0, T, nh, hs)
	for i := range out {
		if math.Abs(out[i]-dec[i]) > 1e-12 {
			t.Fatalf("decode [%d] = %g, forward %g", i, dec[i], out[i])
		}
	}
}

func TestRefCrossEntropyGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 5))
	n, v := 4, 7
	x, w := randn64(r, n*v), randn64(r, n)
	tg := []int32{3, -100, 0, 6}
	fd64(t, "dlogits", x, RefCrossEntropyBackward(w, x, tg, n, v, -100), w, nil, func(x []float64) []float64 {
		return RefCrossEntropyForward(x, tg, n, v, -100)
	})
	// As LogProbGather's backward: dlosses = -w.
	ids := []int32{3, 1, 0, 6}
	negw := make([]float64, n)
	for i := range w {
		negw[i] = -w[i]
	}
	fd64(t, "logprob", x, RefCrossEntropyBackward(negw, x, ids, n, v, -100), w, nil, func(x []float64) []float64 {
		out := make([]float64, n)
		for i := range n {
			out[i] = RefLogSoftmaxAt(x[i*v:(i+1)*v], int(ids[i]))
		}
		return out
	})
}

// TestRefAdamWByHand checks RefAdamWStep against two steps worked out by
// hand from PyTorch's AdamW formula.
func TestRefAdamWByHand(t *testing.T) {
	s := &AdamWState{P: []float64{1}, M: []float64{0}, V: []float64{0}}
	const lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-8, 0.01
	RefAdamWStep(s, []float64{0.5}, lr, b1, b2, eps, wd, 1, 1)
	// p = 1·(1-0.001) = 0.999; m = 0.05; v = 0.001·0.25 = 0.00025;
	// denom = sqrt(0.00025)/sqrt(0.001) + 1e-8 = 0.5 + 1e-8;
	// p = 0.999 - (0.1/0.1)·0.05/(0.5+1e-8).
	want := 0.999 - 0.05/(0.5+1e-8)
	if math.Abs(s.P[0]-want) > 1e-15 || math.Abs(s.M[0]-0.05) > 1e-15 || math.Abs(s.V[0]-0.00025) > 1e-18 {
		t.Fatalf("step 1: p=%.17g m=%g v=%g, want p=%.17g", s.P[0], s.M[0], s.V[0], want)
	}
	RefAdamWStep(s, []float64{-0.25}, lr, b1, b2, eps, wd, 2, 2) // g = -0.5 after scaling
	// p *= 0.999; m = 0.9·0.05 + 0.1·(-0.5) = -0.005; v = 0.999·0.00025 +
	// 0.001·0.25 = 0.00049975; bc1 = 0.19, bc2 = 0.001999.
	p := want * 0.999
	m, v := -0.005, 0.00049975
	p -= lr / 0.19 * m / (math.Sqrt(v)/math.Sqrt(0.001999) + eps)
	if math.Abs(s.P[0]-p) > 1e-14 || math.Abs(s.M[0]-m) > 1e-15 || math.Abs(s.V[0]-v) > 1e-17 {
		t.Fatalf("step 2: p=%.17g m=%g v=%g, want p=%.17g m=%g v=%g", s.P[0], s.M[0], s.V[0], p, m, v)
	}
}

func TestRefDropoutKeepRate(t *testing.T) {
	kept := 0
	const n = 100000
	for i := range n {
		if RefDropoutKeep(3, i, 0.25) {
			kept++
		}
	}
	if f := float64(kept) / n; math.Abs(f-0.75) > 0.01 {
		t.Fatalf("kept %.4f, want 0.75", f)
	}
	for i := range 1000 {
		if !RefDropoutKeep(9, i, 0) {
			t.Fatal("p = 0 dropped an element")
		}
	}
}

// TestRefBF16Bits checks the reference rounding on hand-checked cases: the
// lower 16 bits of a float32 are what bf16 drops, 0x8000 of them is half an
// ulp.
func TestRefBF16Bits(t *testing.T) {
	const nan = 0xffff // any NaN
	for _, c := range []struct {
		in   uint32
		want uint16
		what string
	}{
		{0x3f800000, 0x3f80, "1 is exact"},
		{0x3f800001, 0x3f80, "1+2^-23 rounds down"},
		{0x3f807fff, 0x3f80, "just below half an ulp rounds down"},
		{0x3f808000, 0x3f80, "1+2^-8: a tie, 0x3f80 is even: down"},
		{0x3f808001, 0x3f81, "just above half an ulp rounds up"},
		{0x3f818000, 0x3f82, "a tie with an odd 0x3f81: up to even"},
		{0xbf818000, 0xbf82, "negative tie rounds its magnitude to even"},
		{0xbf808000, 0xbf80, "negative tie, even: down"},
		{0xbf808001, 0xbf81, "negative above the tie"},
		{0x3fffffff, 0x4000, "1.9999999 carries into the exponent: 2"},
		{0x40490fdb, 0x4049, "pi: 3.140625"},
		{0x3dcccccd, 0x3dcd, "0.1: 0.10009765625"},
		{0x7f7f0000, 0x7f7f, "the largest finite bf16 is exact"},
		{0x7f7f7fff, 0x7f7f, "below the tie past the largest finite stays finite"},
		{0x7f7f8000, 0x7f80, "a tie past the largest finite (odd) overflows to +Inf"},
		{0x7f7fffff, 0x7f80, "the largest finite float32 overflows to +Inf"},
		{0xff7fffff, 0xff80, "and its negative to -Inf"},
		{0x7f800000, 0x7f80, "+Inf"},
		{0xff800000, 0xff80, "-Inf"},
		{0x00000000, 0x0000, "+0"},
		{0x80000000, 0x8000, "-0 keeps its sign"},
		{0x00000001, 0x0000, "the smallest denormal rounds to +0"},
		{0x80000001, 0x8000, "and its negative to -0"},
		{0x00008000, 0x0000, "a denormal tie, even: down to 0"},
		{0x00008001, 0x0001, "the smallest bf16 denormal"},
		{0x00018000, 0x0002, "a denormal tie, odd: up"},
		{0x00400000, 0x0040, "the denormal 2^-127 is exact"},
		{0x007fffff, 0x0080, "the largest denormal rounds up to the smallest normal"},
		{0x807fffff, 0x8080, "and its negative"},
		{0x00800000, 0x0080, "the smallest normal is exact"},
		{0x7fc00000, nan, "a quiet NaN"},
		{0x7f800001, nan, "a NaN with its payload in the low bits (not Inf)"},
		{0x7fbfffff, nan, "a signalling NaN"},
		{0xffffffff, nan, "a negative NaN with every payload bit (no wrap to 0)"},
		{0xff800001, nan, "a negative NaN with a low payload (not -Inf)"},
	} {
		got := RefBF16Bits(math.Float32frombits(c.in))
		if c.want == nan {
			if !math.IsNaN(float64(RefWidenBF16(got))) {
				t.Errorf("%#08x (%s): got %#04x, want a NaN", c.in, c.what, got)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%#08x (%s): got %#04x, want %#04x", c.in, c.what, got, c.want)
		}
	}
}

// TestRefBF16Nearest checks RefBF16Bits on random bit patterns against a
// second derivation in float64: the nearer of the two bf16 neighbours, the
// even one on a tie, and infinity past 2^128 - 2^119 (where the neighbour
// above the largest finite would be 2^128).
func TestRefBF16Nearest(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for range 200000 {
		b := r.Uint32()
		x := math.Float32frombits(b)
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			continue
		}
		mag := math.Abs(float64(x))
		down := math.Abs(float64(math.Float32frombits(b & 0xffff0000)))
		exp := int(b>>23&0xff) - 127
		if exp < -126 {
			exp = -126 // denormal: the ulp of the smallest normals
		}
		up := down + math.Ldexp(1, exp-7)
		want := down
		if d, u := mag-down, up-mag; u < d || u == d && b>>16&1 == 1 {
			want = up
		}
		if want >= 1<<128 {
			want = math.Inf(1)
		}
		want = math.Copysign(want, float64(x))
		if got := float64(RefRoundBF16(x)); got != want || math.Signbit(got) != math.Signbit(want) {
			t.Fatalf("%#08x (%g): got %g, want %g", b, x, got, want)
		}
	}
}
