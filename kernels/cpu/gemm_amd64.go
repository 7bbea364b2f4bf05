package cpu

import "unsafe"

// Assembly micro-kernels (gemm_amd64.s). Each computes one micro-tile, see
// gemmKernel.tile for the contract.

// gemmTile14x32AVX512 is the AVX-512 micro-kernel: 14 rows × 32 columns.
//
//go:noescape
func gemmTile14x32AVX512(k int, a, b, c *float32, ldc int, beta float32)

// gemmTile6x16AVX2 is the AVX2+FMA micro-kernel: 6 rows × 16 columns.
//
//go:noescape
func gemmTile6x16AVX2(k int, a, b, c *float32, ldc int, beta float32)

// gemmPackA14TAVX512 sets dst[p*14 + i] = alpha·src[i*lds + p] for i < 14,
// p < 16·groups.
//
//go:noescape
func gemmPackA14TAVX512(dst, src *float32, lds, groups int, alpha float32)

// gemmPackB16TAVX512 sets dst[p*32 + j] = src[j*lds + p] for j < 16,
// p < 16·groups.
//
//go:noescape
func gemmPackB16TAVX512(dst, src *float32, lds, groups int)

// gemmPackA14AVX512 sets dst[p*14 + i] = alpha·src[p*lds + i] for i < 14,
// p < kc.
//
//go:noescape
func gemmPackA14AVX512(dst, src *float32, lds, kc int, alpha float32)

// gemmPackB32AVX512 sets dst[p*32 + j] = src[p*lds + j] for j < 32, p < kc.
//
//go:noescape
func gemmPackB32AVX512(dst, src *float32, lds, kc int)

// gemmPackB32BF16AVX512 sets dst[p*32 + j] = FromBF16(src[p*lds + j]) for
// j < 32, p < kc (AVX-512F and BW).
//
//go:noescape
func gemmPackB32BF16AVX512(dst *float32, src *uint16, lds, kc int)

// gemmPackB32RoundAVX512 sets dst[p*32 + j] = FromBF16(ToBF16(src[p*lds +
// j])) for j < 32, p < kc (AVX-512F, BW and DQ).
//
//go:noescape
func gemmPackB32RoundAVX512(dst, src *float32, lds, kc int)

// gemmPackA14BF16AVX512 sets dst[p*14 + i] = alpha·FromBF16(src[p*lds +
// i]) for i < 14, p < kc (AVX-512F and BW).
//
//go:noescape
func gemmPackA14BF16AVX512(dst *float32, src *uint16, lds, kc int, alpha float32)

// gemmPackA14RoundAVX512 sets dst[p*14 + i] =
// alpha·FromBF16(ToBF16(src[p*lds + i])) for i < 14, p < kc (AVX-512F, BW
// and DQ).
//
//go:noescape
func gemmPackA14RoundAVX512(dst, src *float32, lds, kc int, alpha float32)

// gemmDotAVX2 returns Σ x[i]·y[i] over n elements.
//
//go:noescape
func gemmDotAVX2(x, y *float32, n int) float32

// gemmAxpyAVX2 does y[i] += alpha·x[i] over n elements.
//
//go:noescape
func gemmAxpyAVX2(alpha float32, x, y *float32, n int)

// Cache blocking. The AVX-512 kernel keeps a 14×kc A micro-panel in L1
// (21 KiB at kc = 384) while it streams 32-column B micro-panels (48 KiB)
// out of a kc×nc B block held in L2 (0.9 MiB at nc = 640); the A block
// (mc rows × all of K, at most gemmABudget floats) lives in L3. On this
// machine (48 KiB L1d, 2 MiB L2 per core) kc from 256 to 512 and nc from
// 384 to 960 all measured within noise of each other.
var (
	gemmAVX512 = gemmKernel{
		name: "avx512",
		mr:   14, nr: 32,
		kc: 384, mc: 14 * 512, nc: 32 * 20,
		tile:  gemmTile14x32AVX512,
		dot:   gemmDotAVX2Slice,
		axpy:  gemmAxpyAVX2Slice,
		packA: gemmPackAPanelAVX512,
		packB: gemmPackBPanelAVX512,
		// bf16 operands in the layouts where gemmConvert would convert
		// runs of 14 or 32 values a call.
		packASrc: gemmPackASrcAVX512,
		packBSrc: gemmPackBSrcAVX512,
	}
	gemmAVX2 = gemmKernel{
		name: "avx2",
		mr:   6, nr: 16,
		kc: 256, mc: 6 * 1024, nc: 16 * 48,
		tile:  gemmTile6x16AVX2,
		dot:   gemmDotAVX2Slice,
		axpy:  gemmAxpyAVX2Slice,
		packA: gemmPackAPanel,
		packB: gemmPackBPanel,
	}
)

