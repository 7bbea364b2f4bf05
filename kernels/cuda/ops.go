package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// The op wrappers of kernels.Ops other than the GEMMs (gemm.go): each
// checks its operands (check, launch.go), then launches the kernels of
// cu/*.cu. Semantics are kernels/ops.go's; the notes here say how.

// AddBias implements kernels.Ops.
func (d *Device) AddBias(out, bias kernels.Buffer, n, c int) {
	ck := check{d, "AddBias"}
	ck.dims("n, c", n, c)
	o := ck.f32("out", out, n*c)
	b := ck.w("bias", bias, c)
	d.launchN(kAddBias, n*c, ptr(o), ptr(b), isBF16(b), i64(n), i32(c))
}

// Add implements kernels.Ops (b F32 or BF16).
func (d *Device) Add(out, a, b kernels.Buffer, n int) {
	ck := check{d, "Add"}
	ck.dims("n", n)
	o, x, y := ck.f32("out", out, n), ck.f32("a", a, n), ck.w("b", b, n)
	d.launchN(kAdd, n, ptr(o), ptr(x), ptr(y), isBF16(y), i64(n))
}

// Scale implements kernels.Ops.
func (d *Device) Scale(x kernels.Buffer, s float32, n int) {
	ck := check{d, "Scale"}
	ck.dims("n", n)
	xb := ck.f32("x", x, n)
	d.launchN(kScale, n, ptr(xb), f32(s), i64(n))
}

// Mul implements kernels.Ops.
func (d *Device) Mul(out, a, b kernels.Buffer, n int) {
	ck := check{d, "Mul"}
	ck.dims("n", n)
	o, x, y := ck.f32("out", out, n), ck.f32("a", a, n), ck.f32("b", b, n)
	d.launchN(kMul, n, ptr(o), ptr(x), ptr(y), i64(n))
}

// EmbeddingForward implements kernels.Ops; an id outside the table gives
// a row of NaNs (the CPU backend panics).
func (d *Device) EmbeddingForward(out, ids, table kernels.Buffer, n, c int) {
	ck := check{d, "EmbeddingForward"}
	ck.dims("n, c", n, c)
	o, id, t := ck.f32("out", out, n*c), ck.i32("ids", ids, n), ck.w("table", table, 0)
	if c == 0 {
		return
	}
	d.launchN(kEmbeddingFwd, n*c, ptr(o), ptr(id), ptr(t), isBF16(t), i32(n), i32(c), i32(t.n/c))
}

// EmbeddingBackward implements kernels.Ops with atomic adds (repeated ids
// add up in any order); ids outside the table are skipped.
func (d *Device) EmbeddingBackward(dtable, dout, ids kernels.Buffer, n, c int) {
	ck := check{d, "EmbeddingBackward"}
	ck.dims("n, c", n, c)
	dt, dy, id := ck.f32("dtable", dtable, 0), ck.f32("dout", dout, n*c), ck.i32("ids", ids, n)
	if c == 0 {
		return
	}
	d.launchN(kEmbeddingBwd, n*c, ptr(dt), ptr(dy), ptr(id), i32(n), i32(c), i32(dt.n/c))
}

// LayerNormForward implements kernels.Ops (moments in double).
func (d *Device) LayerNormForward(out, mean, rstd, inp, weight, bias kernels.Buffer, n, c int, eps float32) {
	ck := check{d, "LayerNormForward"}
	ck.dims("n, c", n, c)
	o, mu, rs, x := ck.f32("out", out, n*c), ck.f32("mean", mean, n), ck.f32("rstd", rstd, n), ck.f32("inp", inp, n*c)
	w, b := ck.optW("weight", weight, c), ck.optW("bias", bias, c)
	if c == 0 {
		return
	}
	d.launchRows(kLayerNormFwd, n, ptr(o), ptr(mu), ptr(rs), ptr(x), ptr(w), isBF16(w), ptr(b), isBF16(b), i32(n), i32(c), f32(eps))
}

