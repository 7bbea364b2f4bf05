package kerneltest

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// Conformance of the LLaMA-family ops (RMSNorm, HeadRMSNorm, RoPE, SwiGLU,
// GQAAttention, GQAAttentionDecode) against the float64 references of
// ref_llama.go.

// headCase is a HeadRMSNorm/RoPE layout: n rows of ld elements of which g
// heads of c, starting at column off, are the op's.
type headCase struct{ n, g, c, ld, off int }

// (No c = 1: there the whole gradient is the eps term, a difference of
// nearly equal numbers that the float32 rstd leaves about 1e-2 accurate.)
var headCases = []headCase{
	{1, 1, 2, 2, 0},
	{3, 1, 7, 7, 0},
	{4, 4, 16, 128, 0},  // the query heads of a packed qkv row, NH=4, NKV=2
	{5, 2, 16, 128, 64}, // its key heads
	{7, 3, 8, 30, 5},    // gaps on both sides
	{9, 6, 64, 640, 0},
}

// withOffset returns the buffer view of a [N,ld] matrix that starts at
// column off (HeadRMSNorm's and RoPE's x for the key heads).
func withOffset(b kernels.Buffer, off int) kernels.Buffer { return b.Slice(off, b.Len()-off) }

// headsOf returns the dense [N·g, c] matrix of a layout's heads in x.
func (h headCase) headsOf(x []float64) []float64 {
	return gatherHeads(x[h.off:], h.n, h.g, h.c, h.ld)
}

// withHeads returns x with the layout's heads replaced by heads [N·g, c].
func (h headCase) withHeads(x, heads []float64) []float64 {
	out := append([]float64(nil), x...)
	scatterHeads(out[h.off:], heads, h.n, h.g, h.c, h.ld)
	return out
}

func testRMSNorm(e *Env) {
	const eps = 1e-6
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {5, 768}, {17, 100}, {64, 33}} {
		n, c := sh[0], sh[1]
		for _, affine := range []bool{false, true} {
			x := e.Randn(n*c, 1.5)
			for i := range x {
				x[i] += 0.7
			}
			var w []float32
			if affine {
				w = e.Randn(c, 1)
			}
			name := fmt.Sprintf("RMSNorm n=%d c=%d weight=%v", n, c, affine)
			out, rstd := e.NaNs(n*c), e.NaNs(n)
			xb, wb := e.F32(x), e.MaybeF32(w)
			e.Dev.RMSNormForward(out, rstd, xb, wb, n, c, eps)
			ro, rr := RefRMSNormForward(F64(x), F64(w), n, c, eps)
			e.Close(name+" out", e.Read(out), ro, RTol)
			e.Close(name+" rstd", e.Read(rstd), rr, RTol)

			dout, dx0, dw0 := e.Randn(n*c, 1), e.Randn(n*c, 1), e.Randn(c, 1)
			dx := e.F32(dx0)
			var dw kernels.Buffer
			if affine {
				dw = e.F32(dw0)
			}
			e.Dev.RMSNormBackward(dx, dw, e.F32(dout), xb, wb, rstd, n, c)
			rdx, rdw := RefRMSNormBackward(F64(dout), F64(x), F64(w), n, c, eps)
			e.Close(name+" dinp (accumulated)", e.Read(dx), add64(rdx, F64(dx0)), RTol)
			if dw != nil {
				e.Close(name+" dweight (accumulated)", e.Read(dw), add64(rdw, F64(dw0)), RTol)
			}
		}
	}
}

