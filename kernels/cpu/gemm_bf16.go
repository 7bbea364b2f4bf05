package cpu

import (
	"fmt"
	"sync"

	"github.com/gochat-ai/gochat/kernels"
)

// The bf16 GEMM computes what PyTorch's bf16 matmul and DeepSpeed's bf16
// mode compute: both operands rounded to bf16 (round to nearest even; BF16
// buffers are used as they are), products accumulated in fp32, alpha, beta
// and the bias applied in fp32. It has three implementations, picked per
// CPU (gemmBF16ImplFor):
//
//   - tile kernels (gemm_bf16_amd64.s): the operands are packed into bf16
//     k-pair-interleaved panels (gemmTileKernel), converting F32 values with
//     VCVTNE2PS2BF16 as they are packed, and a strip kernel multiplies them
//     with AMX (TDPBF16PS, Sapphire Rapids and later) or AVX512-BF16
//     (VDPBF16PS), accumulating in fp32;
//   - the portable path: the fp32 blocked GEMM, each panel's region of
//     the operand rounded (or widened) to float32 a row at a time
//     (gemmConvert) and packed by the fp32 packers, then the fp32
//     micro-kernels, which are exact on bf16 products; on Intel CPUs
//     without usable AMX this is the fastest of the three (see
//     gemmBF16ImplFor);
//   - matrix-vector and skinny products (m == 1, n == 1, and a few rows
//     against a BF16 matrix, as in decoding) read the matrix directly,
//     2 bytes an element for BF16 (gemmBF16Skinny).
//
// The AMX and AVX512-BF16 instructions treat bf16 denormal inputs as zero
// and flush denormal results (their documented DAZ/FTZ behaviour); the
// portable path keeps them. That is the only difference in what is
// computed; the accumulation order differs between all paths.

// gemmBF16 is gemmBias in bf16 precision: C = alpha·op(A)·op(B) + beta·C +
// bias, where op(A) is M×K (A stored M×K with row stride lda, or K×M when
// transA) and op(B) is K×N (B stored K×N with row stride ldb, or N×K when
// transB); C is M×N with row stride ldc. a and b are each an F32 buffer
// (rounded to bf16, ties to even, as it is read) or a BF16 buffer (used as
// it is); the products are accumulated in fp32. bias (nil, or N floats) is
// added to every row; beta == 0 overwrites C without reading it. See
// gemmBias for the rest of the contract.
func gemmBF16(is isa, threads int, transA, transB bool, m, n, k int, alpha float32, a kernels.Buffer, lda int, b kernels.Buffer, ldb int, beta float32, bias, c []float32, ldc int) {
	gemmBF16With(gemmBF16ImplFor(is), threads, transA, transB, m, n, k, alpha, gemmBF16Src(a), lda, gemmBF16Src(b), ldb, beta, bias, c, ldc)
}

// GemmBF16 is Gemm in bf16 precision: C[M,N] = alpha·op(A)·op(B) +
// beta·C with op(A) M×K and op(B) K×N stored as for Gemm, where a and b
// are each an F32 buffer (rounded to bf16, ties to even, as it is read) or
// a BF16 buffer, the products accumulated in fp32; C is an F32 buffer.
// beta == 0 overwrites C without reading it.
func (d *Device) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a kernels.Buffer, lda int, b kernels.Buffer, ldb int, beta float32, c kernels.Buffer, ldc int) {
	gemmBF16(d.isa, d.threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, f32(c), ldc)
}

// GemmBF16Kernel names the implementation GemmBF16 runs on this device:
// "amx", "avx512bf16", "avx512", "avx2" or "generic".
func (d *Device) GemmBF16Kernel() string { return gemmBF16ImplFor(d.isa).name }

// gemmBF16Src returns an operand of gemmBF16 as it is packed: an F32
// buffer rounded as it is read, or a BF16 buffer.
func gemmBF16Src(buf kernels.Buffer) gemmSrc {
	switch s := buf.(type) {
	case F32:
		return gemmSrc{f: s, round: true}
	case BF16:
		return gemmSrc{h: s, bf: true}
	}
	panic(fmt.Sprintf("cpu: gemmBF16: want an F32 or BF16 operand, got %T", buf))
}