// LayerNormBackward implements kernels.Ops.
func (d *Device) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd kernels.Buffer, n, c int) {
	ck := check{d, "LayerNormBackward"}
	ck.dims("n, c", n, c)
	dx, dy, x := ck.f32("dinp", dinp, n*c), ck.f32("dout", dout, n*c), ck.f32("inp", inp, n*c)
	dw, db := ck.optF32("dweight", dweight, c), ck.optF32("dbias", dbias, c)
	w := ck.optW("weight", weight, c)
	mu, rs := ck.f32("mean", mean, n), ck.f32("rstd", rstd, n)
	if c == 0 || n == 0 {
		return
	}
	d.launchRows(kLayerNormBwdDx, n, ptr(dx), ptr(dy), ptr(x), ptr(w), isBF16(w), ptr(mu), ptr(rs), i32(n), i32(c))
	if dw != nil || db != nil {
		d.launchN(kLayerNormBwdDwDb, c, ptr(dw), ptr(db), ptr(dy), ptr(x), ptr(mu), ptr(rs), i32(n), i32(c))
	}
}

// ReLUForward implements kernels.Ops.
func (d *Device) ReLUForward(out, inp kernels.Buffer, n int) {
	d.activation("ReLUForward", kReLUFwd, out, inp, n)
}

// ReLUBackward implements kernels.Ops.
func (d *Device) ReLUBackward(dinp, dout, out kernels.Buffer, n int) {
	d.activationGrad("ReLUBackward", kReLUBwd, dinp, dout, out, "out", n)
}

// GELUForward implements kernels.Ops (erf GELU in double).
func (d *Device) GELUForward(out, inp kernels.Buffer, n int) {
	d.activation("GELUForward", kGELUFwd, out, inp, n)
}

// GELUBackward implements kernels.Ops.
func (d *Device) GELUBackward(dinp, dout, inp kernels.Buffer, n int) {
	d.activationGrad("GELUBackward", kGELUBwd, dinp, dout, inp, "inp", n)
}

// activation launches an elementwise activation kernel k(out, inp, n) on
// n F32 elements, the operands checked as op's.
func (d *Device) activation(op string, k kernel, out, inp kernels.Buffer, n int) {
	ck := check{d, op}
	ck.dims("n", n)
	o, x := ck.f32("out", out, n), ck.f32("inp", inp, n)
	d.launchN(k, n, ptr(o), ptr(x), i64(n))
}

// activationGrad launches an activation's backward k(dinp, dout, saved, n)
// on n F32 elements; saved (named savedName in errors) is the tensor the
// backward reads (ReLU's output, GELU's input).
func (d *Device) activationGrad(op string, k kernel, dinp, dout, saved kernels.Buffer, savedName string, n int) {
	ck := check{d, op}
	ck.dims("n", n)
	dx, dy, s := ck.f32("dinp", dinp, n), ck.f32("dout", dout, n), ck.f32(savedName, saved, n)
	d.launchN(k, n, ptr(dx), ptr(dy), ptr(s), i64(n))
}

// SoftmaxForward implements kernels.Ops.
func (d *Device) SoftmaxForward(out, inp kernels.Buffer, n, c int) {
	ck := check{d, "SoftmaxForward"}
	ck.dims("n, c", n, c)
	o, x := ck.f32("out", out, n*c), ck.f32("inp", inp, n*c)
	if c == 0 {
		return
	}
	d.launchRows(kSoftmaxFwd, n, ptr(o), ptr(x), i32(n), i32(c))
}

// attnGeom checks an attention call's head geometry.
func (c check) attnGeom(b, t, nh, nkv, hs int) {
	c.dims("b, t, nh, nkv, hs", b, t, nh, nkv, hs)
	if nkv == 0 || nh%nkv != 0 {
		c.fail("%d query heads are not a multiple of %d key/value heads", nh, nkv)
	}
	if hs > maxHS {
		c.fail("not implemented on cuda yet: head size %d (the attention kernels take at most %d)", hs, maxHS)
	}
	if b > 65535 || nh > 65535 {
		c.fail("batch %d or %d heads past the grid's 65535", b, nh)
	}
}

func attnScale(hs int) float32 { return float32(1 / math.Sqrt(float64(hs))) }

// AttentionForward implements kernels.Ops: GQAAttentionForward with NKV =
// NH (the packed layouts are the same).
func (d *Device) AttentionForward(out, att, qkv, mask kernels.Buffer, b, t, nh, hs int) {
	d.gqaForward("AttentionForward", out, att, qkv, mask, b, t, nh, nh, hs)
}

