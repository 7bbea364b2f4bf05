package cpu

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// Attention follows Hugging Face's eager OPT attention: scores
// s_j = (q·HS^-0.5)·k_j plus an additive mask holding the most negative
// finite float32 at every future or padded key, then a float32 softmax.
// Adding that value swamps any real score, so
//   - a row with at least one real key among 0..t gives masked keys
//     probability exactly 0 (we skip them), and
//   - a row whose keys 0..t are all padding (a left-padding query) sees the
//     same score at every one of its keys, future ones included, and gets
//     the uniform 1/T over the whole row. That output does not depend on q
//     or k, so the row's gradient reaches v only.
//
// The work is split over (batch, head) pairs; each pair owns disjoint
// columns of out, dqkv and the caches, so goroutines never share a write.

// firstReal returns, for each batch row, the index of its first real token
// (mask == 1) among the first t entries of mask[B,stride], or t when there is
// none; a nil mask gives all zeros. Query p is fully masked iff p < first.
func firstReal(mask []int32, b, t, stride int) []int {
	f := make([]int, b)
	if mask == nil {
		return f
	}
	for bi := range b {
		f[bi] = t
		for j, m := range mask[bi*stride : bi*stride+t] {
			if m != 0 {
				f[bi] = j
				break
			}
		}
	}
	return f
}

// softmaxRow turns the scores p[:n] of one query into probabilities in
// place, giving keys with mask[j] == 0 probability 0 (mask nil: none
// masked). For a fully masked query (masked true) it sets p[:full] = 1/full
// instead. Either way the rest of p is zeroed. It returns the row's
// log-sum-exp (kernels.FlashAttention): max + log Σ exp(s_j - max) over the
// unmasked scores, or log(full) for a fully masked query.
func (d *Device) softmaxRow(p []float32, n, full int, mask []int32, masked bool) float32 {
	if masked {
		u := 1 / float32(full)
		for j := range p[:full] {
			p[j] = u
		}
		clear(p[full:])
		return float32(math.Log(float64(full)))
	}
	pr := p[:n]
	if mask != nil {
		ninf := float32(math.Inf(-1))
		for j, m := range mask[:n] {
			if m == 0 {
				pr[j] = ninf
			}
		}
	}
	m := d.rowMax(pr)
	s := d.rowExpStore(pr, pr, m)
	d.rowScale(pr, float32(1/s))
	clear(p[n:])
	return float32(float64(m) + math.Log(s))
}

// attnRows computes nq query rows (nq is 1 or 4) of one head. qs holds the
// scaled queries ([nq,HS], row stride HS); key j is k[j*stride:][:HS] and
// value j is v[j*stride:][:HS]. Query r sees keys j < ns[r] (through the
// mask) or, when masked[r], all full keys uniformly. p receives the
// probabilities ([nq, ldp], ldp >= full, zero past each row's keys) and the
// rows of out ([nq, ldo]) are overwritten with Σ_j p_j v_j. Four rows at a
// time give bit-identical results to one row at a time: the blocked
// primitives reproduce the single-row arithmetic and extra keys enter with
// probability exactly 0. When lse is not nil, lse[r] receives row r's
// log-sum-exp.
func (d *Device) attnRows(out []float32, ldo int, p []float32, ldp int, lse []float32, qs, k, v []float32, stride, hs, full int, ns []int, masked []bool, mask []int32) {
	nq := len(ns)
	nmax := 0
	for r, n := range ns {
		if masked[r] {
			n = full
		}
		nmax = max(nmax, n)
	}
	if nq == 4 {
		d.dots4(p, ldp, qs, hs, k, stride, nmax, hs)
	} else {
		d.dots(p[:ns[0]], qs[:hs], k, stride)
	}
	for r := range nq {
		l := d.softmaxRow(p[r*ldp:r*ldp+ldp], ns[r], full, mask, masked[r])
		if lse != nil {
			lse[r] = l
		}
		clear(out[r*ldo : r*ldo+hs])
	}
	if nq == 4 {
		d.gemvT4(out, ldo, p, ldp, v, stride, nmax, hs)
	} else {
		d.gemvT(out[:hs], p[:nmax], v, stride)
	}
}

// attnQueries runs the n query rows of one (batch, head) pair through
// attnRows in blocks of four: query i is q[i*ldq:][:HS] times scale, at
// position pos0+i, seeing keys 0..pos0+i, or all full keys uniformly when
// pos0+i < first (a fully masked query). Row i of out is out[i*ldo:]; a
// block's probabilities go to p from row i·pstep on, rows ldp apart (pstep
// = ldp keeps every row, pstep = 0 reuses one block of scratch). Query i's
// log-sum-exp goes to lse[i] when lse is not nil. qs is scratch of 4·HS.
func (d *Device) attnQueries(out []float32, ldo int, p []float32, ldp, pstep int, lse []float32, q []float32, ldq int, scale float32,
	qs, k, v []float32, stride, hs, full, n, pos0, first int, mask []int32) {
	var ns [4]int
	var masked [4]bool
	for i := 0; i < n; {
		nq := 1
		if i+4 <= n {
			nq = 4
		}
		for r := range nq {
			for j, x := range q[(i+r)*ldq:][:hs] {
				qs[r*hs+j] = x * scale
			}
			pos := pos0 + i + r
			ns[r], masked[r] = pos+1, pos < first
		}
		var l []float32
		if lse != nil {
			l = lse[i : i+nq]
		}
		d.attnRows(out[i*ldo:], ldo, p[i*pstep:], ldp, l, qs, k, v, stride, hs, full, ns[:nq], masked[:nq], mask)
		i += nq
	}
}