// gemmBF16Impl is one implementation of the bf16 GEMM.
type gemmBF16Impl struct {
	name string
	// fp32 is the micro-kernel of the portable path, used when tile is
	// nil, and its dot and axpy serve the portable matrix-vector path.
	fp32 *gemmKernel
	// tile is the bf16 tile kernel (AMX or AVX512-BF16), or nil.
	tile *gemmTileKernel
	// skinny multiplies up to gemmSkinnyRows rows by a BF16 matrix
	// (gemmSkinnyKernels); nil: the portable matrix-vector path.
	skinny *gemmSkinnyKernels
}

// gemmBF16With is gemmBF16 on gemmSrc operands through one implementation.
func gemmBF16With(im *gemmBF16Impl, threads int, transA, transB bool, m, n, k int, alpha float32, a gemmSrc, lda int, b gemmSrc, ldb int, beta float32, bias, c []float32, ldc int) {
	bias, ok := gemmPrologue(transA, transB, m, n, k, alpha, a.len(), lda, b.len(), ldb, beta, bias, c, ldc)
	if !ok {
		return
	}
	if gemmBF16Skinny(im, threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, bias, c, ldc) {
		return
	}
	if im.tile == nil {
		gemmBiasBlocked(im.fp32, threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, bias, c, ldc)
		return
	}
	gemmTileBiasBlocked(im.tile, threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, bias, c, ldc)
}

// gemmBF16Ref is the reference bf16 GEMM: it rounds copies of both
// operands to bf16 and runs the fp32 GEMM on them. A product of two bf16
// values is exact in fp32, so only the accumulation order (and, on the
// tile kernels, denormals) differs from gemmBF16. For tests.
func gemmBF16Ref(is isa, threads int, transA, transB bool, m, n, k int, alpha float32, a kernels.Buffer, lda int, b kernels.Buffer, ldb int, beta float32, bias, c []float32, ldc int) {
	gemmBias(gemmKernelFor(is), threads, transA, transB, m, n, k, alpha, gemmRoundedF32(a), lda, gemmRoundedF32(b), ldb, beta, bias, c, ldc)
}

// gemmRoundedF32 returns the values of buf rounded to bf16, as float32.
func gemmRoundedF32(buf kernels.Buffer) []float32 {
	switch s := buf.(type) {
	case F32:
		out := make([]float32, len(s))
		for i, f := range s {
			out[i] = FromBF16(ToBF16(f))
		}
		return out
	case BF16:
		out := make([]float32, len(s))
		for i, h := range s {
			out[i] = FromBF16(h)
		}
		return out
	}
	panic(fmt.Sprintf("cpu: gemmBF16: want an F32 or BF16 operand, got %T", buf))
}

// ---------------------------------------------------------------------------
// The portable path: operands converted to float32 as they are packed.

// gemmRoundRun sets dst[x] = alpha·bf16(src[o+x]) for x < len(dst). With
// alpha 1 runs of F32 values go through one vector pass (roundF32BF16Vec)
// and runs of BF16 values through widenSliceBF16.
func gemmRoundRun(dst []float32, src gemmSrc, o int, alpha float32) {
	if src.bf {
		h := src.h[o : o+len(dst)]
		if alpha == 1 {
			widenSliceBF16(dst, h)
			return
		}
		for x, v := range h {
			dst[x] = alpha * FromBF16(v)
		}
		return
	}
	f := src.f[o : o+len(dst)]
	if !src.round {
		for x, v := range f {
			dst[x] = alpha * v
		}
		return
	}
	if alpha == 1 && roundF32BF16Vec(dst, f) {
		return
	}
	for x, v := range f {
		dst[x] = alpha * FromBF16(ToBF16(v))
	}
}

// ---------------------------------------------------------------------------
// Tile kernels: bf16 panels with k pairs interleaved.

