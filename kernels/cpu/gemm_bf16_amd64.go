package cpu

import (
	"sync"

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

// gemmPackPairsF32 sets dst[q*1024 + (j/16)*512 + r*32 + (j%16)*2 + e] =
// bf16(src[(32q+2r+e)*lds + j]) for j < 32, r < 16, e < 2, q < kb.
//
//go:noescape
func gemmPackPairsF32(dst *uint16, src *float32, lds, kb int)

// gemmPackPairsBF16 is gemmPackPairsF32 for a BF16 source.
//
//go:noescape
func gemmPackPairsBF16(dst, src *uint16, lds, kb int)

// gemmPackPairsTF32 sets dst[q*1024 + i*32 + 2r + e] =
// bf16(src[(32q+2r+e)*lds + i]) for i, r < 16, e < 2, q < kb.
//
//go:noescape
func gemmPackPairsTF32(dst *uint16, src *float32, lds, kb int)

// gemmPackPairsTBF16 is gemmPackPairsTF32 for a BF16 source.
//
//go:noescape
func gemmPackPairsTBF16(dst, src *uint16, lds, kb int)

// Cache blocking of the tile kernels. An AMX strip keeps one A micro-panel
// (32 rows × kc: 32 KiB at kc = 512) in L1 while it streams the B
// micro-panels (32 KiB each) of a kc×nc B block (0.5 MiB at nc = 512) from
// L2; the A block (mc rows × all of K) lives in L2/L3.
var (
	gemmTileAMX = gemmTileKernel{
		name: "amx",
		kc:   512, mc: 32 * 16, nc: 32 * 16,
		strip: gemmStripAMX,
		packA: gemmTilePackAAVX512,
		packB: gemmTilePackBAVX512,
	}
	gemmTileDPBF16 = gemmTileKernel{
		name: "avx512bf16",
		kc:   512, mc: 32 * 16, nc: 32 * 16,
		strip: gemmStripDPBF16,
		packA: gemmTilePackAAVX512,
		packB: gemmTilePackBAVX512,
	}
)

var (
	gemmBF16Generic = gemmBF16Impl{name: "generic", fp32: &gemmGeneric}
	gemmBF16AVX2    = gemmBF16Impl{name: "avx2", fp32: &gemmAVX2}
	gemmBF16AVX512  = gemmBF16Impl{name: "avx512", fp32: &gemmAVX512}
	gemmBF16DPBF16  = gemmBF16Impl{name: "avx512bf16", fp32: &gemmAVX512, tile: &gemmTileDPBF16}
	gemmBF16AMX     = gemmBF16Impl{name: "amx", fp32: &gemmAVX512, tile: &gemmTileAMX}
)

// gemmHasAVX512BF16 reports whether the tile packers and the VDPBF16PS
// kernel run here: AVX512-BF16 for the conversions and dot products,
// AVX512-BW for the 16-bit loads and permutes.
var gemmHasAVX512BF16 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512BF16

// gemmBF16ImplFor returns the bf16 GEMM for an ISA: on isaAVX512, AMX
// when the CPU has it and the kernel lets this process use it, else
// AVX512-BF16 when the CPU has it, else the portable path on the AVX-512
// fp32 kernel.
func gemmBF16ImplFor(is isa) *gemmBF16Impl {
	switch is {
	case isaAVX512:
		if gemmAMXUsable() {
			return &gemmBF16AMX
		}
		if gemmHasAVX512BF16 {
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
//     which case gemmBF16ImplFor falls back to AVX512-BF16.
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

// gemmTilePackBAVX512 is gemmTilePackB with the whole blocks of a whole
// panel (32 columns) packed in assembly; a partial panel and a partial
// last block go through Go.
func gemmTilePackBAVX512(d []uint16, transB bool, b gemmSrc, ldb, p0, j0, cols, kc int) {
	kb := kc / gemmTileKB
	if kb == 0 || cols < gemmTileNR {
		gemmTilePackB(d, transB, b, ldb, p0, j0, cols, kc)
		return
	}
	d = d[:(kc+gemmTileKB-1)/gemmTileKB*gemmTileBlock]
	if transB {
		// op(B)[p, j] = b[j*ldb + p]: two groups of 16 rows of b.
		last := (j0+31)*ldb + p0 + kb*gemmTileKB - 1
		for g := 0; g < 32; g += 16 {
			o := (j0+g)*ldb + p0
			if b.bf {
				_ = b.h[last]
				gemmPackTransBF16(&d[g*32], &b.h[o], ldb, kb)
			} else {
				_ = b.f[last]
				gemmPackTransF32(&d[g*32], &b.f[o], ldb, kb)
			}
		}
	} else {
		last := (p0+kb*gemmTileKB-1)*ldb + j0 + 31
		o := p0*ldb + j0
		if b.bf {
			_ = b.h[last]
			gemmPackPairsBF16(&d[0], &b.h[o], ldb, kb)
		} else {
			_ = b.f[last]
			gemmPackPairsF32(&d[0], &b.f[o], ldb, kb)
		}
	}
	if kc > kb*gemmTileKB {
		gemmTilePackB(d[kb*gemmTileBlock:], transB, b, ldb, p0+kb*gemmTileKB, j0, cols, kc-kb*gemmTileKB)
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
