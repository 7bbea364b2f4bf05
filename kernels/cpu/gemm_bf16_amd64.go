package cpu

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Assembly of the bf16 GEMM (gemm_bf16_amd64.s). The strips follow
// gemmTileKernel.strip; the packers pack whole blocks of whole tiles.

// gemmStripAMX is the AMX strip kernel (TDPBF16PS).
//
//go:noescape
func gemmStripAMX(a, b *uint16, kb, nb int, c *float32, ldc, rows, cols int, alpha, beta float32, bias *float32, direct bool, tile *float32)

// gemmStripDPBF16 is the AVX512-BF16 strip kernel (VDPBF16PS).
//
//go:noescape
func gemmStripDPBF16(a, b *uint16, kb, nb int, c *float32, ldc, rows, cols int, alpha, beta float32, bias *float32, direct bool, tile *float32)

// gemmPackRowsF32 sets dst[q*1024 + i*32 + x] = bf16(src[i*lds + 32q + x])
// for i < rows, q < kb, x < 32.
//
//go:noescape
func gemmPackRowsF32(dst *uint16, src *float32, lds, rows, kb int)

// gemmPackRowsBF16 is gemmPackRowsF32 for a BF16 source.
//
//go:noescape
func gemmPackRowsBF16(dst, src *uint16, lds, rows, kb int)

// gemmPackTransF32 sets dst[q*1024 + r*32 + j*2 + e] =
// bf16(src[j*lds + 32q + 2r + e]) for j, r < 16, e < 2, q < kb.
//
//go:noescape
func gemmPackTransF32(dst *uint16, src *float32, lds, kb int)

// gemmPackTransBF16 is gemmPackTransF32 for a BF16 source.
//
//go:noescape
func gemmPackTransBF16(dst, src *uint16, lds, kb int)

// gemmPackPairsF32 sets dst[t*pan + q*1024 + (j/16)*512 + r*32 + (j%16)*2
// + e] = bf16(src[(32q+2r+e)*lds + 32t + j]) for j < 32, r < 16, e < 2,
// q < kb, t < panels: whole B panels from rows of B.
//
//go:noescape
func gemmPackPairsF32(dst *uint16, src *float32, lds, kb, panels, pan int)

// gemmPackPairsBF16 is gemmPackPairsF32 for a BF16 source.
//
//go:noescape
func gemmPackPairsBF16(dst, src *uint16, lds, kb, panels, pan int)

// gemmPackPairsTF32 sets dst[q*1024 + i*32 + 2r + e] =
// bf16(src[(32q+2r+e)*lds + i]) for i, r < 16, e < 2, q < kb.
//
//go:noescape
func gemmPackPairsTF32(dst *uint16, src *float32, lds, kb int)

// gemmPackPairsTBF16 is gemmPackPairsTF32 for a BF16 source.
//
//go:noescape
func gemmPackPairsTBF16(dst, src *uint16, lds, kb int)

// gemmSkinnyDotsEOBF16 sets s[j] = Σ_p x[p]·FromBF16(w[j*ldw + p]) for
// j < nw, p < k, with x given as its even and odd elements (xe[i] = x[2i], xo[i] = x[2i+1]), each padded with
// zeros to 16 values per 32 of k.
//
//go:noescape
func gemmSkinnyDotsEOBF16(xe, xo *float32, w *uint16, ldw, nw, k int, s *float32)

// gemmSkinnyDots4BF16 sets s[i*lds + j] = Σ_p xi[p]·FromBF16(w[j*ldw + p])
// for i < 4, j < nw, p < k.
//
//go:noescape
func gemmSkinnyDots4BF16(x0, x1, x2, x3 *float32, w *uint16, ldw, nw, k int, s *float32, lds int)

// gemmSkinnyAxpys1BF16 sets s[j] = Σ_p x[p]·FromBF16(w[p*ldw + j]) for
// j < nw, p < k.
//
//go:noescape
func gemmSkinnyAxpys1BF16(x *float32, w *uint16, ldw, nw, k int, s *float32)

// gemmSkinnyAxpys4BF16 sets s[i*lds + j] = Σ_p xi[p]·FromBF16(w[p*ldw +
// j]) for i < 4, j < nw, p < k.
//
//go:noescape
func gemmSkinnyAxpys4BF16(x0, x1, x2, x3 *float32, w *uint16, ldw, nw, k int, s *float32, lds int)