// The tile kernels multiply 32×32 tiles of C, K in blocks of 32. A K slice
// of an A micro-panel (32 rows of op(A)) and of a B micro-panel (32
// columns of op(B)) are stored as kb = ⌈kc/32⌉ blocks of 1024 bf16 values
// (2 KiB), zero-padded in every direction:
//
//	A block q: a[q*1024 + i*32 + x]                    = op(A)[i0+i, p0+32q+x]
//	B block q: b[q*1024 + (j/16)*512 + r*32 + (j%16)*2 + e] = op(B)[p0+32q+2r+e, j0+j]
//
// An A block is two AMX A tiles (rows 0-15 and 16-31, 16 rows of 32 bf16);
// a B block is two AMX B tiles in the k-pair-interleaved (VNNI) layout
// (columns 0-15 and 16-31, 16 rows r each holding the pairs
// (op(B)[2r, j], op(B)[2r+1, j]) of 16 columns). TDPBF16PS multiplies an A
// tile by a B tile into a 16×16 fp32 tile of C; VDPBF16PS multiplies an A
// pair (broadcast) by a row of a B tile.
const (
	gemmTileMR    = 32   // rows of a micro-panel of A
	gemmTileNR    = 32   // columns of a micro-panel of B
	gemmTileKB    = 32   // K per block
	gemmTileBlock = 1024 // bf16 values per block of a micro-panel
)

// gemmTileKernel is a bf16 tile kernel and its cache blocking.
type gemmTileKernel struct {
	name string
	kc   int // largest K slice, a multiple of gemmTileKB
	mc   int // largest A block, in rows (a multiple of gemmTileMR)
	nc   int // largest B block, in columns (a multiple of gemmTileNR)
	// strip computes the 32 × nb·32 strip of C at c (rows ldc apart) from
	// one A micro-panel a (kb blocks) and nb B micro-panels stored one
	// after the other at b (kb blocks each), writing only the top-left
	// rows × cols of it:
	//
	//	C = alpha·Σ A·B + beta·C + bias (bias nil: none; beta == ±0 does
	//	not read C; bias[j] is added to column j of the strip)
	//
	// direct promises alpha == 1, rows == 32, and beta == 0 or (beta == 1
	// and no bias), so that an AMX kernel may start its accumulators from
	// C or the bias and store them straight into C for every whole
	// panel. tile is a 64-byte aligned scratch of 32×32 floats.
	strip func(a, b *uint16, kb, nb int, c *float32, ldc, rows, cols int, alpha, beta float32, bias *float32, direct bool, tile *float32)
	// packA packs a K slice of one A micro-panel; packB packs a K slice
	// of the ⌈cols/32⌉ B micro-panels of columns j0..j0+cols, one after
	// the other; both in the layout above (gemmTilePackA and
	// gemmTilePackB are the portable versions).
	packA func(d []uint16, transA bool, a gemmSrc, lda, i0, p0, rows, kc int)
	packB func(d []uint16, transB bool, b gemmSrc, ldb, p0, j0, cols, kc int)
}

// gemmTilePackA packs a K slice of one A micro-panel: d[q*1024 + i*32 + x]
// = bf16(op(A)[i0+i, p0+32q+x]) for i < rows, 32q+x < kc, zeros elsewhere
// in ⌈kc/32⌉ blocks.
func gemmTilePackA(d []uint16, transA bool, a gemmSrc, lda, i0, p0, rows, kc int) {
	kb := (kc + gemmTileKB - 1) / gemmTileKB
	d = d[:kb*gemmTileBlock]
	clear(d)
	for i := range rows {
		for p := range kc {
			o := (i0+i)*lda + p0 + p
			if transA {
				o = (p0+p)*lda + i0 + i
			}
			d[p/32*gemmTileBlock+i*32+p%32] = a.bf16(o)
		}
	}
}

// gemmTilePackB packs a K slice of the B micro-panels of columns
// j0..j0+cols, panel after panel: d[t*kb*1024 + q*1024 + (j/16)*512 +
// r*32 + (j%16)*2 + e] = bf16(op(B)[p0+p, j0+32t+j]) with p = 32q+2r+e,
// for 32t+j < cols, p < kc, zeros elsewhere in kb = ⌈kc/32⌉ blocks.
func gemmTilePackB(d []uint16, transB bool, b gemmSrc, ldb, p0, j0, cols, kc int) {
	kb := (kc + gemmTileKB - 1) / gemmTileKB
	panels := (cols + gemmTileNR - 1) / gemmTileNR
	d = d[:panels*kb*gemmTileBlock]
	clear(d)
	for j := range cols {
		pan := d[j/gemmTileNR*kb*gemmTileBlock:]
		for p := range kc {
			o := (p0+p)*ldb + j0 + j
			if transB {
				o = (j0+j)*ldb + p0 + p
			}
			pan[gemmTileBIndex(p, j%gemmTileNR)] = b.bf16(o)
		}
	}
}