// AttentionBackward implements kernels.Ops.
func (d *Device) AttentionBackward(dqkv, dout, qkv, att, mask kernels.Buffer, b, t, nh, hs int) {
	d.gqaBackward("AttentionBackward", dqkv, dout, qkv, att, mask, b, t, nh, nh, hs)
}

// AttentionDecode implements kernels.Ops; the caches are [B,Tmax,C].
func (d *Device) AttentionDecode(out, qkv, kcache, vcache, mask kernels.Buffer, b, tn, t0, tmax, nh, hs int) {
	c := nh * hs
	d.decode("AttentionDecode", out, qkv, kcache, vcache, mask, b, tn, t0, tmax, nh, nh, hs,
		int64(tmax*c), int64(hs), int64(c))
}

// GQAAttentionForward implements kernels.Ops: one block per (query, head,
// batch row), the probabilities written to att ([B,NH,T,T]).
func (d *Device) GQAAttentionForward(out, att, qkv, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	d.gqaForward("GQAAttentionForward", out, att, qkv, mask, b, t, nh, nkv, hs)
}

func (d *Device) gqaForward(op string, out, att, qkv, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	ck := check{d, op}
	ck.attnGeom(b, t, nh, nkv, hs)
	w := (nh + 2*nkv) * hs
	o := ck.f32("out", out, b*t*nh*hs)
	a := ck.f32("att", att, b*nh*t*t)
	x := ck.f32("qkv", qkv, b*t*w)
	m := ck.optI32("mask", mask, b*t)
	if b*t*nh*hs == 0 {
		return
	}
	d.launch(kAttnFwd, dim3{uint32(t), uint32(nh), uint32(b)}, dim3{attThreads, 1, 1},
		ptr(o), ptr(a), ptr(x), rawPtr(x.ptr+uintptr(4*nh*hs)), rawPtr(x.ptr+uintptr(4*(nh+nkv)*hs)), ptr(m),
		i32(t), i32(0), i32(t), i32(nh), i32(nkv), i32(hs),
		i64(t*w), i32(w), i64(t*w), i64(hs), i64(w),
		i32(nh*hs), i32(t), f32(attnScale(hs)))
}

// GQAAttentionBackward implements kernels.Ops in two passes: per query
// (dq and the row sums Σ p·dp, kept in scratch), then per key (dk, dv,
// summed over the group's query heads). Both overwrite.
func (d *Device) GQAAttentionBackward(dqkv, dout, qkv, att, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	d.gqaBackward("GQAAttentionBackward", dqkv, dout, qkv, att, mask, b, t, nh, nkv, hs)
}

func (d *Device) gqaBackward(op string, dqkv, dout, qkv, att, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	ck := check{d, op}
	ck.attnGeom(b, t, nh, nkv, hs)
	w := (nh + 2*nkv) * hs
	dx := ck.f32("dqkv", dqkv, b*t*w)
	dy := ck.f32("dout", dout, b*t*nh*hs)
	x := ck.f32("qkv", qkv, b*t*w)
	a := ck.f32("att", att, b*nh*t*t)
	m := ck.optI32("mask", mask, b*t)
	if b*t*nh*hs == 0 {
		return
	}
	ds := d.scratch(op, int64(4*b*nh*t))
	defer d.release(ds)
	sc := attnScale(hs)
	d.launch(kAttnBwdQ, dim3{uint32(t), uint32(nh), uint32(b)}, dim3{attThreads, 1, 1},
		ptr(dx), rawPtr(ds.ptr), ptr(dy), ptr(x), ptr(a), ptr(m), i32(t), i32(nh), i32(nkv), i32(hs), f32(sc))
	d.launch(kAttnBwdKV, dim3{uint32(t), uint32(nkv), uint32(b)}, dim3{attThreads, 1, 1},
		ptr(dx), ptr(dy), ptr(x), ptr(a), rawPtr(ds.ptr), ptr(m), i32(t), i32(nh), i32(nkv), i32(hs), f32(sc))
}

// The CUDA backend has the flash-attention capability.
var _ kernels.FlashAttention = (*Device)(nil)

