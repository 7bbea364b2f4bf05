package kerneltest

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// Finite-difference checks of every backward kernel against the device's
// own forward. Each check picks a loss L(x) = Σ_k w_k·f(x)_k with random
// weights w, gets dL/dx from the backward kernel with dout = w, and compares
// a sample of its elements with central differences (L(x+h) - L(x-h))/2h of
// the float32 forward, summed in float64. With h around 1e-2 of the input's
// scale the truncation and rounding errors are both near 1e-5 relative, so
// the tolerance is GradRTol.

// GradRTol is the tolerance of the finite-difference checks.
const GradRTol = 5e-3

// gradChecks lists the backward kernels checked against finite differences.
var gradChecks = []testCase{
	{"Matmul", gradMatmul},
	{"LayerNorm", gradLayerNorm},
	{"ReLU", gradReLU},
	{"GELU", gradGELU},
	{"Attention", gradAttention},
	{"Embedding", gradEmbedding},
	{"CrossEntropy", gradCrossEntropy},
	{"LogProbGather", gradLogProbGather},
	{"Dropout", gradDropout},
	{"RMSNorm", gradRMSNorm},
	{"HeadRMSNorm", gradHeadRMSNorm},
	{"RoPE", gradRoPE},
	{"SwiGLU", gradSwiGLU},
	{"GQAAttention", gradGQAAttention},
	{"FlashAttention", gradFlashAttention},
}

// fdSamples is how many elements of each input the checks perturb.
const fdSamples = 24

// FDCheck compares analytic (dL/dx for all of x) with central differences
// of L(x) = Σ w·f(x) at up to fdSamples elements of x chosen at random
// (those listed in only, when it is not nil), perturbing by h·max(1,|x_i|).
func (e *Env) FDCheck(name string, x []float32, analytic []float32, w []float32, h, rtol float64, only []int, f func(x []float32) []float32) {
	e.T.Helper()
	if len(analytic) != len(x) {
		e.T.Fatalf("%s: gradient has %d elements, input %d", name, len(analytic), len(x))
	}
	idx := only
	if idx == nil {
		idx = make([]int, len(x))
		for i := range idx {
			idx[i] = i
		}
	}
	if len(idx) > fdSamples {
		e.Rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		idx = idx[:fdSamples]
	}
	loss := func(x []float32) float64 {
		out := f(x)
		var s float64
		for k, v := range out {
			s += float64(w[k]) * float64(v)
		}
		return s
	}
	var ss float64
	for _, g := range analytic {
		ss += float64(g) * float64(g)
	}
	scale := math.Sqrt(ss / float64(max(1, len(analytic))))
	xx := append([]float32(nil), x...)
	for _, i := range idx {
		step := h * math.Max(1, math.Abs(float64(x[i])))
		xp, xm := float32(float64(x[i])+step), float32(float64(x[i])-step)
		xx[i] = xp
		lp := loss(xx)
		xx[i] = xm
		lm := loss(xx)
		xx[i] = x[i]
		num := (lp - lm) / (float64(xp) - float64(xm))
		ana := float64(analytic[i])
		if d := math.Abs(num - ana); !(d <= rtol*(math.Abs(ana)+scale)) {
			e.T.Fatalf("%s: d/dx[%d] = %g by the backward kernel, %g by finite differences (scale %g)", name, i, ana, num, scale)
		}
	}
}

func gradMatmul(e *Env) {
	for _, sh := range [][3]int{{1, 1, 1}, {5, 7, 3}, {9, 16, 12}} {
		n, c, oc := sh[0], sh[1], sh[2]
		inp, wt, bias := e.Randn(n*c, 1), e.Randn(oc*c, 1), e.Randn(oc, 1)
		w := e.Randn(n*oc, 1)
		fwd := func(inp, wt, bias []float32) []float32 {
			out := e.Alloc(kernels.F32, n*oc)
			e.Dev.MatmulForward(out, e.F32(inp), e.F32(wt), e.F32(bias), n, c, oc)
			return e.Read(out)
		}
		dinp, dw, db := e.NaNs(n*c), e.F32(make([]float32, oc*c)), e.F32(make([]float32, oc))
		e.Dev.MatmulBackward(dinp, dw, db, e.F32(w), e.F32(inp), e.F32(wt), n, c, oc)
		name := fmt.Sprintf("Matmul n=%d c=%d oc=%d", n, c, oc)
		e.FDCheck(name+" dinp", inp, e.Read(dinp), w, 1e-2, GradRTol, nil, func(x []float32) []float32 { return fwd(x, wt, bias) })
		e.FDCheck(name+" dweight", wt, e.Read(dw), w, 1e-2, GradRTol, nil, func(x []float32) []float32 { return fwd(inp, x, bias) })
		e.FDCheck(name+" dbias", bias, e.Read(db), w, 1e-2, GradRTol, nil, func(x []float32) []float32 { return fwd(inp, wt, x) })
	}
}

