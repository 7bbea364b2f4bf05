package cpu

import (
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// FlashAttention (kernels.FlashAttention) on the CPU. The forward is
// GQAAttentionForward's arithmetic with the probabilities of each block of
// four queries kept in per-goroutine scratch ([4,T], reused) instead of
// att: a query's scores over all its keys fit in the cache, so the whole
// key row is one block of the online softmax and no rescaling is needed;
// out is bit for bit GQAAttentionForward's (and so the decode path's). Its
// work items are blocks of flashBlock queries of one (batch, head) pair. The
// backward is GQAAttentionBackward's loop (per (batch, KV head) group, so
// that dk and dv sum in one goroutine in a fixed order) with each block's
// probabilities recomputed from q, k and lse as exp(s - lse).

// flashBlock is the number of query rows of one work item of the forward (a
// multiple of 4, so that the blocks of four rows are the composed kernel's).
const flashBlock = 64

// FlashAttentionForward implements kernels.FlashAttention: out[B,T,NH·HS]
// as GQAAttentionForward computes it, and lse[B,NH,T] (log T for a fully
// masked query). Both are overwritten.
func (d *Device) FlashAttentionForward(out, lse, qkv, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	w, cq := gqaDims("FlashAttentionForward", nh, nkv, hs)
	o, ls, x := f32(out)[:b*t*cq], f32(lse)[:b*nh*t], f32(qkv)[:b*t*w]
	mk := i32(mask)
	if mk != nil {
		mk = mk[:b*t]
	}
	if b*t*cq == 0 {
		return
	}
	rep := nh / nkv
	first := firstReal(mk, b, t, t)
	scale := attnScale(hs)
	nqb := (t + flashBlock - 1) / flashBlock
	d.parallelFor(b*nh*nqb, 1, func(lo, hi int) {
		qs, p := make([]float32, 4*hs), make([]float32, 4*t)
		kb, vb := make([]float32, t*hs), make([]float32, t*hs)
		loaded := -1
		for it := lo; it < hi; it++ {
			bh, k := it/nqb, it%nqb
			// Blocks in the order 0, nqb-1, 1, nqb-2, ...: a block's cost
			// grows with its index (causal), so runs of items cost alike.
			qb := k / 2
			if k%2 == 1 {
				qb = nqb - 1 - k/2
			}
			bi, h := bh/nh, bh%nh
			kv := h / rep
			var m []int32
			if mk != nil {
				m = mk[bi*t : bi*t+t]
			}
			base := bi * t * w
			if g := bi*nkv + kv; g != loaded {
				for ti := range t {
					copy(kb[ti*hs:ti*hs+hs], x[base+ti*w+(nh+kv)*hs:])
					copy(vb[ti*hs:ti*hs+hs], x[base+ti*w+(nh+nkv+kv)*hs:])
				}
				loaded = g
			}
			i0 := qb * flashBlock
			n := min(flashBlock, t-i0)
			d.attnQueries(o[(bi*t+i0)*cq+h*hs:], cq, p, t, 0, ls[bh*t+i0:bh*t+i0+n], x[base+i0*w+h*hs:], w, scale,
				qs, kb, vb, hs, hs, t, n, i0, first[bi], m)
		}
	})
}

// FlashAttentionBackward implements kernels.FlashAttention: dqkv is
// overwritten with GQAAttentionBackward's gradient, the probabilities of
// query t recomputed as exp(s_j - lse_t) over its keys (1/T over all keys
// for a fully masked query).
func (d *Device) FlashAttentionBackward(dqkv, dout, qkv, lse, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	w, _ := gqaDims("FlashAttentionBackward", nh, nkv, hs)
	ls, x := f32(lse)[:b*nh*t], f32(qkv)[:b*t*w]
	// holes[bi] is one past the last padded position of batch row bi: keys
	// from there on are all real, so a row masks only the keys before it.
	holes := make([]int, b)
	if m := i32(mask); m != nil {
		for bi := range b {
			for j, mj := range m[bi*t : bi*t+t] {
				if mj == 0 {
					holes[bi] = j + 1
				}
			}
		}
	}
	mk := i32(mask)
	scale := attnScale(hs)
	ninf := float32(math.Inf(-1))
	d.gqaBackward("FlashAttentionBackward", dqkv, dout, qkv, mask, b, t, nh, nkv, hs, func() probRows {
		qs, p := make([]float32, 4*hs), make([]float32, 4*t)
		return func(bh, ti int, ns []int, nmax int, masked []bool, kb []float32) []float32 {
			bi, h := bh/nh, bh%nh
			nq := len(ns)
			for r := range nq {
				for j, v := range x[(bi*t+ti+r)*w+h*hs:][:hs] {
					qs[r*hs+j] = v * scale
				}
			}
			// The forward's scores, bit for bit (the same scaled q, the
			// same dot products).
			if nq == 4 {
				d.dots4(p, t, qs, hs, kb, hs, nmax, hs)
			} else {
				d.dots(p[:nmax], qs[:hs], kb, hs)
			}
			var m []int32
			if mk != nil {
				m = mk[bi*t : bi*t+t]
			}
			for r := range nq {
				pr := p[r*t : r*t+ns[r]]
				if masked[r] {
					u := 1 / float32(t)
					for j := range pr {
						pr[j] = u
					}
					continue
				}
				if m != nil {
					for j, mj := range m[:min(ns[r], holes[bi])] {
						if mj == 0 {
							pr[j] = ninf
						}
					}
				}
				d.rowExpStore(pr, pr, ls[bh*t+ti+r])
				clear(p[r*t+ns[r] : r*t+nmax])
			}
			return p
		}
	})
}

// The CPU backend has the flash-attention capability.
var _ kernels.FlashAttention = (*Device)(nil)