// FlashAttentionForward implements kernels.FlashAttention: one block per
// (tile of flashTQ queries, head, batch row), the key and value tiles in
// shared memory, the online softmax; no [T,T] buffer.
func (d *Device) FlashAttentionForward(out, lse, qkv, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	ck := check{d, "FlashAttentionForward"}
	ck.attnGeom(b, t, nh, nkv, hs)
	w := (nh + 2*nkv) * hs
	o := ck.f32("out", out, b*t*nh*hs)
	l := ck.f32("lse", lse, b*nh*t)
	x := ck.f32("qkv", qkv, b*t*w)
	m := ck.optI32("mask", mask, b*t)
	if b*t*nh*hs == 0 {
		return
	}
	d.launch(kFlashFwd, dim3{uint32((t + flashTQ - 1) / flashTQ), uint32(nh), uint32(b)}, dim3{flashThreads, 1, 1},
		ptr(o), ptr(l), ptr(x), ptr(m), i32(t), i32(nh), i32(nkv), i32(hs), f32(attnScale(hs)))
}

// FlashAttentionBackward implements kernels.FlashAttention as
// FlashAttention-2 does, without atomics: per query tile (dq and the row
// terms D = Σ p·dp, kept in a [B,NH,T] scratch), then per key tile (dk, dv,
// summed over the group's query heads). Both overwrite.
func (d *Device) FlashAttentionBackward(dqkv, dout, qkv, lse, mask kernels.Buffer, b, t, nh, nkv, hs int) {
	ck := check{d, "FlashAttentionBackward"}
	ck.attnGeom(b, t, nh, nkv, hs)
	w := (nh + 2*nkv) * hs
	dx := ck.f32("dqkv", dqkv, b*t*w)
	dy := ck.f32("dout", dout, b*t*nh*hs)
	x := ck.f32("qkv", qkv, b*t*w)
	l := ck.f32("lse", lse, b*nh*t)
	m := ck.optI32("mask", mask, b*t)
	if b*t*nh*hs == 0 {
		return
	}
	ds := d.scratch("FlashAttentionBackward", int64(4*b*nh*t))
	defer d.release(ds)
	sc := attnScale(hs)
	d.launch(kFlashBwdDQ, dim3{uint32((t + flashTQ - 1) / flashTQ), uint32(nh), uint32(b)}, dim3{flashThreads, 1, 1},
		ptr(dx), rawPtr(ds.ptr), ptr(dy), ptr(x), ptr(l), ptr(m), i32(t), i32(nh), i32(nkv), i32(hs), f32(sc))
	d.launch(kFlashBwdDKDV, dim3{uint32((t + flashTK - 1) / flashTK), uint32(nkv), uint32(b)}, dim3{flashThreads, 1, 1},
		ptr(dx), ptr(dy), ptr(x), ptr(l), rawPtr(ds.ptr), ptr(m), i32(t), i32(nh), i32(nkv), i32(hs), f32(sc))
}

// GQAAttentionDecode implements kernels.Ops; the caches are
// [B,NKV,Tmax,HS].
func (d *Device) GQAAttentionDecode(out, qkv, kcache, vcache, mask kernels.Buffer, b, tn, t0, tmax, nh, nkv, hs int) {
	d.decode("GQAAttentionDecode", out, qkv, kcache, vcache, mask, b, tn, t0, tmax, nh, nkv, hs,
		int64(nkv*tmax*hs), int64(tmax*hs), int64(hs))
}

