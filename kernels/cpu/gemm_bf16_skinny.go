package cpu

import "unsafe"

// Matrix-vector and skinny bf16 products. With one row (m == 1, decoding
// one sequence), one column (n == 1), or a few rows against a BF16 matrix
// (decoding a few sequences), packing would cost more than the arithmetic
// and the product is bound by reading the matrix. These paths round the
// few rows (the "vectors") to bf16 once, then stream the matrix as it is
// stored — 2 bytes an element when it is BF16 — widening each element to
// fp32 and accumulating with fp32 FMAs (a product of two bf16 values is
// exact in fp32, so this is VDPBF16PS's arithmetic without its denormal
// flushing).
//
// Every case is one shape: S[i, j] = Σ_p X[i, p]·W(p, j) for i < mm rows
// of X (bf16 values as float32, k each) and j < nw columns, then
// C = alpha·S + beta·C. W is read in one of two orientations:
//
//	dot:  W(p, j) = w[j*ldw + p] — each j is a contiguous run of K
//	axpy: W(p, j) = w[p*ldw + j] — each p is a contiguous run of columns

// gemmSkinnyRows is the number of rows of X the skinny kernels take at
// once.
const gemmSkinnyRows = 4

// gemmBF16SkinnyMax is the largest m that goes through the skinny kernels
// (in passes of gemmSkinnyRows) instead of the blocked path when B is a
// BF16 matrix; -1 lets gemmSkinnyMaxRows decide. Tests change it.
var gemmBF16SkinnyMax = -1

// gemmSkinnyMaxRows is the largest m for the skinny kernels. Against the
// fp32 blocked path (no tile kernel) they win up to 8 rows. Against AMX
// (3072×768 B, one core) they win for up to 3 rows of x·Bᵀ (m = 2: 29 vs
// 22 GFLOP/s; m = 4: even; m = 8: 60 vs 96) and only for one row of x·B.
func gemmSkinnyMaxRows(im *gemmBF16Impl, transB bool) int {
	switch {
	case gemmBF16SkinnyMax >= 0:
		return gemmBF16SkinnyMax
	case im.tile == nil:
		return 8
	case transB:
		return 3
	}
	return 1
}

// gemmSkinnyKernels multiply up to gemmSkinnyRows rows of X (float32, rows
// ldx apart) by a BF16 matrix w, overwriting s[i*lds + j] for i < mm, j <
// nw with Σ_p x[i*ldx + p]·FromBF16(W(p, j)) over p < k (s may be written
// up to row gemmSkinnyRows-1):
type gemmSkinnyKernels struct {
	// dots reads W(p, j) = w[j*ldw + p].
	dots func(x *float32, ldx, mm int, w *uint16, ldw, nw, k int, s *float32, lds int)
	// axpys reads W(p, j) = w[p*ldw + j].
	axpys func(x *float32, ldx, mm int, w *uint16, ldw, nw, k int, s *float32, lds int)
}

// gemmBF16Skinny runs the product on the matrix-vector or skinny path
// when it is one (m == 1, n == 1, or 2 ≤ m ≤ gemmBF16SkinnyMax against a
// BF16 B with skinny kernels) and reports whether it did.
func gemmBF16Skinny(im *gemmBF16Impl, threads int, transA, transB bool, m, n, k int, alpha float32, a gemmSrc, lda int, b gemmSrc, ldb int, beta float32, bias, c []float32, ldc int) bool {
	switch {
	case n == 1 && m > 1:
		// C[:, 0] = alpha·op(A)·v + beta·C[:, 0] with v = op(B)[:, 0]:
		// the rows of X are v, W(p, r) = op(A)[r, p].
		s := gemmPool.Get().(*gemmScratch)
		defer gemmPool.Put(s)
		x := gemmAligned(&s.vec, k)
		for p := range k {
			o := p * ldb
			if transB {
				o = p
			}
			x[p] = b.at(o)
		}
		if bias != nil {
			gemmScaleC(m, 1, beta, c, ldc)
			gemmAddBias(m, bias, c, ldc)
			beta = 1
		}
		gemmSkinnyRun(im, threads, x, k, 1, a, lda, !transA, m, k, alpha, beta, c, 0, ldc)
		return true
	case m == 1 || m <= gemmSkinnyMaxRows(im, transB) && b.bf && im.skinny != nil:
		// C = alpha·X·op(B) + beta·C with X = op(A): W = op(B).
		s := gemmPool.Get().(*gemmScratch)
		defer gemmPool.Put(s)
		x := gemmAligned(&s.vec, m*k)
		for i := range m {
			for p := range k {
				o := i*lda + p
				if transA {
					o = p*lda + i
				}
				x[i*k+p] = a.at(o)
			}
		}
		if bias != nil {
			gemmScaleC(m, n, beta, c, ldc)
			gemmAddBias(m, bias, c, ldc)
			beta = 1
		}
		for i0 := 0; i0 < m; i0 += gemmSkinnyRows {
			mm := min(gemmSkinnyRows, m-i0)
			gemmSkinnyRun(im, threads, x[i0*k:], k, mm, b, ldb, transB, n, k, alpha, beta, c[i0*ldc:], ldc, 1)
		}
		return true
	}
	return false
}