func gradLayerNorm(e *Env) {
	for _, sh := range [][2]int{{1, 3}, {3, 7}, {4, 64}} {
		n, c := sh[0], sh[1]
		for _, affine := range []bool{false, true} {
			x := e.Randn(n*c, 1)
			var wt, bias []float32
			if affine {
				wt, bias = e.Randn(c, 1), e.Randn(c, 1)
			}
			w := e.Randn(n*c, 1)
			fwd := func(x, wt, bias []float32) []float32 {
				out, mean, rstd := e.Alloc(kernels.F32, n*c), e.Alloc(kernels.F32, n), e.Alloc(kernels.F32, n)
				e.Dev.LayerNormForward(out, mean, rstd, e.F32(x), e.MaybeF32(wt), e.MaybeF32(bias), n, c, 1e-5)
				return e.Read(out)
			}
			mean, rstd := e.NaNs(n), e.NaNs(n)
			xb, wb := e.F32(x), e.MaybeF32(wt)
			e.Dev.LayerNormForward(e.NaNs(n*c), mean, rstd, xb, wb, e.MaybeF32(bias), n, c, 1e-5)
			dx := e.F32(make([]float32, n*c))
			var dw, db kernels.Buffer
			if affine {
				dw, db = e.F32(make([]float32, c)), e.F32(make([]float32, c))
			}
			e.Dev.LayerNormBackward(dx, dw, db, e.F32(w), xb, wb, mean, rstd, n, c)
			name := fmt.Sprintf("LayerNorm n=%d c=%d affine=%v", n, c, affine)
			e.FDCheck(name+" dinp", x, e.Read(dx), w, 1e-2, GradRTol, nil, func(v []float32) []float32 { return fwd(v, wt, bias) })
			if affine {
				e.FDCheck(name+" dweight", wt, e.Read(dw), w, 1e-2, GradRTol, nil, func(v []float32) []float32 { return fwd(x, v, bias) })
				e.FDCheck(name+" dbias", bias, e.Read(db), w, 1e-2, GradRTol, nil, func(v []float32) []float32 { return fwd(x, wt, v) })
			}
		}
	}
}

// awayFromZero returns n values with |x| >= 0.1, so a step of 1e-2 never
// crosses ReLU's kink.
func awayFromZero(e *Env, n int) []float32 {
	x := e.Randn(n, 1)
	for i, v := range x {
		x[i] = float32(math.Copysign(0.1+math.Abs(float64(v)), float64(v)))
	}
	return x
}

func gradReLU(e *Env) {
	n := 200
	x, w := awayFromZero(e, n), e.Randn(n, 1)
	fwd := func(x []float32) []float32 {
		out := e.Alloc(kernels.F32, n)
		e.Dev.ReLUForward(out, e.F32(x), n)
		return e.Read(out)
	}
	out := e.F32(fwd(x))
	dx := e.NaNs(n)
	e.Dev.ReLUBackward(dx, e.F32(w), out, n)
	e.FDCheck("ReLU", x, e.Read(dx), w, 1e-2, GradRTol, nil, fwd)
}

func gradGELU(e *Env) {
	n := 200
	x, w := e.Randn(n, 2), e.Randn(n, 1)
	fwd := func(x []float32) []float32 {
		out := e.Alloc(kernels.F32, n)
		e.Dev.GELUForward(out, e.F32(x), n)
		return e.Read(out)
	}
	dx := e.NaNs(n)
	e.Dev.GELUBackward(dx, e.F32(w), e.F32(x), n)
	e.FDCheck("GELU", x, e.Read(dx), w, 1e-2, GradRTol, nil, fwd)
}

