package kerneltest

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// The kernels.FlashAttention capability: on a device that has it, the
// flash kernels against the float64 references and against the device's
// own composed kernels (GQAAttentionForward/Backward, AttentionForward for
// OPT's layout), and the backward against finite differences of the flash
// forward. A device without it skips these tests.

// flashShapes are the GQA shapes plus ones whose T is not a multiple of
// the backends' block sizes and spans several blocks (64 query rows on the
// CPU, tiles of 8 and 4 on CUDA).
var flashShapes = append(append([]gqaShape(nil), gqaShapes...), gqaShape{2, 70, 4, 2, 16}, gqaShape{1, 131, 2, 1, 8}, gqaShape{2, 64, 3, 3, 32})

// flashDevice returns the device's FlashAttention, or skips the test.
func flashDevice(e *Env) kernels.FlashAttention {
	fa, ok := e.Dev.(kernels.FlashAttention)
	if !ok {
		e.T.Skipf("%s does not implement kernels.FlashAttention", e.Dev.Name())
	}
	return fa
}

// RefAttentionLSE returns lse[B,NH,T] of FlashAttentionForward: log Σ_j
// exp(s_j) over the visible keys of each query, with s_j = q·k_j·HS^-0.5,
// and log T for a fully masked query.
func RefAttentionLSE(qkv []float64, mask []int32, b, t, nh, nkv, hs int) []float64 {
	w := (nh + 2*nkv) * hs
	scale := 1 / math.Sqrt(float64(hs))
	lse := make([]float64, b*nh*t)
	for bi := range b {
		for h := range nh {
			qo, ko, _ := gqaSplit(h, nh, nkv, hs)
			for ti := range t {
				at := (bi*nh+h)*t + ti
				if fullyMasked(mask, bi, ti, t) {
					lse[at] = math.Log(float64(t))
					continue
				}
				var s []float64
				m := math.Inf(-1)
				for j := 0; j <= ti; j++ {
					if mask != nil && mask[bi*t+j] == 0 {
						continue
					}
					var dot float64
					for e := range hs {
						dot += qkv[(bi*t+ti)*w+qo+e] * scale * qkv[(bi*t+j)*w+ko+e]
					}
					s = append(s, dot)
					m = math.Max(m, dot)
				}
				var sum float64
				for _, x := range s {
					sum += math.Exp(x - m)
				}
				lse[at] = m + math.Log(sum)
			}
		}
	}
	return lse
}

func testFlashAttention(e *Env) {
	fa := flashDevice(e)
	for _, s := range flashShapes {
		cq := s.nh * s.hs
		for mname, mask := range attnMasks(e, s.b, s.t) {
			name := fmt.Sprintf("FlashAttention %v mask=%s", s, mname)
			qkv := e.Randn(s.b*s.t*s.width(), 1)
			qb, mb := e.F32(qkv), e.MaybeI32(mask)
			out, lse := e.NaNs(s.b*s.t*cq), e.NaNs(s.b*s.nh*s.t)
			fa.FlashAttentionForward(out, lse, qb, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			ro, _ := RefGQAAttentionForward(F64(qkv), mask, s.b, s.t, s.nh, s.nkv, s.hs)
			gotOut, gotLSE := e.Read(out), e.Read(lse)
			e.Close(name+" out", gotOut, ro, RTol)
			e.Close(name+" lse", gotLSE, RefAttentionLSE(F64(qkv), mask, s.b, s.t, s.nh, s.nkv, s.hs), RTol)

			// The composed kernels on the same device.
			cout, att := e.NaNs(s.b*s.t*cq), e.NaNs(s.b*s.nh*s.t*s.t)
			e.Dev.GQAAttentionForward(cout, att, qb, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			e.Close(name+" out vs GQAAttentionForward", gotOut, F64(e.Read(cout)), RTol)

			dout := e.Randn(s.b*s.t*cq, 1)
			db := e.F32(dout)
			dqkv := e.NaNs(len(qkv))
			fa.FlashAttentionBackward(dqkv, db, qb, lse, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			got := e.Read(dqkv)
			e.Close(name+" dqkv", got, RefGQAAttentionBackward(F64(dout), F64(qkv), mask, s.b, s.t, s.nh, s.nkv, s.hs), 2*RTol)
			cdqkv := e.NaNs(len(qkv))
			e.Dev.GQAAttentionBackward(cdqkv, db, qb, att, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			e.Close(name+" dqkv vs GQAAttentionBackward", got, F64(e.Read(cdqkv)), 2*RTol)

			if s.nkv == s.nh {
				// OPT's packed [B,T,3C] is the same layout with NKV = NH:
				// AttentionForward's and AttentionBackward's answers.
				o2, a2 := e.NaNs(s.b*s.t*cq), e.NaNs(s.b*s.nh*s.t*s.t)
				e.Dev.AttentionForward(o2, a2, qb, mb, s.b, s.t, s.nh, s.hs)
				e.Close(name+" out vs AttentionForward", gotOut, F64(e.Read(o2)), RTol)
				d2 := e.NaNs(len(qkv))
				e.Dev.AttentionBackward(d2, db, qb, a2, mb, s.b, s.t, s.nh, s.hs)
				e.Close(name+" dqkv vs AttentionBackward", got, F64(e.Read(d2)), 2*RTol)
			}
		}
	}
}

// gradFlashAttention checks FlashAttentionBackward against finite
// differences of FlashAttentionForward, with padding and fully masked rows.
func gradFlashAttention(e *Env) {
	fa := flashDevice(e)
	for _, s := range []gqaShape{{1, 1, 1, 1, 16}, {2, 6, 4, 2, 8}, {3, 7, 3, 1, 8}, {2, 9, 2, 2, 16}, {1, 19, 2, 1, 8}} {
		cq := s.nh * s.hs
		for mname, mask := range attnMasks(e, s.b, s.t) {
			qkv := e.Randn(s.b*s.t*s.width(), 1)
			mb := e.MaybeI32(mask)
			fwd := func(x []float32) []float32 {
				out, lse := e.Alloc(kernels.F32, s.b*s.t*cq), e.Alloc(kernels.F32, s.b*s.nh*s.t)
				fa.FlashAttentionForward(out, lse, e.F32(x), mb, s.b, s.t, s.nh, s.nkv, s.hs)
				return e.Read(out)
			}
			lse := e.NaNs(s.b * s.nh * s.t)
			qb := e.F32(qkv)
			fa.FlashAttentionForward(e.NaNs(s.b*s.t*cq), lse, qb, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			w := e.Randn(s.b*s.t*cq, 1)
			dqkv := e.NaNs(len(qkv))
			fa.FlashAttentionBackward(dqkv, e.F32(w), qb, lse, mb, s.b, s.t, s.nh, s.nkv, s.hs)
			e.FDCheck(fmt.Sprintf("FlashAttention %v mask=%s", s, mname), qkv, e.Read(dqkv), w, 1e-2, GradRTol, nil, fwd)
		}
	}
}
