package cpu

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// Grouped-query attention (LLaMA-family): the arithmetic of attention.go
// (same masking rules, same blocked primitives) on a packed qkv row of NH
// query heads, NKV key heads and NKV value heads; query head h reads KV
// head h/(NH/NKV). The forward and the decode split the work over (batch,
// query head) pairs; the backward over (batch, KV head) groups, since the
// NH/NKV query heads of a group all add to that KV head's gradient, which
// keeps each sum in one goroutine (and the result independent of the
// thread count).

// gqaDims checks the head counts and returns the widths of a qkv row and of
// an output row.
func gqaDims(op string, nh, nkv, hs int) (w, cq int) {
	if nh < 0 || nkv <= 0 || hs < 0 || nh%nkv != 0 {
		panic(fmt.Sprintf("cpu: %s with %d query heads and %d key/value heads (NH must be a positive multiple of NKV)", op, nh, nkv))
	}
	return (nh + 2*nkv) * hs, nh * hs
}

// GQAAttentionForward is causal grouped-query self-attention over
// qkv[B,T,(NH+2·NKV)·HS] with q scaled by HS^-0.5 and mask[B,T] (nil: all
// real). It overwrites out[B,T,NH·HS] and att[B,NH,T,T].
func (d *Device) GQAAttentionForward(out, att, qkv, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	w, cq := gqaDims("GQAAttentionForward", nh, nkv, hs)
	o, a, x := f32(out)[:b*t*cq], f32(att)[:b*nh*t*t], f32(qkv)[:b*t*w]
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
	d.parallelFor(b*nh, 1, func(lo, hi int) {
		qs := make([]float32, 4*hs)
		// The KV head's keys and values as dense [T,HS] rows, kept while
		// consecutive query heads share it.
		kb, vb := make([]float32, t*hs), make([]float32, t*hs)
		loaded := -1
		for bh := lo; bh < hi; bh++ {
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
			d.attnQueries(o[bi*t*cq+h*hs:], cq, a[bh*t*t:], t, t, nil, x[base+h*hs:], w, scale, qs, kb, vb, hs, hs, t, t, 0, first[bi], m)
		}
	})
}

// GQAAttentionBackward is the backward of GQAAttentionForward given its att
// and mask: dqkv[B,T,(NH+2·NKV)·HS] is overwritten. The per-row formulas are
// AttentionBackward's; a KV head's dk and dv sum over its query heads, in
// head order.
func (d *Device) GQAAttentionBackward(dqkv, dout, qkv, att, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	_, cq := gqaDims("GQAAttentionBackward", nh, nkv, hs)
	a := f32(att)[:b*nh*t*t]
	if b*t*cq == 0 {
		a = nil
	}
	d.gqaBackward("GQAAttentionBackward", dqkv, dout, qkv, mask, b, t, nh, nkv, hs, func() probRows {
		return func(bh, ti int, _ []int, _ int, _ []bool, _ []float32) []float32 { return a[(bh*t+ti)*t:] }
	})
}

// probRows returns the probabilities of queries ti..ti+len(ns)-1 of the
// (batch, query head) pair bh as rows of T elements (row r from r·T): row r
// holds its ns[r] keys' probabilities (every one of the T keys, 1/T each,
// when masked[r]: a fully masked query) and zeros from there to nmax. kb
// holds the keys of bh's KV head as dense [T,HS] rows. The backward makes
// one per goroutine (newRows), so it may own scratch.
type probRows func(bh, ti int, ns []int, nmax int, masked []bool, kb []float32) []float32