// gemmSkinnyAVX512 are the skinny kernels in AVX-512 (F and BW). With
// more than one row of X they compute four, the missing ones repeating
// the last (the caller's s has room for four rows).
var gemmSkinnyAVX512 = gemmSkinnyKernels{
	dots: func(x *float32, ldx, mm int, w *uint16, ldw, nw, k int, s *float32, lds int) {
		if mm == 1 {
			gemmSkinnyDotsEO(x, w, ldw, nw, k, s)
			return
		}
		x0, x1, x2, x3 := gemmSkinnyRowPtrs(x, ldx, mm, k)
		gemmSkinnyDots4BF16(x0, x1, x2, x3, w, ldw, nw, k, s, lds)
	},
	axpys: func(x *float32, ldx, mm int, w *uint16, ldw, nw, k int, s *float32, lds int) {
		if mm == 1 {
			gemmSkinnyAxpys1BF16(x, w, ldw, nw, k, s)
			return
		}
		x0, x1, x2, x3 := gemmSkinnyRowPtrs(x, ldx, mm, k)
		gemmSkinnyAxpys4BF16(x0, x1, x2, x3, w, ldw, nw, k, s, lds)
	},
}

// gemmSkinnyDotsEO runs gemmSkinnyDotsEOBF16 on one row of X: its even
// and odd elements are split into pooled scratch first (k values, once a
// call).
func gemmSkinnyDotsEO(x *float32, w *uint16, ldw, nw, k int, s *float32) {
	h := (k + 31) / 32 * 16
	if h == 0 {
		clear(unsafe.Slice(s, nw))
		return
	}
	p := gemmEOPool.Get().(*[]float32)
	defer gemmEOPool.Put(p)
	if cap(*p) < 2*h {
		*p = make([]float32, 2*h)
	}
	xe, xo := (*p)[:h], (*p)[h:2*h]
	xs := unsafe.Slice(x, k)
	for i := range h {
		var e, o float32
		if 2*i < k {
			e = xs[2*i]
		}
		if 2*i+1 < k {
			o = xs[2*i+1]
		}
		xe[i], xo[i] = e, o
	}
	gemmSkinnyDotsEOBF16(&xe[0], &xo[0], w, ldw, nw, k, s)
}

// gemmEOPool holds gemmSkinnyDotsEO's scratch.
var gemmEOPool = sync.Pool{New: func() any { return new([]float32) }}

// gemmSkinnyRowPtrs returns rows 0-3 of X (rows ldx apart, mm of them,
// k values each), the rows past mm repeating row mm-1.
func gemmSkinnyRowPtrs(x *float32, ldx, mm, k int) (x0, x1, x2, x3 *float32) {
	xs := unsafe.Slice(x, (mm-1)*ldx+k)
	row := func(i int) *float32 { return &xs[min(i, mm-1)*ldx] }
	return row(0), row(1), row(2), row(3)
}

// Cache blocking of the tile kernels. An AMX strip keeps one A micro-panel
// (32 rows × kc: 32 KiB at kc = 512) in L1 while it streams the B
// micro-panels (32 KiB each) of a kc×nc B block (0.5 MiB at nc = 512) from
// L2; the A block (mc rows × all of K) lives in L2/L3, and is large (up to
// 2048 rows) so that B is packed once for most products. On this machine
// (48 KiB L1d, 2 MiB L2 a core) kc = 768 and 1024 measured 5-10% slower
// than 512 (the A panel no longer fits L1 beside the B stream), mc = 128
// and 256 slower (B packed again per A block), nc = 128 and 256 slower
// for the larger shapes, all on one core.
var (
	gemmTileAMX = gemmTileKernel{
		name: "amx",
		kc:   512, mc: 32 * 64, nc: 32 * 16,
		strip: gemmStripAMX,
		packA: gemmTilePackAAVX512,
		packB: gemmTilePackBAVX512,
	}
	gemmTileDPBF16 = gemmTileKernel{
		name: "avx512bf16",
		kc:   512, mc: 32 * 64, nc: 32 * 16,
		strip: gemmStripDPBF16,
		packA: gemmTilePackAAVX512,
		packB: gemmTilePackBAVX512,
	}
)

var (
	gemmBF16Generic = gemmBF16Impl{name: "generic", fp32: &gemmGeneric}
	gemmBF16AVX2    = gemmBF16Impl{name: "avx2", fp32: &gemmAVX2}
	gemmBF16AVX512  = gemmBF16Impl{name: "avx512", fp32: &gemmAVX512, skinny: gemmSkinnyIfBW()}
	gemmBF16DPBF16  = gemmBF16Impl{name: "avx512bf16", fp32: &gemmAVX512, tile: &gemmTileDPBF16, skinny: &gemmSkinnyAVX512}
	gemmBF16AMX     = gemmBF16Impl{name: "amx", fp32: &gemmAVX512, tile: &gemmTileAMX, skinny: &gemmSkinnyAVX512}
)