// decode writes the new keys and values into the caches (element (b, g,
// pos, d) at b·cb + g·ch + pos·cp + d), then runs flash decoding over the
// cache (k_flash_decode): no [tn, t0+tn] scores. When there are few query
// tiles for a long cache, the keys are split over several blocks per
// query tile and merged by k_flash_decode_combine through a scratch of
// nsplit·B·NH·tn·(HS+2) floats (decodeSplits).
func (d *Device) decode(op string, out, qkv, kcache, vcache, mask kernels.Buffer, b, tn, t0, tmax, nh, nkv, hs int, cb, ch, cp int64) {
	ck := check{d, op}
	ck.attnGeom(b, tn, nh, nkv, hs)
	ck.dims("t0, tmax", t0, tmax)
	if t0+tn > tmax {
		ck.fail("positions %d..%d past Tmax %d", t0, t0+tn, tmax)
	}
	w := (nh + 2*nkv) * hs
	o := ck.f32("out", out, b*tn*nh*hs)
	x := ck.f32("qkv", qkv, b*tn*w)
	kc := ck.f32("kcache", kcache, b*tmax*nkv*hs)
	vc := ck.f32("vcache", vcache, b*tmax*nkv*hs)
	m := ck.optI32("mask", mask, b*tmax)
	if b*tn*nh*hs == 0 {
		return
	}
	d.launchN(kKVCacheWrite, b*tn*nkv*hs, ptr(kc), ptr(vc), ptr(x), i32(b), i32(tn), i32(t0),
		i32(nh), i32(nkv), i32(hs), i64(int(cb)), i64(int(ch)), i64(int(cp)))
	ntiles := (tn + decTQ - 1) / decTQ
	nsplit, chunk := decodeSplits(b, tn, t0+tn, nh)
	var part scratch
	if nsplit > 1 {
		part = d.scratch(op, int64(4*nsplit*b*nh*tn*(hs+2)))
		defer d.release(part)
	}
	d.launch(kFlashDecode, dim3{uint32(ntiles * nsplit), uint32(nh), uint32(b)}, dim3{decThreads, 1, 1},
		ptr(o), rawPtr(part.ptr), ptr(x), ptr(kc), ptr(vc), ptr(m),
		i32(tn), i32(t0), i32(nh), i32(nkv), i32(hs),
		i64(tn*w), i32(w), i64(int(cb)), i64(int(ch)), i64(int(cp)),
		i32(nh*hs), i32(tmax), i32(nsplit), i32(chunk), f32(attnScale(hs)))
	if nsplit > 1 {
		d.launchN(kFlashDecodeCombine, b*nh*tn*hs, ptr(o), rawPtr(part.ptr), i32(b), i32(tn), i32(nh), i32(hs),
			i32(nh*hs), i32(nsplit))
	}
}

// decodeSplits chooses split-K for flash decoding of tn queries over nk
// cache positions: nsplit blocks per query tile, each over chunk keys (a
// multiple of decTK; nsplit·chunk >= nk). It splits only when the grid
// would hold fewer than decTargetBlocks blocks and every split gets at
// least decMinChunk keys, and never into more than decMaxSplits; nsplit =
// 1 (chunk = nk) otherwise.
func decodeSplits(b, tn, nk, nh int) (nsplit, chunk int) {
	blocks := (tn + decTQ - 1) / decTQ * nh * b
	nsplit = min((decTargetBlocks+blocks-1)/max(blocks, 1), nk/decMinChunk, decMaxSplits)
	if nsplit <= 1 {
		return 1, nk
	}
	chunk = (nk + nsplit - 1) / nsplit
	chunk = (chunk + decTK - 1) / decTK * decTK
	return (nk + chunk - 1) / chunk, chunk
}

// headLayout checks a (Head)RMSNorm layout: n rows of ld elements, g
// heads of c at the start of each.
func (c check) headLayout(n, g, cc, ld int) (span int) {
	c.dims("n, g, c, ld", n, g, cc, ld)
	if n > 0 && g*cc > ld {
		c.fail("%d heads of %d in rows of %d", g, cc, ld)
	}
	if n == 0 || g == 0 {
		return 0
	}
	return (n-1)*ld + g*cc
}

// RMSNormForward implements kernels.Ops.
func (d *Device) RMSNormForward(out, rstd, inp, weight kernels.Buffer, n, c int, eps float32) {
	d.rmsForward("RMSNormForward", out, rstd, inp, weight, n, 1, c, c, eps)
}

// HeadRMSNormForward implements kernels.Ops.
func (d *Device) HeadRMSNormForward(out, rstd, inp, weight kernels.Buffer, n, g, c, ld int, eps float32) {
	d.rmsForward("HeadRMSNormForward", out, rstd, inp, weight, n, g, c, ld, eps)
}

func (d *Device) rmsForward(op string, out, rstd, inp, weight kernels.Buffer, n, g, c, ld int, eps float32) {
	ck := check{d, op}
	span := ck.headLayout(n, g, c, ld)
	o, x := ck.f32("out", out, span), ck.f32("inp", inp, span)
	rs := ck.f32("rstd", rstd, n*g)
	w := ck.optW("weight", weight, c)
	if c == 0 {
		return
	}
	d.launchRows(kRMSNormFwd, n*g, ptr(o), ptr(rs), ptr(x), ptr(w), isBF16(w), i32(n*g), i32(g), i32(c), i32(ld), f32(eps))
}