// attnScale is HS^-0.5 in float32, the factor Hugging Face applies to q.
func attnScale(hs int) float32 { return float32(1 / math.Sqrt(float64(hs))) }

// AttentionForward is causal multi-head self-attention over qkv[B,T,3C]
// (q, k, v side by side, C = NH·HS, head h in columns h·HS..(h+1)·HS of each
// part), with q scaled by HS^-0.5 and mask[B,T] (1 real, 0 padding; nil: all
// real). It overwrites out[B,T,C] and the probabilities att[B,NH,T,T]
// (zero for future and padded keys; 1/T across a fully masked row).
func (d *Device) AttentionForward(out, att, qkv, mask kernels.Buffer, b, t, nh, hs int) {
	// Multi-head attention is grouped-query attention with a key/value
	// head per query head: the same layout and arithmetic.
	d.GQAAttentionForward(out, att, qkv, mask, b, t, nh, nh, hs)
}

// AttentionBackward is the backward of AttentionForward given its att and
// mask: dqkv[B,T,3C] = d(out)/d(qkv)ᵀ·dout (OVERWRITES every element). Per
// query row t with probabilities p over its keys J (0..t, or all T keys for a
// fully masked row):
//
//	dp_j = dout_t·v_j, ds_j = p_j(dp_j - Σ_i p_i dp_i)
//	dv_j += p_j·dout_t, dq_t += HS^-0.5·Σ_j ds_j k_j, dk_j += HS^-0.5·ds_j q_t
//
// with ds = 0 for a fully masked row (its output ignores the scores).
func (d *Device) AttentionBackward(dqkv, dout, qkv, att, mask kernels.Buffer, b, t, nh, hs int) {
	d.GQAAttentionBackward(dqkv, dout, qkv, att, mask, b, t, nh, nh, hs)
}

// AttentionDecode runs attention for tn new positions t0..t0+tn-1 against
// the caches kcache and vcache [B,Tmax,C]. It first copies the k and v parts
// of qkv[B,tn,3C] into the caches at rows t0..t0+tn-1, then query i (absolute
// position p = t0+i) attends to cache rows j <= p with mask[B,Tmax] == 1
// (nil: all real). A query with no such key is uniform over all t0+tn keys,
// as Hugging Face's score matrix [tn, t0+tn] gives. out[B,tn,C] is
// overwritten. With t0 = 0 and tn = T it computes exactly what
// AttentionForward does (same arithmetic, bit for bit).
func (d *Device) AttentionDecode(out, qkv, kcache, vcache, mask kernels.Buffer, b, tn, t0, tmax, nh, hs int) {
	if t0 < 0 || tn < 0 || t0+tn > tmax {
		panic(fmt.Sprintf("cpu: AttentionDecode of positions %d..%d past Tmax %d", t0, t0+tn, tmax))
	}
	c := nh * hs
	c3 := 3 * c
	o, x := f32(out)[:b*tn*c], f32(qkv)[:b*tn*c3]
	kc, vc := f32(kcache)[:b*tmax*c], f32(vcache)[:b*tmax*c]
	mk := i32(mask)
	if mk != nil {
		mk = mk[:b*tmax]
	}
	if b*tn*c == 0 {
		return
	}
	full := t0 + tn
	first := firstReal(mk, b, full, tmax)
	scale := attnScale(hs)
	d.parallelFor(b*nh, 1, func(lo, hi int) {
		qs := make([]float32, 4*hs)
		p := make([]float32, 4*full)
		var kd, vd []float32
		if tn >= 8 {
			kd, vd = make([]float32, full*hs), make([]float32, full*hs)
		}
		for bh := lo; bh < hi; bh++ {
			bi, h := bh/nh, bh%nh
			var m []int32
			if mk != nil {
				m = mk[bi*tmax : bi*tmax+tmax]
			}
			cb := bi*tmax*c + h*hs
			for i := range tn {
				src := x[(bi*tn+i)*c3+h*hs:]
				copy(kc[cb+(t0+i)*c:][:hs], src[c:c+hs])
				copy(vc[cb+(t0+i)*c:][:hs], src[2*c:2*c+hs])
			}
			ks, vs, stride := kc[cb:], vc[cb:], c
			if tn >= 8 { // keys are read tn/4 times: worth a dense copy
				for j := range full {
					copy(kd[j*hs:j*hs+hs], kc[cb+j*c:])
					copy(vd[j*hs:j*hs+hs], vc[cb+j*c:])
				}
				ks, vs, stride = kd, vd, hs
			}
			d.attnQueries(o[bi*tn*c+h*hs:], c, p, full, 0, nil, x[bi*tn*c3+h*hs:], c3, scale, qs, ks, vs, stride, hs, full, tn, t0, first[bi], m)
		}
	})
}