// gemmSkinnyIfBW returns the AVX-512 skinny kernels when the CPU has
// AVX512-BW (for VPMOVZXWD on Z registers).
func gemmSkinnyIfBW() *gemmSkinnyKernels {
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW {
		return &gemmSkinnyAVX512
	}
	return nil
}

// gemmHasAVX512BF16 reports whether the tile packers and the VDPBF16PS
// kernel run here: AVX512-BF16 for the conversions and dot products,
// AVX512-BW for the 16-bit loads and permutes.
var gemmHasAVX512BF16 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512BF16

// gemmIntel reports an Intel CPU, whose VDPBF16PS runs at half the FMAs'
// flops (see gemmBF16ImplFor).
var gemmIntel = cpuVendor() == "GenuineIntel"

// gemmBF16ImplFor returns the bf16 GEMM for an ISA. On isaAVX512: AMX
// when the CPU has it and the kernel lets this process use it; else the
// AVX512-BF16 kernel when the CPU has AVX512-BF16 and is not Intel's (Zen
// 4 and later, where a VDPBF16PS does twice an FMA's work at the same
// rate); else the portable path on the AVX-512 fp32 kernel. Intel's
// VDPBF16PS retires about one every two cycles against two FMAs a cycle,
// half the FMAs' flops: on Sapphire Rapids the VDPBF16PS kernel measured
// 112 GFLOP/s against the portable path's 157 (one core, 512x768x768 nt),
// and on an Emerald Rapids VM whose hypervisor hides AMX from CPUID
// (2026-11-28: 24 independent VDPBF16PS per loop retire 1.32 G/s, 24
// VFMADD231PS 5.4 G/s) 77 against 128. So an Intel CPU whose AMX is
// missing or refused gets the portable path.
func gemmBF16ImplFor(is isa) *gemmBF16Impl {
	switch is {
	case isaAVX512:
		if gemmAMXUsable() {
			return &gemmBF16AMX
		}
		if gemmHasAVX512BF16 && !gemmIntel { // AMX is Intel's: this covers a refused AMX too
			return &gemmBF16DPBF16
		}
		return &gemmBF16AVX512
	case isaAVX2:
		return &gemmBF16AVX2
	}
	return &gemmBF16Generic
}

var (
	gemmAMXOnce sync.Once
	gemmAMXOK   bool
)

// gemmAMXUsable reports whether the AMX kernel may run: the CPU has
// AMX-TILE and AMX-BF16 (and AVX512-BF16 for the packers), and the kernel
// granted this process the AMX tile data state (gemmAMXPermit, asked once,
// on first use).
//
// Why AMX is safe to use from Go:
//   - Linux keeps AMX state per thread, saving and restoring it on context
//     switches, once the process has permission (arch_prctl
//     ARCH_REQ_XCOMP_PERM); without it the first tile instruction faults.
//   - The state never outlives one assembly call: gemmStripAMX loads the
//     tile configuration on entry and releases the tiles before it
//     returns, so a goroutine that moves to another thread between calls
//     finds nothing missing, and no other code sees live tiles.
//   - A goroutine is never moved in the middle of an assembly function:
//     the runtime preempts asynchronously only at safe points, and
//     isAsyncSafePoint (runtime/preempt.go) rejects every assembly function
//     (FuncFlagAsm). A signal taken inside the kernel runs its handler on
//     the same thread; the kernel saves the tile state in the signal frame
//     and restores it on return.
//   - The signal frame with AMX state is about 11 KiB (AT_MINSIGSTKSZ was
//     11952 bytes on the development machine); Go gives each thread a 32
//     KiB signal stack (runtime.mpreinit), and Linux refuses the permission
//     (ENOSPC) if some thread's alternate signal stack were too small, in
//     which case gemmBF16ImplFor falls back to the portable path.
//
// TestGemmBF16AMXSignals runs the kernel under signals, preemption and
// garbage collection.
func gemmAMXUsable() bool {
	gemmAMXOnce.Do(func() {
		gemmAMXOK = cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16 && gemmHasAVX512BF16 && gemmAMXPermit()
	})
	return gemmAMXOK
}