// gemmTileBIndex is the position of op(B)[p, j] in a B micro-panel.
func gemmTileBIndex(p, j int) int {
	q, r, e := p/32, p%32/2, p%2
	return q*gemmTileBlock + j/16*512 + r*32 + j%16*2 + e
}

// gemmTileBiasBlocked is gemmBias for m, n ≥ 2 on a tile kernel: the
// threads split C as gemmBiasBlocked does.
func gemmTileBiasBlocked(kern *gemmTileKernel, threads int, transA, transB bool, m, n, k int, alpha float32, a gemmSrc, lda int, b gemmSrc, ldb int, beta float32, bias, c []float32, ldc int) {
	mt, nt := (m+gemmTileMR-1)/gemmTileMR, (n+gemmTileNR-1)/gemmTileNR
	t, byRows := gemmTileSplit(threads, mt, nt, m, n, k)
	if byRows {
		gemmFanOut(t, func(i int) {
			lo, hi := i*mt/t*gemmTileMR, min((i+1)*mt/t*gemmTileMR, m)
			ao := lo * lda // row offset into op(A)
			if transA {
				ao = lo
			}
			gemmTileBlocked(kern, 1, transA, transB, hi-lo, n, k, alpha, a.from(ao), lda, b, ldb, beta, bias, c[lo*ldc:], ldc)
		})
		return
	}
	gemmTileBlocked(kern, t, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, bias, c, ldc)
}

// gemmTileJob is one gemmTileBlocked call, shared by its goroutines: the
// loops of gemmBlocked with bf16 panels, the bias added in the strip
// kernel's epilogue (or as its starting accumulator) instead of as a step
// of K.
type gemmTileJob struct {
	gemmSched
	kern           *gemmTileKernel
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b           gemmSrc
	c              []float32
	lda, ldb, ldc  int
	bias           []float32 // nil or n floats

	ap     []uint16 // the packed A block
	kcMax  int      // K slice: a multiple of gemmTileKB unless it is all of K
	mcPad  int      // rows of ap
	ic, mc int      // the current A block: rows ic..ic+mc
}

var gemmTileJobPool = sync.Pool{New: func() any { return new(gemmTileJob) }}

// gemmTileABudget caps the packed bf16 A block (mc rows × all of K), in
// bf16 values.
const gemmTileABudget = 4 << 20

// gemmTileBlocked runs the blocked loops on t goroutines sharing the
// packed A and splitting the columns of C.
func gemmTileBlocked(kern *gemmTileKernel, t int, transA, transB bool, m, n, k int, alpha float32, a gemmSrc, lda int, b gemmSrc, ldb int, beta float32, bias, c []float32, ldc int) {
	j := gemmTileJobPool.Get().(*gemmTileJob)
	j.kern, j.transA, j.transB = kern, transA, transB
	j.m, j.n, j.k, j.alpha, j.beta = m, n, k, alpha, beta
	j.a, j.b, j.c, j.lda, j.ldb, j.ldc = a, b, c, lda, ldb, ldc
	j.bias = bias
	j.kcMax = gemmBlock(k, kern.kc, gemmTileKB)
	kPad := gemmTileKPad(k, j.kcMax)
	mcMax := gemmBlock(m, max(gemmTileMR, min(kern.mc, gemmTileABudget/kPad/gemmTileMR*gemmTileMR)), gemmTileMR)
	j.mcPad = (mcMax + gemmTileMR - 1) / gemmTileMR * gemmTileMR
	nt := (n + gemmTileNR - 1) / gemmTileNR
	j.start(t, nt, max(1, kern.nc/gemmTileNR))
	// The A block is stored K slice by K slice: slice pc starts at
	// mcPad·pc and holds 32-row panels of ⌈kc/32⌉ blocks.
	j.ap = gemmAligned(&j.s.ha, j.mcPad*kPad)
	for ic := 0; ic < m; ic += mcMax {
		j.ic, j.mc = ic, min(mcMax, m-ic)
		j.block(j, (j.mc+gemmTileMR-1)/gemmTileMR, nt)
	}
	j.finish()
	j.ap, j.a, j.b, j.c, j.bias = nil, gemmSrc{}, gemmSrc{}, nil, nil
	gemmTileJobPool.Put(j)
}