// RMSNormBackward implements kernels.Ops (dinp accumulates).
func (d *Device) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd kernels.Buffer, n, c int) {
	d.rmsBackward("RMSNormBackward", dinp, dweight, dout, inp, weight, rstd, n, 1, c, c, true)
}

// HeadRMSNormBackward implements kernels.Ops (dinp overwritten, may alias
// dout: dweight runs first, then each head is read before it is written).
func (d *Device) HeadRMSNormBackward(dinp, dweight, dout, inp, weight, rstd kernels.Buffer, n, g, c, ld int) {
	d.rmsBackward("HeadRMSNormBackward", dinp, dweight, dout, inp, weight, rstd, n, g, c, ld, false)
}

func (d *Device) rmsBackward(op string, dinp, dweight, dout, inp, weight, rstd kernels.Buffer, n, g, c, ld int, accumulate bool) {
	ck := check{d, op}
	span := ck.headLayout(n, g, c, ld)
	dx, dy, x := ck.f32("dinp", dinp, span), ck.f32("dout", dout, span), ck.f32("inp", inp, span)
	dw := ck.optF32("dweight", dweight, c)
	w := ck.optW("weight", weight, c)
	rs := ck.f32("rstd", rstd, n*g)
	if c == 0 || n*g == 0 {
		return
	}
	if dw != nil {
		d.launchN(kRMSNormBwdDw, c, ptr(dw), ptr(dy), ptr(x), ptr(rs), i32(n*g), i32(g), i32(c), i32(ld))
	}
	acc := 0
	if accumulate {
		acc = 1
	}
	d.launchRows(kRMSNormBwdDx, n*g, ptr(dx), ptr(dy), ptr(x), ptr(w), isBF16(w), ptr(rs), i32(n*g), i32(g), i32(c), i32(ld), i32(acc))
}

// RoPEForward implements kernels.Ops; a position outside the table turns
// the row's rotated elements into NaNs (the CPU backend panics).
func (d *Device) RoPEForward(x, pos, cos, sin kernels.Buffer, n, nh, hs, ld int) {
	d.rope("RoPEForward", x, pos, cos, sin, n, nh, hs, ld, false)
}

// RoPEBackward implements kernels.Ops.
func (d *Device) RoPEBackward(dx, pos, cos, sin kernels.Buffer, n, nh, hs, ld int) {
	d.rope("RoPEBackward", dx, pos, cos, sin, n, nh, hs, ld, true)
}

func (d *Device) rope(op string, x, pos, cos, sin kernels.Buffer, n, nh, hs, ld int, inverse bool) {
	ck := check{d, op}
	ck.dims("n, nh, hs, ld", n, nh, hs, ld)
	if hs%2 != 0 || nh*hs > ld {
		ck.fail("%d heads of %d (an odd head size, or wider than rows of %d)", nh, hs, ld)
	}
	span := 0
	if n > 0 && nh > 0 {
		span = (n-1)*ld + nh*hs
	}
	xb := ck.f32("x", x, span)
	p := ck.i32("pos", pos, n)
	cb, sb := ck.f32("cos", cos, 0), ck.f32("sin", sin, 0)
	if span == 0 || hs == 0 {
		return
	}
	maxPos := min(cb.n, sb.n) / (hs / 2)
	inv := 0
	if inverse {
		inv = 1
	}
	d.launchN(kRoPE, n*nh*hs/2, ptr(xb), ptr(p), ptr(cb), ptr(sb), i32(n), i32(nh), i32(hs), i32(ld), i32(maxPos), i32(inv))
}

// SwiGLUForward implements kernels.Ops.
func (d *Device) SwiGLUForward(out, inp kernels.Buffer, n, f int) {
	ck := check{d, "SwiGLUForward"}
	ck.dims("n, f", n, f)
	o, x := ck.f32("out", out, n*f), ck.f32("inp", inp, 2*n*f)
	d.launchN(kSwiGLUFwd, n*f, ptr(o), ptr(x), i32(n), i32(f))
}

