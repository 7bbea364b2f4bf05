package cuda

import (
	"github.com/gochat-ai/gochat/kernels"
)

// Gemm implements kernels.Ops through cublasGemmEx: row-major C =
// alpha·op(A)·op(B) + beta·C is column-major Cᵀ = alpha·op(B)ᵀ·op(A)ᵀ +
// beta·Cᵀ, so cuBLAS gets B first. With a BF16 operand it is a bf16 GEMM:
// the F32 operand is rounded to bf16 into scratch first.
func (d *Device) Gemm(transA, transB bool, m, n, k int, alpha float32, a kernels.Buffer, lda int, b kernels.Buffer, ldb int, beta float32, c kernels.Buffer, ldc int) {
	d.gemm("Gemm", transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false)
}

// matrixSpan is the elements a row-major [rows, ld] matrix of cols used
// columns spans.
func matrixSpan(rows, cols, ld int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

// gemm is Gemm; forceBF16 makes it a bf16 GEMM even with two F32
// operands (MatmulBackward's dweight with a BF16 weight).
func (d *Device) gemm(op string, transA, transB bool, m, n, k int, alpha float32, a kernels.Buffer, lda int, b kernels.Buffer, ldb int, beta float32, c kernels.Buffer, ldc int, forceBF16 bool) {
	ck := check{d, op}
	ck.dims("m, n, k, lda, ldb, ldc", m, n, k, lda, ldb, ldc)
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if lda < max(ac, 1) || ldb < max(bc, 1) || ldc < max(n, 1) {
		ck.fail("leading dimensions lda=%d ldb=%d ldc=%d below the rows' %d, %d, %d columns", lda, ldb, ldc, ac, bc, n)
	}
	ab := ck.w("A", a, matrixSpan(ar, ac, lda))
	bb := ck.w("B", b, matrixSpan(br, bc, ldb))
	cb := ck.f32("C", c, matrixSpan(m, n, ldc))
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		d.launchN(kScaleMatrix, m*n, ptr(cb), i32(m), i32(n), i32(ldc), f32(beta))
		return
	}
	bf := forceBF16 || ab.dt == kernels.BF16 || bb.dt == kernels.BF16
	aPtr, bPtr := ab.ptr, bb.ptr
	typ := cudaR32F
	if bf {
		typ = cudaR16BF
		if ab.dt == kernels.F32 {
			s := d.rounded(ab, matrixSpan(ar, ac, lda))
			defer d.release(s)
			aPtr = s.ptr
		}
		if bb.dt == kernels.F32 {
			s := d.rounded(bb, matrixSpan(br, bc, ldb))
			defer d.release(s)
			bPtr = s.ptr
		}
	}
	g := gemmCall{
		transA: cublasOp(transB), transB: cublasOp(transA),
		m: n, n: m, k: k, alpha: alpha, beta: beta,
		a: bPtr, aType: typ, lda: ldb,
		b: aPtr, bType: typ, ldb: lda,
		c: cb.ptr, ldc: ldc,
	}
	if d.err == nil {
		d.fail(d.g.gemm(g))
	}
}

func cublasOp(t bool) int {
	if t {
		return cublasOpT
	}
	return cublasOpN
}

// rounded returns scratch holding the first n elements of the F32 buffer
// x rounded to bf16.
func (d *Device) rounded(x *Buffer, n int) scratch {
	s := d.scratch("Gemm", int64(2*n))
	d.launchN(kF32ToBF16, n, rawPtr(s.ptr), ptr(x), i64(n))
	return s
}

// MatmulForward implements kernels.Ops: out = inp·weightᵀ (+ bias), a
// bf16 GEMM when the weight is BF16.
func (d *Device) MatmulForward(out, inp, weight, bias kernels.Buffer, n, c, oc int) {
	ck := check{d, "MatmulForward"}
	ck.dims("n, c, oc", n, c, oc)
	ck.f32("out", out, n*oc)
	ck.f32("inp", inp, n*c)
	ck.w("weight", weight, oc*c)
	bb := ck.optW("bias", bias, oc)
	d.gemm("MatmulForward", false, true, n, oc, c, 1, inp, max(c, 1), weight, max(c, 1), 0, out, max(oc, 1), false)
	if bb != nil {
		d.AddBias(out, bias, n, oc)
	}
}

// MatmulBackward implements kernels.Ops: dinp = dout·weight (overwrites),
// dweight += doutᵀ·inp, dbias += Σ_rows dout; with a BF16 weight both
// products are bf16 GEMMs and dbias sums the unrounded dout.
func (d *Device) MatmulBackward(dinp, dweight, dbias, dout, inp, weight kernels.Buffer, n, c, oc int) {
	ck := check{d, "MatmulBackward"}
	ck.dims("n, c, oc", n, c, oc)
	ck.optF32("dinp", dinp, n*c)
	ck.optF32("dweight", dweight, oc*c)
	db := ck.optF32("dbias", dbias, oc)
	dy := ck.f32("dout", dout, n*oc)
	ck.f32("inp", inp, n*c)
	w := ck.w("weight", weight, oc*c)
	bf := w.dt == kernels.BF16
	if dinp != nil {
		d.gemm("MatmulBackward", false, false, n, c, oc, 1, dout, max(oc, 1), weight, max(c, 1), 0, dinp, max(c, 1), false)
	}
	if dweight != nil {
		d.gemm("MatmulBackward", true, false, oc, c, n, 1, dout, max(oc, 1), inp, max(c, 1), 1, dweight, max(c, 1), bf)
	}
	if db != nil {
		d.launchN(kColsumAdd, oc, ptr(db), ptr(dy), i32(n), i32(oc))
	}
}