// gemmTileKPad is the padded K of a packed panel: K slices of kcMax, each
// rounded up to whole blocks.
func gemmTileKPad(k, kcMax int) int {
	last := (k - 1) / kcMax * kcMax
	return last + (k-last+gemmTileKB-1)/gemmTileKB*gemmTileKB
}

func (j *gemmTileJob) sched() *gemmSched { return &j.gemmSched }

// packPanel packs A panel ip of the current block for every K slice.
func (j *gemmTileJob) packPanel(_ *gemmScratch, ip int) {
	rows := min(gemmTileMR, j.mc-ip*gemmTileMR)
	for pc := 0; pc < j.k; pc += j.kcMax {
		kc := min(j.kcMax, j.k-pc)
		sz := (kc + gemmTileKB - 1) / gemmTileKB * gemmTileBlock
		o := j.mcPad*pc + ip*sz
		j.kern.packA(j.ap[o:o+sz], j.transA, j.a, j.lda, j.ic+ip*gemmTileMR, pc, rows, kc)
	}
}

// compute is gemmWork.compute: column tiles [first, end) of the A block,
// B packed one K slice and at most nc columns at a time.
func (j *gemmTileJob) compute(s *gemmScratch, first, end int) {
	kern := j.kern
	lo, hi := first*gemmTileNR, min(end*gemmTileNR, j.n)
	n := hi - lo
	ncMax := gemmBlock(n, kern.nc, gemmTileNR)
	kbMax := (j.kcMax + gemmTileKB - 1) / gemmTileKB
	bp := gemmAligned(&s.hb, (ncMax+gemmTileNR-1)/gemmTileNR*kbMax*gemmTileBlock)
	tile := gemmAligned(&s.tile, gemmTileMR*gemmTileNR)
	c := j.c[j.ic*j.ldc:]
	for pc := 0; pc < j.k; pc += j.kcMax {
		kc := min(j.kcMax, j.k-pc)
		kb := (kc + gemmTileKB - 1) / gemmTileKB
		bet, bias := j.beta, j.bias
		if pc > 0 {
			bet, bias = 1, nil
		}
		for jc := 0; jc < n; jc += ncMax {
			nc := min(ncMax, n-jc)
			panels := (nc + gemmTileNR - 1) / gemmTileNR
			kern.packB(bp, j.transB, j.b, j.ldb, pc, lo+jc, nc, kc)
			var bptr *float32
			if bias != nil {
				bptr = &bias[lo+jc]
			}
			for ir := 0; ir < j.mc; ir += gemmTileMR {
				rows := min(gemmTileMR, j.mc-ir)
				o := j.mcPad*pc + ir/gemmTileMR*kb*gemmTileBlock
				direct := j.alpha == 1 && rows == gemmTileMR && (bet == 0 || bet == 1 && bias == nil)
				kern.strip(&j.ap[o], &bp[0], kb, panels, &c[ir*j.ldc+lo+jc], j.ldc, rows, nc, j.alpha, bet, bptr, direct, &tile[0])
			}
		}
	}
}

// gemmTileSplit is gemmSplit for the tile kernels, which split by rows
// also when both ways give the goroutines equal tiles and B is at most
// twice A's rows: each goroutine then packs all of B for itself, which
// costs less than sharing the A panels between cores (512x768x768 and
// 512x768x3072 bf16 on two threads: 20-24% faster by rows; 512x3072x768,
// whose B is six times A, 8% slower).
func gemmTileSplit(threads, mt, nt, m, n, k int) (t int, byRows bool) {
	t, byRows = gemmSplit(threads, mt, nt, m, n, k)
	if !byRows && t > 1 && mt*((nt+t-1)/t) == (mt+t-1)/t*nt && n <= 2*m {
		return min(t, mt), true
	}
	return t, byRows
}