// SwiGLUBackward implements kernels.Ops.
func (d *Device) SwiGLUBackward(dinp, dout, inp kernels.Buffer, n, f int) {
	ck := check{d, "SwiGLUBackward"}
	ck.dims("n, f", n, f)
	dx, dy, x := ck.f32("dinp", dinp, 2*n*f), ck.f32("dout", dout, n*f), ck.f32("inp", inp, 2*n*f)
	d.launchN(kSwiGLUBwd, n*f, ptr(dx), ptr(dy), ptr(x), i32(n), i32(f))
}

// dropGamma is the SplitMix64 increment of the dropout generator.
const dropGamma = 0x9E3779B97F4A7C15

func splitmix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// dropoutParams are the host-side scalars of DropoutForward, as the CPU
// backend computes them: the generator's key, the keep threshold on
// r>>40 and the scale of kept elements.
func dropoutParams(p float32, seed uint64) (key, thr uint64, keepScale float32) {
	keepScale = float32(1 / (1 - float64(p)))
	if p >= 1 {
		keepScale = 0
	}
	if p > 0 {
		thr = uint64(math.Ceil(float64(p) * (1 << 24)))
	}
	return splitmix(seed + dropGamma), thr, keepScale
}

// DropoutForward implements kernels.Ops with the contract's counter-based
// generator, element for element the CPU backend's.
func (d *Device) DropoutForward(out, scale, inp kernels.Buffer, p float32, seed uint64, n int) {
	ck := check{d, "DropoutForward"}
	ck.dims("n", n)
	o, s, x := ck.f32("out", out, n), ck.f32("scale", scale, n), ck.f32("inp", inp, n)
	key, thr, ks := dropoutParams(p, seed)
	d.launchN(kDropout, n, ptr(o), ptr(s), ptr(x), u64(key), u64(thr), f32(ks), i64(n))
}

// CrossEntropyForward implements kernels.Ops; a target outside [0,V) that
// is not ignoreIndex gives a NaN loss (the CPU backend panics).
func (d *Device) CrossEntropyForward(losses, logits, targets kernels.Buffer, n, v int, ignoreIndex int32) {
	ck := check{d, "CrossEntropyForward"}
	ck.dims("n, v", n, v)
	l, x, t := ck.f32("losses", losses, n), ck.f32("logits", logits, n*v), ck.i32("targets", targets, n)
	d.launchRows(kCrossEntropyFwd, n, ptr(l), ptr(x), ptr(t), i32(n), i32(v), i32(int(ignoreIndex)))
}

// CrossEntropyBackward implements kernels.Ops (a bad target: a row of NaNs).
func (d *Device) CrossEntropyBackward(dlogits, dlosses, logits, targets kernels.Buffer, n, v int, ignoreIndex int32) {
	ck := check{d, "CrossEntropyBackward"}
	ck.dims("n, v", n, v)
	dx, dl := ck.f32("dlogits", dlogits, n*v), ck.f32("dlosses", dlosses, n)
	x, t := ck.f32("logits", logits, n*v), ck.i32("targets", targets, n)
	d.launchRows(kCrossEntropyBwd, n, ptr(dx), ptr(dl), ptr(x), ptr(t), i32(n), i32(v), i32(int(ignoreIndex)))
}

// LogProbGather implements kernels.Ops (a bad id: NaN).
func (d *Device) LogProbGather(out, logits, ids kernels.Buffer, n, v int) {
	ck := check{d, "LogProbGather"}
	ck.dims("n, v", n, v)
	o, x, id := ck.f32("out", out, n), ck.f32("logits", logits, n*v), ck.i32("ids", ids, n)
	d.launchRows(kLogProbGather, n, ptr(o), ptr(x), ptr(id), i32(n), i32(v))
}

// adamWScalars are one AdamW step's scalars, computed in float64 and
// rounded to float32 as kernels/cpu (and PyTorch with its Python floats)
// does.
type adamWScalars struct {
	gradScale, decay, w1, w2, b2, bc2s, negStep, eps float32
}