// gemmSkinnyRun computes C[i*ci + j*cj] = alpha·S[i, j] + beta·C[i*ci +
// j*cj] for i < mm, j < nw (beta == 0 overwrites), S as above with X = x
// (rows ldx apart) and W = w (dot orientation when dot), on up to threads
// goroutines splitting the columns.
func gemmSkinnyRun(im *gemmBF16Impl, threads int, x []float32, ldx, mm int, w gemmSrc, ldw int, dot bool, nw, k int, alpha, beta float32, c []float32, ci, cj int) {
	t := min(threads, max(1, mm*nw*k/gemmMinWork), max(1, nw/16))
	n := min(4*t, max(1, nw/16)) // shares: see gemmFanOutN
	gemmFanOutN(t, n, func(g int) {
		lo, hi := gemmSkinnyAlign(g, n, nw)
		s := gemmPool.Get().(*gemmScratch)
		defer gemmPool.Put(s)
		width := hi - lo
		sum := gemmAligned(&s.b, gemmSkinnyRows*width) // four rows: see gemmSkinnyAVX512
		gemmSkinnySums(im, x, ldx, mm, w, ldw, dot, lo, hi, k, sum, s)
		for i := range mm {
			row := sum[i*width : (i+1)*width]
			for j, v := range row {
				o := i*ci + (lo+j)*cj
				v *= alpha
				if beta != 0 {
					v += beta * c[o]
				}
				c[o] = v
			}
		}
	})
}

// gemmSkinnyAlign is goroutine g's share of nw columns among t: split at
// multiples of 16 so that vector kernels see whole runs where they can.
func gemmSkinnyAlign(g, t, nw int) (lo, hi int) {
	runs := (nw + 15) / 16
	lo, hi = g*runs/t*16, (g+1)*runs/t*16
	return min(lo, nw), min(hi, nw)
}

// gemmSkinnySums sets sum[i*(hi-lo) + j-lo] = S[i, j] for i < mm, lo ≤ j
// < hi, with the skinny kernels for a BF16 matrix and otherwise by
// converting runs of W to float32 in scratch and using the fp32 kernel's
// dot and axpy.
func gemmSkinnySums(im *gemmBF16Impl, x []float32, ldx, mm int, w gemmSrc, ldw int, dot bool, lo, hi, k int, sum []float32, s *gemmScratch) {
	width := hi - lo
	if width == 0 {
		return
	}
	if w.bf && im.skinny != nil {
		if dot {
			_ = w.h[(hi-1)*ldw+k-1]
			im.skinny.dots(&x[0], ldx, mm, &w.h[lo*ldw], ldw, width, k, &sum[0], width)
		} else {
			_ = w.h[(k-1)*ldw+hi-1]
			im.skinny.axpys(&x[0], ldx, mm, &w.h[lo], ldw, width, k, &sum[0], width)
		}
		return
	}
	kern := im.fp32
	if dot {
		run := gemmAligned(&s.a, k)
		for j := lo; j < hi; j++ {
			gemmRoundRun(run, w, j*ldw, 1)
			for i := range mm {
				sum[i*width+j-lo] = kern.dot(x[i*ldx:i*ldx+k], run)
			}
		}
		return
	}
	clear(sum[:mm*width])
	run := gemmAligned(&s.a, width)
	for p := range k {
		gemmRoundRun(run, w, p*ldw+lo, 1)
		for i := range mm {
			kern.axpy(x[i*ldx+p], run, sum[i*width:(i+1)*width])
		}
	}
}

// gemmSkinnyDotsGo is the portable gemmSkinnyKernels.dots.
func gemmSkinnyDotsGo(x *float32, ldx, mm int, w *uint16, ldw, nw, k int, s *float32, lds int) {
	xs := unsafe.Slice(x, (mm-1)*ldx+k)
	ws := unsafe.Slice(w, (nw-1)*ldw+k)
	ss := unsafe.Slice(s, (mm-1)*lds+nw)
	for i := range mm {
		xr := xs[i*ldx : i*ldx+k]
		for j := range nw {
			wr := ws[j*ldw : j*ldw+k]
			var acc float32
			for p, v := range xr {
				acc += v * FromBF16(wr[p])
			}
			ss[i*lds+j] = acc
		}
	}
}

// gemmSkinnyAxpysGo is the portable gemmSkinnyKernels.axpys.
func gemmSkinnyAxpysGo(x *float32, ldx, mm int, w *uint16, ldw, nw, k int, s *float32, lds int) {
	xs := unsafe.Slice(x, (mm-1)*ldx+k)
	ws := unsafe.Slice(w, (k-1)*ldw+nw)
	ss := unsafe.Slice(s, (mm-1)*lds+nw)
	for i := range mm {
		sr := ss[i*lds : i*lds+nw]
		clear(sr)
		for p := range k {
			xv := xs[i*ldx+p]
			for j, h := range ws[p*ldw : p*ldw+nw] {
				sr[j] += xv * FromBF16(h)
			}
		}
	}
}