// gemmTilePackAAVX512 is gemmTilePackA with the whole blocks packed in
// assembly: all rows when A is not transposed, groups of 16 rows when it
// is. The rest (a partial last block, a partial group) goes through Go.
func gemmTilePackAAVX512(d []uint16, transA bool, a gemmSrc, lda, i0, p0, rows, kc int) {
	kb := kc / gemmTileKB
	if kb == 0 || transA && rows < 16 {
		gemmTilePackA(d, transA, a, lda, i0, p0, rows, kc)
		return
	}
	d = d[:(kc+gemmTileKB-1)/gemmTileKB*gemmTileBlock]
	done := rows // rows packed in assembly
	if !transA {
		last := (i0+rows-1)*lda + p0 + kb*gemmTileKB - 1
		if a.bf {
			_ = a.h[last]
			gemmPackRowsBF16(&d[0], &a.h[i0*lda+p0], lda, rows, kb)
		} else {
			_ = a.f[last]
			gemmPackRowsF32(&d[0], &a.f[i0*lda+p0], lda, rows, kb)
		}
	} else {
		done = rows / 16 * 16
		for g := 0; g < done; g += 16 {
			last := (p0+kb*gemmTileKB-1)*lda + i0 + g + 15
			o := p0*lda + i0 + g
			if a.bf {
				_ = a.h[last]
				gemmPackPairsTBF16(&d[g*32], &a.h[o], lda, kb)
			} else {
				_ = a.f[last]
				gemmPackPairsTF32(&d[g*32], &a.f[o], lda, kb)
			}
		}
	}
	// Rows the assembly did not write, in the whole blocks.
	for q := range kb {
		blk := d[q*gemmTileBlock : (q+1)*gemmTileBlock]
		for i := done; i < gemmTileMR; i++ {
			row := blk[i*32 : i*32+32]
			if i >= rows {
				clear(row)
				continue
			}
			for x := range row {
				p := p0 + q*gemmTileKB + x
				row[x] = a.bf16(p*lda + i0 + i) // transA here
			}
		}
	}
	if kc > kb*gemmTileKB {
		gemmTilePackA(d[kb*gemmTileBlock:], transA, a, lda, i0, p0+kb*gemmTileKB, rows, kc-kb*gemmTileKB)
	}
}

// gemmTilePackBAVX512 is gemmTilePackB with the whole blocks of the whole
// panels packed in assembly: panel by panel (16 rows of b at a time) when
// B is transposed, two rows of b across all the panels at a time when it
// is not (so that b is read along its rows). A partial last panel and a
// partial last block go through Go.
func gemmTilePackBAVX512(d []uint16, transB bool, b gemmSrc, ldb, p0, j0, cols, kc int) {
	kb := kc / gemmTileKB
	whole := cols / gemmTileNR // whole panels
	if kb == 0 || whole == 0 {
		gemmTilePackB(d, transB, b, ldb, p0, j0, cols, kc)
		return
	}
	kbAll := (kc + gemmTileKB - 1) / gemmTileKB
	pan := kbAll * gemmTileBlock // values per panel
	d = d[:(cols+gemmTileNR-1)/gemmTileNR*pan]
	if transB {
		// op(B)[p, j] = b[j*ldb + p]: two groups of 16 rows of b a panel.
		last := (j0+32*whole-1)*ldb + p0 + kb*gemmTileKB - 1
		if b.bf {
			_ = b.h[last]
		} else {
			_ = b.f[last]
		}
		for t := range whole {
			for g := 0; g < 32; g += 16 {
				o := (j0+32*t+g)*ldb + p0
				if b.bf {
					gemmPackTransBF16(&d[t*pan+g*32], &b.h[o], ldb, kb)
				} else {
					gemmPackTransF32(&d[t*pan+g*32], &b.f[o], ldb, kb)
				}
			}
		}
	} else {
		last := (p0+kb*gemmTileKB-1)*ldb + j0 + 32*whole - 1
		o := p0*ldb + j0
		if b.bf {
			_ = b.h[last]
			gemmPackPairsBF16(&d[0], &b.h[o], ldb, kb, whole, pan)
		} else {
			_ = b.f[last]
			gemmPackPairsF32(&d[0], &b.f[o], ldb, kb, whole, pan)
		}
	}
	if kc > kb*gemmTileKB {
		// The partial last block of each whole panel.
		for t := range whole {
			gemmTilePackB(d[t*pan+kb*gemmTileBlock:(t+1)*pan], transB, b, ldb, p0+kb*gemmTileKB, j0+32*t, gemmTileNR, kc-kb*gemmTileKB)
		}
	}
	if cols > whole*gemmTileNR {
		gemmTilePackB(d[whole*pan:], transB, b, ldb, p0, j0+whole*gemmTileNR, cols-whole*gemmTileNR, kc)
	}
}

// gemmBF16Impls lists every bf16 GEMM implementation this CPU runs, for
// tests and benchmarks.
func gemmBF16Impls() []*gemmBF16Impl {
	out := []*gemmBF16Impl{&gemmBF16Generic}
	best := bestISA()
	if best >= isaAVX2 {
		out = append(out, &gemmBF16AVX2)
	}
	if best >= isaAVX512 {
		out = append(out, &gemmBF16AVX512)
		if gemmHasAVX512BF16 {
			out = append(out, &gemmBF16DPBF16)
		}
		if gemmAMXUsable() {
			out = append(out, &gemmBF16AMX)
		}
	}
	return out
}