func testHeadRMSNorm(e *Env) {
	const eps = 1e-6
	for _, h := range headCases {
		size := h.n * h.ld
		x, w := e.Randn(size, 2), e.Randn(h.c, 1)
		name := fmt.Sprintf("HeadRMSNorm n=%d g=%d c=%d ld=%d off=%d", h.n, h.g, h.c, h.ld, h.off)
		// out starts as other values: only the heads may change.
		o0 := e.Randn(size, 1)
		out, rstd := e.F32(o0), e.NaNs(h.n*h.g)
		xb, wb := e.F32(x), e.F32(w)
		e.Dev.HeadRMSNormForward(withOffset(out, h.off), rstd, withOffset(xb, h.off), wb, h.n, h.g, h.c, h.ld, eps)
		ro, rr := RefRMSNormForward(h.headsOf(F64(x)), F64(w), h.n*h.g, h.c, eps)
		e.Close(name+" out", e.Read(out), h.withHeads(F64(o0), ro), RTol)
		e.Close(name+" rstd", e.Read(rstd), rr, RTol)

		dout, dx0, dw0 := e.Randn(size, 1), e.Randn(size, 1), e.Randn(h.c, 1)
		rdx, rdw := RefRMSNormBackward(h.headsOf(F64(dout)), h.headsOf(F64(x)), F64(w), h.n*h.g, h.c, eps)
		dx, dw := e.F32(dx0), e.F32(dw0)
		e.Dev.HeadRMSNormBackward(withOffset(dx, h.off), dw, withOffset(e.F32(dout), h.off), withOffset(xb, h.off), wb, rstd, h.n, h.g, h.c, h.ld)
		e.Close(name+" dinp (overwritten)", e.Read(dx), h.withHeads(F64(dx0), rdx), RTol)
		e.Close(name+" dweight (accumulated)", e.Read(dw), add64(rdw, F64(dw0)), RTol)
		// In place (dinp aliasing dout), without dweight.
		db := e.F32(dout)
		e.Dev.HeadRMSNormBackward(withOffset(db, h.off), nil, withOffset(db, h.off), withOffset(xb, h.off), wb, rstd, h.n, h.g, h.c, h.ld)
		e.Close(name+" dinp in place", e.Read(db), h.withHeads(F64(dout), rdx), RTol)
	}
}

// ropeTables returns the cos and sin tables of RoPETable for head size hs
// and maxPos positions, llama3-scaled so that all three bands occur.
func ropeTables(e *Env, hs, maxPos int) (cos, sin []float32) {
	inv, err := kernels.RoPEInvFreq(hs, 10000, kernels.RoPEScaling{Type: "llama3", Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64})
	if err != nil {
		e.T.Fatal(err)
	}
	return kernels.RoPETable(inv, maxPos)
}

// ropeCases are RoPE layouts: the rotated heads must have an even size.
var ropeCases = []headCase{
	{1, 1, 2, 2, 0},
	{3, 1, 8, 8, 0},
	{6, 6, 16, 128, 0}, // q and k of a packed qkv row, NH=4, NKV=2
	{5, 1, 64, 256, 128},
	{4, 2, 8, 21, 3},
	{33, 3, 32, 160, 0},
}

func testRoPE(e *Env) {
	const maxPos = 300
	for _, h := range ropeCases {
		cos, sin := ropeTables(e, h.c, maxPos)
		x := e.Randn(h.n*h.ld, 1)
		pos := make([]int32, h.n)
		for i := range pos {
			pos[i] = int32(e.Rng.IntN(maxPos))
		}
		pos[0] = maxPos - 1
		name := fmt.Sprintf("RoPE n=%d nh=%d hs=%d ld=%d off=%d", h.n, h.g, h.c, h.ld, h.off)
		xb, pb, cb, sb := e.F32(x), e.I32(pos), e.F32(cos), e.F32(sin)
		e.Dev.RoPEForward(withOffset(xb, h.off), pb, cb, sb, h.n, h.g, h.c, h.ld)
		want := make([]float64, len(x))
		copy(want, F64(x))
		copy(want[h.off:], RefRoPE(F64(x[h.off:]), pos, F64(cos), F64(sin), h.n, h.g, h.c, h.ld, false))
		e.Close(name+" forward", e.Read(xb), want, RTol)

		g := e.Randn(h.n*h.ld, 1)
		gb := e.F32(g)
		e.Dev.RoPEBackward(withOffset(gb, h.off), pb, cb, sb, h.n, h.g, h.c, h.ld)
		copy(want, F64(g))
		copy(want[h.off:], RefRoPE(F64(g[h.off:]), pos, F64(cos), F64(sin), h.n, h.g, h.c, h.ld, true))
		e.Close(name+" backward", e.Read(gb), want, RTol)

		// The backward undoes the forward (the rotation is orthogonal).
		e.Dev.RoPEBackward(withOffset(xb, h.off), pb, cb, sb, h.n, h.g, h.c, h.ld)
		e.Close(name+" backward∘forward", e.Read(xb), F64(x), RTol)
	}
}

