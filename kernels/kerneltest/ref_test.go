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