// gemmKernelFor returns the micro-kernel for an ISA.
func gemmKernelFor(is isa) *gemmKernel {
	switch is {
	case isaAVX512:
		return &gemmAVX512
	case isaAVX2:
		return &gemmAVX2
	}
	return &gemmGeneric
}

func gemmDotAVX2Slice(x, y []float32) float32 {
	if len(x) == 0 {
		return 0
	}
	y = y[:len(x)]
	return gemmDotAVX2(unsafe.SliceData(x), unsafe.SliceData(y), len(x))
}

func gemmAxpyAVX2Slice(alpha float32, x, y []float32) {
	if len(x) == 0 {
		return
	}
	y = y[:len(x)]
	gemmAxpyAVX2(alpha, unsafe.SliceData(x), unsafe.SliceData(y), len(x))
}

// gemmPackAPanelAVX512 is gemmPackAPanel for mr = 14: whole panels go
// through assembly (16×16 transposes when A is not transposed), partial
// ones and the last kc mod 16 columns through Go.
func gemmPackAPanelAVX512(d []float32, mr int, transA bool, a []float32, lda, i0, p0, rows, kc int, alpha float32) {
	if rows != 14 || mr != 14 {
		gemmPackAPanel(d, mr, transA, a, lda, i0, p0, rows, kc, alpha)
		return
	}
	d = d[:14*kc]
	if transA {
		_ = a[(p0+kc-1)*lda+i0+13]
		gemmPackA14AVX512(&d[0], &a[p0*lda+i0], lda, kc, alpha)
		return
	}
	g := kc / 16
	if g > 0 {
		_ = a[(i0+13)*lda+p0+16*g-1]
		gemmPackA14TAVX512(&d[0], &a[i0*lda+p0], lda, g, alpha)
	}
	if 16*g < kc {
		for i := range 14 {
			gemmScatter(d[16*g*14+i:], a[(i0+i)*lda+p0+16*g:][:kc-16*g], 14, alpha)
		}
	}
}

// gemmPackASrcAVX512 is gemmKernel.packASrc for the AVX-512 kernel: whole
// panels of a transposed A (each step 14 contiguous values) through
// assembly that widens or rounds as it copies.
func gemmPackASrcAVX512(d []float32, mr int, transA bool, a gemmSrc, lda, i0, p0, rows, kc int, alpha float32) bool {
	if !transA || mr != 14 || rows != 14 || kc == 0 || !bf16HasAVX512 {
		return false
	}
	d = d[:14*kc]
	if a.bf {
		_ = a.h[(p0+kc-1)*lda+i0+13]
		gemmPackA14BF16AVX512(&d[0], &a.h[p0*lda+i0], lda, kc, alpha)
	} else {
		_ = a.f[(p0+kc-1)*lda+i0+13]
		gemmPackA14RoundAVX512(&d[0], &a.f[p0*lda+i0], lda, kc, alpha)
	}
	return true
}

// gemmPackBSrcAVX512 is gemmKernel.packBSrc for the AVX-512 kernel: whole
// panels of an untransposed B (each step 32 contiguous values).
func gemmPackBSrcAVX512(d []float32, nr int, transB bool, b gemmSrc, ldb, p0, j0, cols, kc int) bool {
	if transB || nr != 32 || cols != 32 || kc == 0 || !bf16HasAVX512 {
		return false
	}
	d = d[:32*kc]
	if b.bf {
		_ = b.h[(p0+kc-1)*ldb+j0+31]
		gemmPackB32BF16AVX512(&d[0], &b.h[p0*ldb+j0], ldb, kc)
	} else {
		_ = b.f[(p0+kc-1)*ldb+j0+31]
		gemmPackB32RoundAVX512(&d[0], &b.f[p0*ldb+j0], ldb, kc)
	}
	return true
}

// gemmPackBPanelAVX512 is gemmPackBPanel for nr = 32, in the manner of
// gemmPackAPanelAVX512.
func gemmPackBPanelAVX512(d []float32, nr int, transB bool, b []float32, ldb, p0, j0, cols, kc int) {
	if cols != 32 || nr != 32 {
		gemmPackBPanel(d, nr, transB, b, ldb, p0, j0, cols, kc)
		return
	}
	d = d[:32*kc]
	if !transB {
		_ = b[(p0+kc-1)*ldb+j0+31]
		gemmPackB32AVX512(&d[0], &b[p0*ldb+j0], ldb, kc)
		return
	}
	g := kc / 16
	if g > 0 {
		_ = b[(j0+31)*ldb+p0+16*g-1]
		gemmPackB16TAVX512(&d[0], &b[j0*ldb+p0], ldb, g)
		gemmPackB16TAVX512(&d[16], &b[(j0+16)*ldb+p0], ldb, g)
	}
	if 16*g < kc {
		for j := range 32 {
			gemmScatter(d[16*g*32+j:], b[(j0+j)*ldb+p0+16*g:][:kc-16*g], 32, 1)
		}
	}
}