func testSwiGLU(e *Env) {
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {17, 100}, {4, 1536}, {2, 20000}} {
		n, f := sh[0], sh[1]
		x := e.Randn(n*2*f, 3)
		if n*f > 4 {
			x[0], x[1], x[2], x[3] = 0, -40, 40, -1e-3
		}
		name := fmt.Sprintf("SwiGLU n=%d f=%d", n, f)
		out := e.NaNs(n * f)
		xb := e.F32(x)
		e.Dev.SwiGLUForward(out, xb, n, f)
		e.Close(name+" forward", e.Read(out), RefSwiGLUForward(F64(x), n, f), RTol)
		dout := e.Randn(n*f, 1)
		dx := e.NaNs(n * 2 * f)
		e.Dev.SwiGLUBackward(dx, e.F32(dout), xb, n, f)
		e.Close(name+" backward", e.Read(dx), RefSwiGLUBackward(F64(dout), F64(x), n, f), RTol)
	}
}

// gqaShape is a test configuration of the grouped-query attention kernels.
type gqaShape struct{ b, t, nh, nkv, hs int }

var gqaShapes = []gqaShape{
	{1, 1, 1, 1, 16}, {2, 5, 2, 1, 16}, {2, 17, 6, 2, 64}, {1, 33, 4, 4, 8},
	{3, 9, 4, 2, 20}, {2, 40, 8, 1, 32}, {2, 6, 9, 3, 24},
}

func (s gqaShape) String() string {
	return fmt.Sprintf("b=%d t=%d nh=%d nkv=%d hs=%d", s.b, s.t, s.nh, s.nkv, s.hs)
}

func (s gqaShape) width() int { return (s.nh + 2*s.nkv) * s.hs }