// gradAttention checks AttentionBackward with padding, fully masked rows
// included (their output, the mean of all values, depends on v only).
func gradAttention(e *Env) {
	for _, s := range []attnShape{{1, 1, 1, 16}, {2, 6, 2, 16}, {3, 7, 2, 8}, {2, 9, 1, 64}} {
		c := s.nh * s.hs
		for mname, mask := range attnMasks(e, s.b, s.t) {
			qkv := e.Randn(s.b*s.t*3*c, 1)
			mb := e.MaybeI32(mask)
			fwd := func(x []float32) []float32 {
				out, att := e.Alloc(kernels.F32, s.b*s.t*c), e.Alloc(kernels.F32, s.b*s.nh*s.t*s.t)
				e.Dev.AttentionForward(out, att, e.F32(x), mb, s.b, s.t, s.nh, s.hs)
				return e.Read(out)
			}
			att := e.NaNs(s.b * s.nh * s.t * s.t)
			qb := e.F32(qkv)
			e.Dev.AttentionForward(e.NaNs(s.b*s.t*c), att, qb, mb, s.b, s.t, s.nh, s.hs)
			name := fmt.Sprintf("Attention b=%d t=%d nh=%d hs=%d mask=%s", s.b, s.t, s.nh, s.hs, mname)
			w := e.Randn(s.b*s.t*c, 1)
			dqkv := e.NaNs(len(qkv))
			e.Dev.AttentionBackward(dqkv, e.F32(w), qb, att, mb, s.b, s.t, s.nh, s.hs)
			e.FDCheck(name, qkv, e.Read(dqkv), w, 1e-2, GradRTol, nil, fwd)
		}
	}
}

func gradEmbedding(e *Env) {
	n, v, c := 12, 5, 8
	table, ids, w := e.Randn(v*c, 1), e.RandIDs(n, v), e.Randn(n*c, 1)
	idb := e.I32(ids)
	fwd := func(x []float32) []float32 {
		out := e.Alloc(kernels.F32, n*c)
		e.Dev.EmbeddingForward(out, idb, e.F32(x), n, c)
		return e.Read(out)
	}
	dt := e.F32(make([]float32, v*c))
	e.Dev.EmbeddingBackward(dt, e.F32(w), idb, n, c)
	e.FDCheck("Embedding", table, e.Read(dt), w, 1e-2, GradRTol, nil, fwd)
}

func gradCrossEntropy(e *Env) {
	for _, sh := range [][2]int{{1, 1}, {5, 9}, {4, 300}} {
		n, v := sh[0], sh[1]
		x, w := e.Randn(n*v, 2), e.Randn(n, 1)
		tg := ceTargets(e, n, v, -100)
		tb := e.I32(tg)
		fwd := func(x []float32) []float32 {
			out := e.Alloc(kernels.F32, n)
			e.Dev.CrossEntropyForward(out, e.F32(x), tb, n, v, -100)
			return e.Read(out)
		}
		dx := e.NaNs(n * v)
		e.Dev.CrossEntropyBackward(dx, e.F32(w), e.F32(x), tb, n, v, -100)
		e.FDCheck(fmt.Sprintf("CrossEntropy n=%d v=%d", n, v), x, e.Read(dx), w, 1e-2, GradRTol, nil, fwd)
	}
}

// gradLogProbGather checks CrossEntropyBackward as LogProbGather's backward
// (dlosses = -dlogprobs).
func gradLogProbGather(e *Env) {
	for _, sh := range [][2]int{{1, 1}, {5, 9}, {4, 300}} {
		n, v := sh[0], sh[1]
		x, w := e.Randn(n*v, 2), e.Randn(n, 1)
		ids := e.RandIDs(n, v)
		ib := e.I32(ids)
		fwd := func(x []float32) []float32 {
			out := e.Alloc(kernels.F32, n)
			e.Dev.LogProbGather(out, e.F32(x), ib, n, v)
			return e.Read(out)
		}
		negw := make([]float32, n)
		for i := range w {
			negw[i] = -w[i]
		}
		dx := e.NaNs(n * v)
		e.Dev.CrossEntropyBackward(dx, e.F32(negw), e.F32(x), ib, n, v, -100)
		e.FDCheck(fmt.Sprintf("LogProbGather n=%d v=%d", n, v), x, e.Read(dx), w, 1e-2, GradRTol, nil, fwd)
	}
}

// gradDropout checks Mul(dinp, dout, scale) as DropoutForward's backward.
func gradDropout(e *Env) {
	n := 300
	x, w := e.Randn(n, 1), e.Randn(n, 1)
	fwd := func(x []float32) []float32 {
		out, sc := e.Alloc(kernels.F32, n), e.Alloc(kernels.F32, n)
		e.Dev.DropoutForward(out, sc, e.F32(x), 0.3, 7, n)
		return e.Read(out)
	}
	sc := e.NaNs(n)
	e.Dev.DropoutForward(e.NaNs(n), sc, e.F32(x), 0.3, 7, n)
	dx := e.NaNs(n)
	e.Dev.Mul(dx, e.F32(w), sc, n)
	e.FDCheck("Dropout", x, e.Read(dx), w, 1e-2, GradRTol, nil, fwd)
}