// gqaBackward is the backward of grouped-query attention given, through
// newRows, the forward's probabilities: the saved att (GQAAttentionBackward)
// or their recomputation (FlashAttentionBackward). dqkv is overwritten.
func (d *Device) gqaBackward(op string, dqkv, dout, qkv, mask kernels.Buffer, b, t, nh, nkv, hs int, newRows func() probRows) {
	w, cq := gqaDims(op, nh, nkv, hs)
	dx, dy, x := f32(dqkv)[:b*t*w], f32(dout)[:b*t*cq], f32(qkv)[:b*t*w]
	mk := i32(mask)
	if mk != nil {
		mk = mk[:b*t]
	}
	if b*t*cq == 0 {
		clear(dx) // NH == 0 or HS == 0: nothing depends on qkv
		return
	}
	rep := nh / nkv
	first := firstReal(mk, b, t, t)
	scale := attnScale(hs)
	d.parallelFor(b*nkv, 1, func(lo, hi int) {
		rows := newRows()
		ds := make([]float32, 4*t)
		kb, vb := make([]float32, t*hs), make([]float32, t*hs)
		dkb, dvb := make([]float32, t*hs), make([]float32, t*hs)
		for bg := lo; bg < hi; bg++ {
			bi, kv := bg/nkv, bg%nkv
			base := bi * t * w
			ko, vo := (nh+kv)*hs, (nh+nkv+kv)*hs
			for ti := range t {
				copy(kb[ti*hs:ti*hs+hs], x[base+ti*w+ko:])
				copy(vb[ti*hs:ti*hs+hs], x[base+ti*w+vo:])
			}
			clear(dkb)
			clear(dvb)
			for h := kv * rep; h < (kv+1)*rep; h++ {
				bh := bi*nh + h
				for ti := range t {
					clear(dx[base+ti*w+h*hs:][:hs])
				}
				for ti := 0; ti < t; {
					nq := 1
					if ti+4 <= t {
						nq = 4
					}
					nmax := 0
					var ns [4]int
					var masked [4]bool
					for r := range nq {
						ns[r] = ti + r + 1
						if masked[r] = ti+r < first[bi]; masked[r] {
							ns[r] = t
						}
						nmax = max(nmax, ns[r])
					}
					p := rows(bh, ti, ns[:nq], nmax, masked[:nq], kb) // [nq, T] probabilities
					g := dy[(bi*t+ti)*cq+h*hs:]                       // [nq, NH·HS] output gradients
					q := x[base+ti*w+h*hs:]                           // [nq, W] queries
					dq := dx[base+ti*w+h*hs:]                         // [nq, W] their gradients
					if nq == 4 {
						d.dots4(ds, t, g, cq, vb, hs, nmax, hs) // dp_j = dout·v_j
					} else {
						d.dots(ds[:nmax], g[:hs], vb, hs)
					}
					for r := range nq {
						pr, dr := p[r*t:r*t+ns[r]], ds[r*t:r*t+t]
						if masked[r] {
							clear(dr[:nmax]) // fully masked: the output ignores q and k
							continue
						}
						var sum float64
						for j, pj := range pr {
							sum += float64(pj) * float64(dr[j])
						}
						dsum := float32(sum)
						for j, pj := range pr {
							dr[j] = pj * (dr[j] - dsum) * scale
						}
						clear(dr[ns[r]:nmax])
					}
					if nq == 4 {
						d.rank4(dvb, hs, p, t, g, cq, nmax, hs)  // dv_j += p_j·dout
						d.gemvT4(dq, w, ds, t, kb, hs, nmax, hs) // dq += Σ_j ds_j k_j
						d.rank4(dkb, hs, ds, t, q, w, nmax, hs)  // dk_j += ds_j·q
					} else {
						d.rank1(dvb, hs, p[:nmax], g[:hs])
						d.gemvT(dq[:hs], ds[:nmax], kb, hs)
						d.rank1(dkb, hs, ds[:nmax], q[:hs])
					}
					ti += nq
				}
			}
			for ti := range t {
				copy(dx[base+ti*w+ko:][:hs], dkb[ti*hs:ti*hs+hs])
				copy(dx[base+ti*w+vo:][:hs], dvb[ti*hs:ti*hs+hs])
			}
		}
	})
}

// GQAAttentionDecode runs GQAAttentionForward for tn new positions
// t0..t0+tn-1 against the caches kcache and vcache [B,NKV,Tmax,HS]: it
// copies the key and value heads of qkv[B,tn,(NH+2·NKV)·HS] into the caches
// at positions t0..t0+tn-1, then query i (absolute position p = t0+i)
// attends to cache positions j <= p with mask[B,Tmax] == 1 (nil: all
// real); a query with no such key is uniform over all t0+tn keys.
// out[B,tn,NH·HS] is overwritten. With t0 = 0 and tn = T it computes what
// GQAAttentionForward does, bit for bit.
func (d *Device) GQAAttentionDecode(out, qkv, kcache, vcache, mask kernels.Buffer, b, tn, t0, tmax, nh, nkv, hs int) {
	if t0 < 0 || tn < 0 || t0+tn > tmax {
		panic(fmt.Sprintf("cpu: GQAAttentionDecode of positions %d..%d past Tmax %d", t0, t0+tn, tmax))
	}
	w, cq := gqaDims("GQAAttentionDecode", nh, nkv, hs)
	o, x := f32(out)[:b*tn*cq], f32(qkv)[:b*tn*w]
	kc, vc := f32(kcache)[:b*nkv*tmax*hs], f32(vcache)[:b*nkv*tmax*hs]
	mk := i32(mask)
	if mk != nil {
		mk = mk[:b*tmax]
	}
	if b*tn*nkv*hs == 0 {
		return
	}
	d.parallelFor(b*nkv, max(1, elemGrain/max(1, tn*hs)), func(lo, hi int) {
		for bg := lo; bg < hi; bg++ {
			bi, kv := bg/nkv, bg%nkv
			cb := bg*tmax*hs + t0*hs
			for i := range tn {
				src := x[(bi*tn+i)*w:]
				copy(kc[cb+i*hs:][:hs], src[(nh+kv)*hs:])
				copy(vc[cb+i*hs:][:hs], src[(nh+nkv+kv)*hs:])
			}
		}
	})
	if cq == 0 {
		return
	}
	rep := nh / nkv
	full := t0 + tn
	first := firstReal(mk, b, full, tmax)
	scale := attnScale(hs)
	d.parallelFor(b*nh, 1, func(lo, hi int) {
		qs := make([]float32, 4*hs)
		p := make([]float32, 4*full)
		for bh := lo; bh < hi; bh++ {
			bi, h := bh/nh, bh%nh
			var m []int32
			if mk != nil {
				m = mk[bi*tmax : bi*tmax+tmax]
			}
			cb := (bi*nkv + h/rep) * tmax * hs
			ks, vs := kc[cb:cb+full*hs], vc[cb:cb+full*hs]
			d.attnQueries(o[bi*tn*cq+h*hs:], cq, p, full, 0, nil, x[bi*tn*w+h*hs:], w, scale, qs, ks, vs, hs, hs, full, tn, t0, first[bi], m)
		}
	})
}