func testGQAAttention(e *Env) {
	for _, s := range gqaShapes {
		cq := s.nh * s.hs
		for mname, mask := range attnMasks(e, s.b, s.t) {
			name := fmt.Sprintf("GQAAttention %v mask=%s", s, mname)
			qkv := e.Randn(s.b*s.t*s.width(), 1)
			out, att := e.NaNs(s.b*s.t*cq), e.NaNs(s.b*s.nh*s.t*s.t)
			qb, mb := e.F32(qkv), e.MaybeI32(mask)
			e.Dev.GQAAttentionForward(out, att, qb, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			ro, ra := RefGQAAttentionForward(F64(qkv), mask, s.b, s.t, s.nh, s.nkv, s.hs)
			e.Close(name+" out", e.Read(out), ro, RTol)
			e.Close(name+" att", e.Read(att), ra, RTol)

			dout := e.Randn(s.b*s.t*cq, 1)
			dqkv := e.NaNs(len(qkv))
			e.Dev.GQAAttentionBackward(dqkv, e.F32(dout), qb, att, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			e.Close(name+" dqkv", e.Read(dqkv), RefGQAAttentionBackward(F64(dout), F64(qkv), mask, s.b, s.t, s.nh, s.nkv, s.hs), 2*RTol)

			if s.nkv == s.nh {
				// The same packed layout as OPT's [B,T,3C]: AttentionForward's answer.
				o2, a2 := e.NaNs(s.b*s.t*cq), e.NaNs(s.b*s.nh*s.t*s.t)
				e.Dev.AttentionForward(o2, a2, qb, mb, s.b, s.t, s.nh, s.hs)
				e.Close(name+" out vs AttentionForward", e.Read(out), F64(e.Read(o2)), 1e-6)
			}
		}
	}
}

func testGQAAttentionDecode(e *Env) {
	for _, s := range gqaShapes {
		w, cq := s.width(), s.nh*s.hs
		kvw := s.nkv * s.hs
		tmax := s.t + 3
		for mname, mask := range attnMasks(e, s.b, s.t) {
			name := fmt.Sprintf("GQAAttentionDecode %v mask=%s", s, mname)
			var mmax []int32 // the mask widened to [B,Tmax]; later entries 0
			if mask != nil {
				mmax = make([]int32, s.b*tmax)
				for bi := range s.b {
					copy(mmax[bi*tmax:], mask[bi*s.t:(bi+1)*s.t])
				}
			}
			qkv := e.Randn(s.b*s.t*w, 1)
			fout := e.NaNs(s.b * s.t * cq)
			e.Dev.GQAAttentionForward(fout, e.NaNs(s.b*s.nh*s.t*s.t), e.F32(qkv), e.MaybeI32(mask), s.b, s.t, s.nh, s.nkv, s.hs)
			full := e.Read(fout)
			// The caches start as NaN: positions not yet written must never be read.
			newCaches := func() (kernels.Buffer, kernels.Buffer) {
				return e.NaNs(s.b * tmax * kvw), e.NaNs(s.b * tmax * kvw)
			}
			mb := e.MaybeI32(mmax)
			// kc64, vc64: the caches [B,NKV,Tmax,HS] as the reference fills them.
			kc64, vc64 := make([]float64, s.b*tmax*kvw), make([]float64, s.b*tmax*kvw)
			for bi := range s.b {
				for ti := range s.t {
					src := qkv[(bi*s.t+ti)*w:]
					for kv := range s.nkv {
						for j := range s.hs {
							at := ((bi*s.nkv+kv)*tmax+ti)*s.hs + j
							kc64[at] = float64(src[(s.nh+kv)*s.hs+j])
							vc64[at] = float64(src[(s.nh+s.nkv+kv)*s.hs+j])
						}
					}
				}
			}

			// 1. The whole sequence at once equals GQAAttentionForward, and
			// the caches hold k and v at positions 0..T-1.
			kc, vc := newCaches()
			out := e.NaNs(s.b * s.t * cq)
			e.Dev.GQAAttentionDecode(out, e.F32(qkv), kc, vc, mb, s.b, s.t, 0, tmax, s.nh, s.nkv, s.hs)
			e.Close(name+" t0=0 tn=T vs GQAAttentionForward", e.Read(out), F64(full), RTol) // as in testAttentionDecode
			kcache, vcache := e.Read(kc), e.Read(vc)
			for bi := range s.b {
				for kv := range s.nkv {
					for ti := range s.t {
						for j := range s.hs {
							at := ((bi*s.nkv+kv)*tmax+ti)*s.hs + j
							if float64(kcache[at]) != kc64[at] || float64(vcache[at]) != vc64[at] {
								e.T.Fatalf("%s: cache position %d of batch %d, kv head %d differs from qkv", name, ti, bi, kv)
							}
						}
					}
				}
			}

			// 2. One token at a time reproduces the forward where the query
			// sees a real key; a fully masked one is uniform over the keys so far.
			kc, vc = newCaches()
			step := make([]float64, s.b*s.t*cq)
			ref := make([]float64, s.b*s.t*cq)
			for ti := range s.t {
				one := make([]float32, s.b*w)
				for bi := range s.b {
					copy(one[bi*w:(bi+1)*w], qkv[(bi*s.t+ti)*w:])
				}
				o1 := e.NaNs(s.b * cq)
				e.Dev.GQAAttentionDecode(o1, e.F32(one), kc, vc, mb, s.b, 1, ti, tmax, s.nh, s.nkv, s.hs)
				r1 := RefGQAAttentionDecode(F64(one), kc64, vc64, mmax, s.b, 1, ti, tmax, s.nh, s.nkv, s.hs)
				got := e.Read(o1)
				for bi := range s.b {
					for j := range cq {
						step[(bi*s.t+ti)*cq+j] = float64(got[bi*cq+j])
						if fullyMasked(mask, bi, ti, s.t) {
							ref[(bi*s.t+ti)*cq+j] = r1[bi*cq+j]
						} else {
							ref[(bi*s.t+ti)*cq+j] = float64(full[(bi*s.t+ti)*cq+j])
						}
					}
				}
			}
			e.Close(name+" one token at a time", toF32(step), ref, RTol)

			// 3. A prompt then chunks of 2 against the reference.
			kc, vc = newCaches()
			for t0 := 0; t0 < s.t; {
				tn := max(1, s.t/2)
				if t0 > 0 {
					tn = min(2, s.t-t0)
				}
				chunk := make([]float32, s.b*tn*w)
				for bi := range s.b {
					copy(chunk[bi*tn*w:(bi+1)*tn*w], qkv[(bi*s.t+t0)*w:])
				}
				oc := e.NaNs(s.b * tn * cq)
				e.Dev.GQAAttentionDecode(oc, e.F32(chunk), kc, vc, mb, s.b, tn, t0, tmax, s.nh, s.nkv, s.hs)
				rc := RefGQAAttentionDecode(F64(chunk), kc64, vc64, mmax, s.b, tn, t0, tmax, s.nh, s.nkv, s.hs)
				e.Close(fmt.Sprintf("%s chunk t0=%d tn=%d", name, t0, tn), e.Read(oc), rc, RTol)
				t0 += tn
			}
		}
	}
}

// Gradient checks (gradcheck.go's FDCheck) of the LLaMA-family backwards.

func gradRMSNorm(e *Env) {
	for _, sh := range [][2]int{{1, 3}, {3, 7}, {4, 64}} {
		n, c := sh[0], sh[1]
		for _, affine := range []bool{false, true} {
			x := e.Randn(n*c, 1)
			var wt []float32
			if affine {
				wt = e.Randn(c, 1)
			}
			w := e.Randn(n*c, 1)
			fwd := func(x, wt []float32) []float32 {
				out, rstd := e.Alloc(kernels.F32, n*c), e.Alloc(kernels.F32, n)
				e.Dev.RMSNormForward(out, rstd, e.F32(x), e.MaybeF32(wt), n, c, 1e-6)
				return e.Read(out)
			}
			rstd := e.NaNs(n)
			xb, wb := e.F32(x), e.MaybeF32(wt)
			e.Dev.RMSNormForward(e.NaNs(n*c), rstd, xb, wb, n, c, 1e-6)
			dx := e.F32(make([]float32, n*c))
			var dw kernels.Buffer
			if affine {
				dw = e.F32(make([]float32, c))
			}
			e.Dev.RMSNormBackward(dx, dw, e.F32(w), xb, wb, rstd, n, c)
			name := fmt.Sprintf("RMSNorm n=%d c=%d affine=%v", n, c, affine)
			e.FDCheck(name+" dinp", x, e.Read(dx), w, 1e-2, GradRTol, nil, func(v []float32) []float32 { return fwd(v, wt) })
			if affine {
				e.FDCheck(name+" dweight", wt, e.Read(dw), w, 1e-2, GradRTol, nil, func(v []float32) []float32 { return fwd(x, v) })
			}
		}
	}
}

func gradHeadRMSNorm(e *Env) {
	for _, h := range []headCase{{2, 3, 5, 20, 2}, {3, 2, 16, 64, 0}} {
		size := h.n * h.ld
		x, wt, w := e.Randn(size, 1), e.Randn(h.c, 1), e.Randn(size, 1)
		// The loss reads the whole rows: the other elements of out keep
		// out's initial zeros, so they add nothing.
		fwd := func(x, wt []float32) []float32 {
			out, rstd := e.F32(make([]float32, size)), e.Alloc(kernels.F32, h.n*h.g)
			e.Dev.HeadRMSNormForward(withOffset(out, h.off), rstd, withOffset(e.F32(x), h.off), e.F32(wt), h.n, h.g, h.c, h.ld, 1e-6)
			return e.Read(out)
		}
		rstd := e.NaNs(h.n * h.g)
		xb, wb := e.F32(x), e.F32(wt)
		e.Dev.HeadRMSNormForward(withOffset(e.F32(make([]float32, size)), h.off), rstd, withOffset(xb, h.off), wb, h.n, h.g, h.c, h.ld, 1e-6)
		// dinp starts as zeros; the elements outside the heads stay zero,
		// as their derivative is.
		dx, dw := e.F32(make([]float32, size)), e.F32(make([]float32, h.c))
		e.Dev.HeadRMSNormBackward(withOffset(dx, h.off), dw, withOffset(e.F32(w), h.off), withOffset(xb, h.off), wb, rstd, h.n, h.g, h.c, h.ld)
		name := fmt.Sprintf("HeadRMSNorm n=%d g=%d c=%d ld=%d", h.n, h.g, h.c, h.ld)
		e.FDCheck(name+" dinp", x, e.Read(dx), w, 1e-2, GradRTol, nil, func(v []float32) []float32 { return fwd(v, wt) })
		e.FDCheck(name+" dweight", wt, e.Read(dw), w, 1e-2, GradRTol, nil, func(v []float32) []float32 { return fwd(x, v) })
	}
}

func gradRoPE(e *Env) {
	const maxPos = 100
	for _, h := range []headCase{{3, 2, 8, 20, 2}, {4, 3, 16, 80, 0}} {
		cos, sin := ropeTables(e, h.c, maxPos)
		size := h.n * h.ld
		pos := make([]int32, h.n)
		for i := range pos {
			pos[i] = int32(e.Rng.IntN(maxPos))
		}
		pb, cb, sb := e.I32(pos), e.F32(cos), e.F32(sin)
		x, w := e.Randn(size, 1), e.Randn(size, 1)
		fwd := func(x []float32) []float32 {
			xb := e.F32(x)
			e.Dev.RoPEForward(withOffset(xb, h.off), pb, cb, sb, h.n, h.g, h.c, h.ld)
			return e.Read(xb)
		}
		dx := e.F32(w)
		e.Dev.RoPEBackward(withOffset(dx, h.off), pb, cb, sb, h.n, h.g, h.c, h.ld)
		e.FDCheck(fmt.Sprintf("RoPE n=%d nh=%d hs=%d ld=%d", h.n, h.g, h.c, h.ld), x, e.Read(dx), w, 1e-2, GradRTol, nil, fwd)
	}
}

func gradSwiGLU(e *Env) {
	n, f := 7, 30
	x, w := e.Randn(n*2*f, 2), e.Randn(n*f, 1)
	fwd := func(x []float32) []float32 {
		out := e.Alloc(kernels.F32, n*f)
		e.Dev.SwiGLUForward(out, e.F32(x), n, f)
		return e.Read(out)
	}
	dx := e.NaNs(n * 2 * f)
	e.Dev.SwiGLUBackward(dx, e.F32(w), e.F32(x), n, f)
	e.FDCheck("SwiGLU", x, e.Read(dx), w, 1e-2, GradRTol, nil, fwd)
}

// gradGQAAttention checks GQAAttentionBackward with padding, fully masked
// rows included.
func gradGQAAttention(e *Env) {
	for _, s := range []gqaShape{{1, 1, 1, 1, 16}, {2, 6, 4, 2, 8}, {3, 7, 3, 1, 8}, {2, 9, 2, 2, 16}} {
		cq := s.nh * s.hs
		for mname, mask := range attnMasks(e, s.b, s.t) {
			qkv := e.Randn(s.b*s.t*s.width(), 1)
			mb := e.MaybeI32(mask)
			fwd := func(x []float32) []float32 {
				out, att := e.Alloc(kernels.F32, s.b*s.t*cq), e.Alloc(kernels.F32, s.b*s.nh*s.t*s.t)
				e.Dev.GQAAttentionForward(out, att, e.F32(x), mb, s.b, s.t, s.nh, s.nkv, s.hs)
				return e.Read(out)
			}
			att := e.NaNs(s.b * s.nh * s.t * s.t)
			qb := e.F32(qkv)
			e.Dev.GQAAttentionForward(e.NaNs(s.b*s.t*cq), att, qb, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			w := e.Randn(s.b*s.t*cq, 1)
			dqkv := e.NaNs(len(qkv))
			e.Dev.GQAAttentionBackward(dqkv, e.F32(w), qb, att, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			e.FDCheck(fmt.Sprintf("GQAAttention %v mask=%s", s, mname), qkv, e.Read(dqkv), w, 1e-2, GradRTol, nil, fwd)
		}
	}
}

// The bf16 tier: RMSNorm's and HeadRMSNorm's weights may be BF16 (widened;
// the norm runs in fp32), so the fp32 tier's references on the rounded
// weights and its tolerance apply.

func testBF16RMSNorm(e *Env) {
	const eps = 1e-5
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {5, 768}, {17, 100}} {
		n, c := sh[0], sh[1]
		x, w := e.Randn(n*c, 1.5), e.Randn(c, 1)
		rw := RefRoundBF16s(w)
		name := fmt.Sprintf("RMSNorm bf16 weight n=%d c=%d", n, c)
		out, rstd := e.NaNs(n*c), e.NaNs(n)
		xb, wb := e.F32(x), e.BF16(w)
		e.Dev.RMSNormForward(out, rstd, xb, wb, n, c, eps)
		ro, rr := RefRMSNormForward(F64(x), F64(rw), n, c, eps)
		e.Close(name+" out", e.Read(out), ro, RTol)
		e.Close(name+" rstd", e.Read(rstd), rr, RTol)
		dout, dx0, dw0 := e.Randn(n*c, 1), e.Randn(n*c, 1), e.Randn(c, 1)
		dx, dw := e.F32(dx0), e.F32(dw0)
		e.Dev.RMSNormBackward(dx, dw, e.F32(dout), xb, wb, rstd, n, c)
		rdx, rdw := RefRMSNormBackward(F64(dout), F64(x), F64(rw), n, c, eps)
		e.Close(name+" dinp (accumulated)", e.Read(dx), add64(rdx, F64(dx0)), RTol)
		e.Close(name+" dweight (accumulated)", e.Read(dw), add64(rdw, F64(dw0)), RTol)
	}
}

func testBF16HeadRMSNorm(e *Env) {
	const eps = 1e-6
	for _, h := range headCases[2:] {
		size := h.n * h.ld
		x, w := e.Randn(size, 2), e.Randn(h.c, 1)
		rw := RefRoundBF16s(w)
		name := fmt.Sprintf("HeadRMSNorm bf16 weight n=%d g=%d c=%d ld=%d", h.n, h.g, h.c, h.ld)
		o0 := e.Randn(size, 1)
		out, rstd := e.F32(o0), e.NaNs(h.n*h.g)
		xb, wb := e.F32(x), e.BF16(w)
		e.Dev.HeadRMSNormForward(withOffset(out, h.off), rstd, withOffset(xb, h.off), wb, h.n, h.g, h.c, h.ld, eps)
		ro, _ := RefRMSNormForward(h.headsOf(F64(x)), F64(rw), h.n*h.g, h.c, eps)
		e.Close(name+" out", e.Read(out), h.withHeads(F64(o0), ro), RTol)
		dout, dw0 := e.Randn(size, 1), e.Randn(h.c, 1)
		db, dw := e.F32(dout), e.F32(dw0)
		e.Dev.HeadRMSNormBackward(withOffset(db, h.off), dw, withOffset(db, h.off), withOffset(xb, h.off), wb, rstd, h.n, h.g, h.c, h.ld)
		rdx, rdw := RefRMSNormBackward(h.headsOf(F64(dout)), h.headsOf(F64(x)), F64(rw), h.n*h.g, h.c, eps)
		e.Close(name+" dinp in place", e.Read(db), h.withHeads(F64(dout), rdx), RTol)
		e.Close(name+" dweight (accumulated)", e.Read(dw), add64(rdw, F64(dw0)), RTol)
	}
}

// testDecodeLongCache runs AttentionDecode and GQAAttentionDecode for one
// and for three new tokens after a long cache (where a backend may split
// the keys over several blocks: CUDA's split-K flash decoding), against
// the float64 references, with left padding and a batch row that is
// padding only (its queries fully masked: uniform over every key). Cache
// positions past the new tokens hold NaN and must not be read.
func testDecodeLongCache(e *Env) {
	const b, nh, hs, t0, tmax = 2, 4, 32, 1500, 1504
	for _, nkv := range []int{nh, 2} { // nkv = nh: AttentionDecode's OPT layout
		w, kvw := (nh+2*nkv)*hs, nkv*hs
		left := make([]int32, b*tmax)
		for j := 300; j < tmax; j++ {
			left[j] = 1 // row 0: 300 padding positions; row 1: padding only
		}
		for mname, mask := range map[string][]int32{"nil": nil, "left": left} {
			// at is the cache index of (batch, kv head, position, element).
			at := func(bi, g, pos, d int) int {
				if nkv == nh {
					return (bi*tmax+pos)*kvw + g*hs + d
				}
				return ((bi*nkv+g)*tmax+pos)*hs + d
			}
			kc0, vc0 := e.Randn(b*tmax*kvw, 1), e.Randn(b*tmax*kvw, 1)
			for bi := range b {
				for g := range nkv {
					for pos := t0; pos < tmax; pos++ {
						for d := range hs {
							kc0[at(bi, g, pos, d)], vc0[at(bi, g, pos, d)] = float32(math.NaN()), float32(math.NaN())
						}
					}
				}
			}
			for _, tn := range []int{1, 3} {
				name := fmt.Sprintf("decode after a long cache b=%d nh=%d nkv=%d hs=%d t0=%d tn=%d mask=%s", b, nh, nkv, hs, t0, tn, mname)
				qkv := e.Randn(b*tn*w, 1)
				kc64, vc64 := F64(kc0), F64(vc0)
				for bi := range b {
					for i := range tn {
						for g := range nkv {
							for d := range hs {
								kc64[at(bi, g, t0+i, d)] = float64(qkv[(bi*tn+i)*w+(nh+g)*hs+d])
								vc64[at(bi, g, t0+i, d)] = float64(qkv[(bi*tn+i)*w+(nh+nkv+g)*hs+d])
							}
						}
					}
				}
				out := e.NaNs(b * tn * nh * hs)
				kc, vc := e.F32(kc0), e.F32(vc0)
				var want []float64
				if nkv == nh {
					e.Dev.AttentionDecode(out, e.F32(qkv), kc, vc, e.MaybeI32(mask), b, tn, t0, tmax, nh, hs)
					want = RefAttentionDecode(F64(qkv), kc64, vc64, mask, b, tn, t0, tmax, nh, hs)
				} else {
					e.Dev.GQAAttentionDecode(out, e.F32(qkv), kc, vc, e.MaybeI32(mask), b, tn, t0, tmax, nh, nkv, hs)
					want = RefGQAAttentionDecode(F64(qkv), kc64, vc64, mask, b, tn, t0, tmax, nh, nkv, hs)
				}
				e.Close(name, e.Read(out), want, RTol)
			}
		}
	}
}