func newAdamWScalars(lr, beta1, beta2, eps, weightDecay, gradScale float32, step int) adamWScalars {
	b1, b2 := float64(beta1), float64(beta2)
	bc1 := 1 - math.Pow(b1, float64(step))
	bc2 := 1 - math.Pow(b2, float64(step))
	return adamWScalars{
		gradScale: gradScale,
		decay:     float32(1 - float64(lr)*float64(weightDecay)),
		w1:        float32(1 - b1),
		w2:        float32(1 - b2),
		b2:        beta2,
		bc2s:      float32(math.Sqrt(bc2)),
		negStep:   float32(-(float64(lr) / bc1)),
		eps:       eps,
	}
}

func (s adamWScalars) args() []kernelArg {
	return []kernelArg{f32(s.gradScale), f32(s.decay), f32(s.w1), f32(s.w2), f32(s.b2), f32(s.bc2s), f32(s.negStep), f32(s.eps)}
}

// AdamWStep implements kernels.Ops: kernels/cpu's float32 operation order
// (a fused kernel).
func (d *Device) AdamWStep(params, grads, m, v kernels.Buffer, n int, lr, beta1, beta2, eps, weightDecay, gradScale float32, step int) {
	ck := check{d, "AdamWStep"}
	ck.dims("n, step", n, step)
	p, g, mm, vv := ck.f32("params", params, n), ck.f32("grads", grads, n), ck.f32("m", m, n), ck.f32("v", v, n)
	s := newAdamWScalars(lr, beta1, beta2, eps, weightDecay, gradScale, step)
	d.launchN(kAdamW, n, append([]kernelArg{ptr(p), ptr(g), ptr(mm), ptr(vv), i64(n)}, s.args()...)...)
}

// AdamWStepBF16 implements kernels.Ops: AdamWStep's arithmetic on the
// masters joined from params and lo, one thread per pair of elements
// (they share a word of lo).
func (d *Device) AdamWStepBF16(params, lo, grads, m, v kernels.Buffer, n int, lr, beta1, beta2, eps, weightDecay, gradScale float32, step int) {
	ck := check{d, "AdamWStepBF16"}
	ck.dims("n, step", n, step)
	p := ck.buf("params", params, n, kernels.BF16)
	l := ck.i32("lo", lo, (n+1)/2)
	g, mm, vv := ck.f32("grads", grads, n), ck.f32("m", m, n), ck.f32("v", v, n)
	if l.ptr%4 != 0 {
		ck.fail("lo is not 4-byte aligned")
	}
	s := newAdamWScalars(lr, beta1, beta2, eps, weightDecay, gradScale, step)
	d.launchN(kAdamWBF16, (n+1)/2, append([]kernelArg{ptr(p), ptr(l), ptr(g), ptr(mm), ptr(vv), i64(n)}, s.args()...)...)
}

// SumSquares implements kernels.Ops: per buffer, up to sumBlocks partial
// sums in double, then one block adds them all in order and one float64
// comes back (deterministic: the partials do not depend on timing).
func (d *Device) SumSquares(xs ...kernels.Buffer) float64 {
	ck := check{d, "SumSquares"}
	bufs := make([]*Buffer, len(xs))
	nparts := 0
	for i, x := range xs {
		bufs[i] = ck.f32(fmt.Sprintf("xs[%d]", i), x, 0)
		nparts += sumSqBlocks(bufs[i].n)
	}
	if nparts == 0 {
		return 0
	}
	part := d.scratch("SumSquares", int64(8*(nparts+1)))
	defer d.release(part)
	at := 0
	for _, b := range bufs {
		nb := sumSqBlocks(b.n)
		if nb == 0 {
			continue
		}
		d.launch(kSumSqPartial, dim3{uint32(nb), 1, 1}, dim3{elemBlock, 1, 1}, rawPtr(part.ptr+uintptr(8*at)), ptr(b), i64(b.n))
		at += nb
	}
	out := part.ptr + uintptr(8*nparts)
	d.launch(kSumD, dim3{1, 1, 1}, dim3{1024, 1, 1}, rawPtr(out), rawPtr(part.ptr), i32(nparts))
	var r float64
	if err := d.Sync(); err != nil {
		panic(fmt.Sprintf("cuda: SumSquares: %v", err))
	}
	d.must("SumSquares", d.g.dtoh(unsafe.Pointer(&r), out, 8))
	return r
}

// sumSqBlocks is the number of partial sums of a buffer of n elements.
func sumSqBlocks(n int) int {
	return min((n+elemBlock-1)/elemBlock, sumBlocks)
}
