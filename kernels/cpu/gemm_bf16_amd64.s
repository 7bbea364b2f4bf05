#include "textflag.h"
#include "gemm_amd64.h"

// bf16 GEMM kernels: the AMX and AVX512-BF16 strip kernels, the packing
// routines that build their bf16 panels, and the skinny kernels that
// stream a BF16 matrix. See gemm_bf16.go for the panel layout:
//
//	A block (2 KiB): 32 rows of 32 bf16 (k), rows 64 bytes apart; rows
//	  0-15 are the first AMX A tile, rows 16-31 the second.
//	B block (2 KiB): two AMX B tiles of 16 rows r × 16 columns j × the
//	  bf16 pair (k = 2r, 2r+1); columns 0-15 first, 16-31 at +1024 bytes.

// ---------------------------------------------------------------------------
// AMX strip kernel.

// The tile configuration: palette 1; tiles 0-7 all 16 rows of 64 bytes.
// Layout (Intel SDM, LDTILECFG): byte 0 palette, 1 start_row, bytes 16-31
// colsb[0..7] (16-bit), bytes 48-55 rows[0..7].
DATA amxcfg<>+0(SB)/8, $1
DATA amxcfg<>+8(SB)/8, $0
DATA amxcfg<>+16(SB)/8, $0x0040004000400040
DATA amxcfg<>+24(SB)/8, $0x0040004000400040
DATA amxcfg<>+32(SB)/8, $0
DATA amxcfg<>+40(SB)/8, $0
DATA amxcfg<>+48(SB)/8, $0x1010101010101010
DATA amxcfg<>+56(SB)/8, $0
GLOBL amxcfg<>(SB), RODATA|NOPTR, $64

// Column masks of a 32-column panel: K1 for columns 0-15, K2 for 16-31,
// from the columns left in R11 (cols beyond 32 count as 32). Clobbers AX,
// R9, R14.
#define COLMASKS \
	MOVQ    R11, AX;         \
	MOVQ    $32, R14;        \
	CMPQ    AX, R14;         \
	CMOVQGT R14, AX;         \
	MOVQ    AX, R9;          \
	MOVQ    $16, R14;        \
	CMPQ    R9, R14;         \
	CMOVQGT R14, R9;         \
	SUBQ    R9, AX;          \
	MOVL    $-1, R14;        \
	BZHIL   R9, R14, R9;     \
	BZHIL   AX, R14, AX;     \
	KMOVW   R9, K1;          \
	KMOVW   AX, K2

// The epilogue's scalars, once per call: Z30 = alpha; Z31 = beta, or -0
// when beta is ±0 (then C is not read: the masks for reading C, K3 for
// columns 0-15 and K4 for 16-31, are made empty, and beta·0 = -0 adds
// nothing to any value, -0 included); Z27 = -0, the bias when there is
// none (x + -0 = x for every x). R13 bit 0 is set when C is read.
#define EPISCALARS \
	VBROADCASTSS alpha+64(FP), Z30;  \
	VBROADCASTSS beta+68(FP), Z31;   \
	MOVL         $0x80000000, AX;    \
	VPBROADCASTD AX, Z27;            \
	XORQ         R13, R13;           \
	MOVL         beta+68(FP), AX;    \
	SHLL         $1, AX;             \
	SETNE        R13B;               \
	TESTQ        R13, R13;           \
	JNE          2(PC);              \
	VMOVAPS      Z27, Z31

// The read masks K3, K4 from K1, K2 and R13 bit 0, and the bias of the
// panel in Z28 (columns 0-15) and Z29 (16-31), -0 without a bias (R12 = 0).
#define EPIMASKS \
	KXORW   K3, K3, K3;         \
	KXORW   K4, K4, K4;         \
	TESTQ   R13, R13;           \
	JEQ     3(PC);              \
	KMOVW   K1, K3;             \
	KMOVW   K2, K4;             \
	VMOVAPS Z27, Z28;           \
	VMOVAPS Z27, Z29;           \
	TESTQ   R12, R12;           \
	JEQ     3(PC);              \
	VMOVUPS.Z (R12), K1, Z28;   \
	VMOVUPS.Z 64(R12), K2, Z29

// Prefetch the B block after next (the 32 lines at BX+4096..6143), so that
// it is in L1 before its tile loads (the B panels stream from L2).
#define PREFETCHB \
	PREFETCHT0 4096(BX); PREFETCHT0 4160(BX); PREFETCHT0 4224(BX); PREFETCHT0 4288(BX); \
	PREFETCHT0 4352(BX); PREFETCHT0 4416(BX); PREFETCHT0 4480(BX); PREFETCHT0 4544(BX); \
	PREFETCHT0 4608(BX); PREFETCHT0 4672(BX); PREFETCHT0 4736(BX); PREFETCHT0 4800(BX); \
	PREFETCHT0 4864(BX); PREFETCHT0 4928(BX); PREFETCHT0 4992(BX); PREFETCHT0 5056(BX); \
	PREFETCHT0 5120(BX); PREFETCHT0 5184(BX); PREFETCHT0 5248(BX); PREFETCHT0 5312(BX); \
	PREFETCHT0 5376(BX); PREFETCHT0 5440(BX); PREFETCHT0 5504(BX); PREFETCHT0 5568(BX); \
	PREFETCHT0 5632(BX); PREFETCHT0 5696(BX); PREFETCHT0 5760(BX); PREFETCHT0 5824(BX); \
	PREFETCHT0 5888(BX); PREFETCHT0 5952(BX); PREFETCHT0 6016(BX); PREFETCHT0 6080(BX)

// func gemmStripAMX(a, b *uint16, kb, nb int, c *float32, ldc, rows, cols int, alpha, beta float32, bias *float32, direct bool, tile *float32)
//
// For each of the nb B panels: four 16×16 fp32 accumulator tiles (TMM0
// rows 0-15 × columns 0-15, TMM1 rows 0-15 × 16-31, TMM2 rows 16-31 ×
// 0-15, TMM3 rows 16-31 × 16-31), kb steps of two A tiles (TMM4, TMM5)
// times two B tiles (TMM6, TMM7). A whole panel in direct mode starts its
// accumulators from C (beta == 1), from the bias row repeated (a tile load
// with row stride 0), or zero, and stores them into C. Otherwise they
// start at zero, go to the 32×32 scratch tile, and an AVX-512 epilogue
// writes C = alpha·acc + beta·C + bias under column masks, row by row.
//
// Registers:
//	R8 A panel, BX B (advances panel by panel), DX C of the panel,
//	DI = DX + 16 rows, SI ldc in bytes, CX = 64 (tile row stride),
//	R10 panels left, R11 columns left, R12 bias of the panel (0: none),
//	R15 scratch tile, AX A block in the K loop, R9 K counter,
//	R13 epilogue flag (0, the bias tile's row stride, when beta is 0),
//	R14 temp.
//	Z27-Z31 epilogue scalars (EPISCALARS), Z0-Z3 epilogue rows.
//
// The tile configuration is loaded on entry and the tiles released before
// returning, so no tile state outlives a call: a goroutine may move to
// another thread between calls, and the runtime never preempts a
// goroutine inside an assembly function (see gemmAMXUsable).
TEXT ·gemmStripAMX(SB), NOSPLIT, $0-96
	LEAQ amxcfg<>(SB), AX
	LDTILECFG_AX
	EPISCALARS
	MOVQ a+0(FP), R8
	MOVQ b+8(FP), BX
	MOVQ nb+24(FP), R10
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), SI
	SHLQ $2, SI
	MOVQ SI, DI
	SHLQ $4, DI
	ADDQ DX, DI
	MOVQ cols+56(FP), R11
	MOVQ bias+72(FP), R12
	MOVQ tile+88(FP), R15
	MOVQ $64, CX

amxpanel:
	// Direct mode for a whole panel when the caller allows it.
	CMPB direct+80(FP), $0
	JEQ  amxzero
	CMPQ R11, $32
	JLT  amxzero
	TESTQ R13, R13
	JNE  amxinitc
	TESTQ R12, R12
	JEQ  amxzero
	// beta == 0 here, so R13 is 0: the bias row, 16 times (stride 0).
	TILELOADD(0, 12, 13, 0)
	TILELOADD(1, 12, 13, 64)
	TILELOADD(2, 12, 13, 0)
	TILELOADD(3, 12, 13, 64)
	JMP  amxk

amxinitc:
	TILELOADD(0, 2, 6, 0)     // C rows 0-15 (DX, stride SI)
	TILELOADD(1, 2, 6, 64)
	TILELOADD(2, 7, 6, 0)     // C rows 16-31 (DI)
	TILELOADD(3, 7, 6, 64)
	JMP  amxk

amxzero:
	TILEZERO(0)
	TILEZERO(1)
	TILEZERO(2)
	TILEZERO(3)

amxk:
	// One K block: A tiles at AX and AX+1024, B tiles at BX and BX+1024.
	MOVQ R8, AX
	MOVQ kb+16(FP), R9

amxkloop:
	PREFETCHB
	TILELOADD(4, 0, 1, 0)     // A rows 0-15
	TILELOADD(6, 3, 1, 0)     // B columns 0-15
	TDPBF16PS(0, 4, 6)
	TILELOADD(7, 3, 1, 1024)  // B columns 16-31
	TDPBF16PS(1, 4, 7)
	TILELOADD(5, 0, 1, 1024)  // A rows 16-31
	TDPBF16PS(2, 5, 6)
	TDPBF16PS(3, 5, 7)
	ADDQ $2048, AX
	ADDQ $2048, BX
	DECQ R9
	JNZ  amxkloop

	CMPB direct+80(FP), $0
	JEQ  amxepi
	CMPQ R11, $32
	JLT  amxepi
	TILESTORED(2, 6, 0, 0)
	TILESTORED(2, 6, 64, 1)
	TILESTORED(7, 6, 0, 2)
	TILESTORED(7, 6, 64, 3)
	JMP  amxnext

amxepi:
	MOVQ $128, R14
	TILESTORED(15, 14, 0, 0)  // scratch rows 128 bytes apart
	TILESTORED(15, 14, 64, 1)
	TILESTORED(15, 14, 2048, 2)
	TILESTORED(15, 14, 2112, 3)
	COLMASKS
	EPIMASKS
	MOVQ rows+48(FP), R9
	MOVQ R15, R14
	MOVQ DX, AX

amxrow:
	VMULPS      (R14), Z30, Z0
	VMULPS      64(R14), Z30, Z1
	VMOVUPS.Z   (AX), K3, Z2
	VMOVUPS.Z   64(AX), K4, Z3
	VFMADD231PS Z2, Z31, Z0
	VFMADD231PS Z3, Z31, Z1
	VADDPS      Z28, Z0, Z0
	VADDPS      Z29, Z1, Z1
	VMOVUPS     Z0, K1, (AX)
	VMOVUPS     Z1, K2, 64(AX)
	ADDQ        $128, R14
	ADDQ        SI, AX
	DECQ        R9
	JNZ         amxrow

amxnext:
	ADDQ  $128, DX
	ADDQ  $128, DI
	TESTQ R12, R12
	JEQ   2(PC)
	ADDQ  $128, R12
	SUBQ  $32, R11
	DECQ  R10
	JNZ   amxpanel

	TILERELEASE
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// AVX512-BF16 strip kernel.

// One step r of a K block for a 16×16 sub-tile: the B row r (16 columns ×
// a bf16 pair) times the pair r of each of the 16 A rows, broadcast. AX
// points at A row 8 of the block (so that rows 0-15 are within the 8-bit
// compressed displacement), DI at the B tile.
#define DPSTEP(r) \
	VMOVDQU32 ((r)*64)(DI), Z16;                \
	VDPBF16PS_BCST(0, 16, 0, -512+(r)*4);     \
	VDPBF16PS_BCST(1, 16, 0, -448+(r)*4);     \
	VDPBF16PS_BCST(2, 16, 0, -384+(r)*4);     \
	VDPBF16PS_BCST(3, 16, 0, -320+(r)*4);     \
	VDPBF16PS_BCST(4, 16, 0, -256+(r)*4);     \
	VDPBF16PS_BCST(5, 16, 0, -192+(r)*4);     \
	VDPBF16PS_BCST(6, 16, 0, -128+(r)*4);     \
	VDPBF16PS_BCST(7, 16, 0, -64+(r)*4);      \
	VDPBF16PS_BCST(8, 16, 0, (r)*4);          \
	VDPBF16PS_BCST(9, 16, 0, 64+(r)*4);       \
	VDPBF16PS_BCST(10, 16, 0, 128+(r)*4);     \
	VDPBF16PS_BCST(11, 16, 0, 192+(r)*4);     \
	VDPBF16PS_BCST(12, 16, 0, 256+(r)*4);     \
	VDPBF16PS_BCST(13, 16, 0, 320+(r)*4);     \
	VDPBF16PS_BCST(14, 16, 0, 384+(r)*4);     \
	VDPBF16PS_BCST(15, 16, 0, 448+(r)*4)

// One epilogue row of a sub-tile: Z(acc) = alpha·acc + beta·C + bias into
// C at AX under mask K5 (reading under K6), bias in Z26; stop after the
// last row (CX rows left).
#define DPEPI(acc) \
	VMOVUPS.Z   (AX), K6, Z17;     \
	VMULPS      Z30, acc, acc;     \
	VFMADD231PS Z17, Z31, acc;     \
	VADDPS      Z26, acc, acc;     \
	VMOVUPS     acc, K5, (AX);     \
	ADDQ        SI, AX;            \
	DECQ        CX;                \
	JZ          dpsubdone

// func gemmStripDPBF16(a, b *uint16, kb, nb int, c *float32, ldc, rows, cols int, alpha, beta float32, bias *float32, direct bool, tile *float32)
//
// The strip of gemmStripAMX with VDPBF16PS, ignoring direct and tile. Each
// panel is four 16×16 sub-tiles (A rows 16·ta.., B columns 16·tb..), each
// accumulated in Z0-Z15 (one row each) over the kb blocks, then written by
// the epilogue (DPEPI). Sub-tiles without rows or columns to write are
// skipped.
//
// Registers:
//	R8 A panel, BX B panel, DX C of the panel, SI ldc in bytes,
//	R10 panels left, R11 columns left, R12 bias of the panel (0: none),
//	R13 epilogue flag, R9 = 16·ta, R14 = tb, AX A pointer (row 8 of the
//	block) then C row pointer, DI B tile pointer, CX K counter then rows
//	left, R15 temp; Z16 B row, Z17 C row, Z26 bias of the sub-tile,
//	Z27-Z31 epilogue scalars.
TEXT ·gemmStripDPBF16(SB), NOSPLIT, $0-96
	EPISCALARS
	MOVQ a+0(FP), R8
	MOVQ b+8(FP), BX
	MOVQ nb+24(FP), R10
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), SI
	SHLQ $2, SI
	MOVQ cols+56(FP), R11
	MOVQ bias+72(FP), R12

dppanel:
	COLMASKS
	EPIMASKS
	XORQ R9, R9

dpta:
	XORQ R14, R14

dptb:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	// AX = A + 64·(16·ta) + 512 (row 8 of the sub-tile's A tile);
	// DI = B + 1024·tb.
	MOVQ R9, AX
	SHLQ $6, AX
	LEAQ 512(R8)(AX*1), AX
	MOVQ R14, DI
	SHLQ $10, DI
	ADDQ BX, DI
	MOVQ kb+16(FP), CX

dpk:
	DPSTEP(0)
	DPSTEP(1)
	DPSTEP(2)
	DPSTEP(3)
	DPSTEP(4)
	DPSTEP(5)
	DPSTEP(6)
	DPSTEP(7)
	DPSTEP(8)
	DPSTEP(9)
	DPSTEP(10)
	DPSTEP(11)
	DPSTEP(12)
	DPSTEP(13)
	DPSTEP(14)
	DPSTEP(15)
	ADDQ $2048, AX
	ADDQ $2048, DI
	DECQ CX
	JNZ  dpk

	// Epilogue: masks and bias of column half tb, rows min(16, rows-16·ta).
	KMOVW   K1, K5
	KMOVW   K3, K6
	VMOVAPS Z28, Z26
	TESTQ   R14, R14
	JEQ     4(PC)
	KMOVW   K2, K5
	KMOVW   K4, K6
	VMOVAPS Z29, Z26
	MOVQ    rows+48(FP), CX
	SUBQ    R9, CX
	MOVQ    $16, R15
	CMPQ    CX, R15
	CMOVQGT R15, CX
	MOVQ    R9, AX
	IMULQ   SI, AX
	ADDQ    DX, AX
	MOVQ    R14, R15
	SHLQ    $6, R15
	ADDQ    R15, AX
	DPEPI(Z0)
	DPEPI(Z1)
	DPEPI(Z2)
	DPEPI(Z3)
	DPEPI(Z4)
	DPEPI(Z5)
	DPEPI(Z6)
	DPEPI(Z7)
	DPEPI(Z8)
	DPEPI(Z9)
	DPEPI(Z10)
	DPEPI(Z11)
	DPEPI(Z12)
	DPEPI(Z13)
	DPEPI(Z14)
	DPEPI(Z15)

dpsubdone:
	// Next column half if it has columns, then the next row half if it
	// has rows.
	INCQ    R14
	CMPQ    R14, $2
	JEQ     dpnextta
	KORTESTW K2, K2
	JNZ     dptb

dpnextta:
	ADDQ $16, R9
	CMPQ R9, $32
	JEQ  dpnext
	CMPQ R9, rows+48(FP)
	JLT  dpta

dpnext:
	MOVQ  kb+16(FP), AX
	SHLQ  $11, AX
	ADDQ  AX, BX
	ADDQ  $128, DX
	TESTQ R12, R12
	JEQ   2(PC)
	ADDQ  $128, R12
	SUBQ  $32, R11
	DECQ  R10
	JNZ   dppanel
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Packing. Every routine packs whole blocks (32 values of K) of whole
// tiles; gemm_bf16_amd64.go handles the partial ones in Go. F32 sources
// are converted by VCVTNE2PS2BF16 (round to nearest even; denormals become
// zeros, which the AMX and AVX512-BF16 products would treat as zeros
// anyway).

// func gemmPackRowsF32(dst *uint16, src *float32, lds, rows, kb int)
// dst[q*1024 + i*32 + x] = bf16(src[i*lds + 32q + x]) for i < rows,
// q < kb, x < 32: rows of A, K contiguous (A not transposed). Row by row,
// each row's blocks in turn.
TEXT ·gemmPackRowsF32(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	SHLQ $2, R8
	MOVQ rows+24(FP), R9
	MOVQ kb+32(FP), R10
	TESTQ R9, R9
	JEQ   rowsf32done
	TESTQ R10, R10
	JEQ   rowsf32done

rowsf32row:
	MOVQ SI, AX
	MOVQ DI, BX
	MOVQ R10, CX

rowsf32q:
	VMOVUPS (AX), Z0
	VMOVUPS 64(AX), Z1
	VCVTNE2PS2BF16(2, 1, 0)
	VMOVDQU32 Z2, (BX)
	ADDQ $128, AX
	ADDQ $2048, BX
	DECQ CX
	JNZ  rowsf32q
	ADDQ R8, SI
	ADDQ $64, DI
	DECQ R9
	JNZ  rowsf32row

rowsf32done:
	VZEROUPPER
	RET

// func gemmPackRowsBF16(dst, src *uint16, lds, rows, kb int)
// dst[q*1024 + i*32 + x] = src[i*lds + 32q + x]: gemmPackRowsF32 for a
// BF16 source, 64-byte copies.
TEXT ·gemmPackRowsBF16(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	SHLQ $1, R8
	MOVQ rows+24(FP), R9
	MOVQ kb+32(FP), R10
	TESTQ R9, R9
	JEQ   rowsbf16done
	TESTQ R10, R10
	JEQ   rowsbf16done

rowsbf16row:
	MOVQ SI, AX
	MOVQ DI, BX
	MOVQ R10, CX

rowsbf16q:
	VMOVDQU16 (AX), Z0
	VMOVDQU32 Z0, (BX)
	ADDQ $64, AX
	ADDQ $2048, BX
	DECQ CX
	JNZ  rowsbf16q
	ADDQ R8, SI
	ADDQ $64, DI
	DECQ R9
	JNZ  rowsbf16row

rowsbf16done:
	VZEROUPPER
	RET

// Rows j = 0..15 of the source at SI (j < 8) and DI = SI + 8·lds (j ≥ 8),
// as ROWSETUP (gemm_amd64.h) addresses them: R8 = lds, R9 = 3·lds,
// R10 = 5·lds, R11 = 7·lds in bytes.
#define ROW0(off) off(SI)
#define ROW1(off) off(SI)(R8*1)
#define ROW2(off) off(SI)(R8*2)
#define ROW3(off) off(SI)(R9*1)
#define ROW4(off) off(SI)(R8*4)
#define ROW5(off) off(SI)(R10*1)
#define ROW6(off) off(SI)(R9*2)
#define ROW7(off) off(SI)(R11*1)
#define ROW8(off) off(DI)
#define ROW9(off) off(DI)(R8*1)
#define ROW10(off) off(DI)(R8*2)
#define ROW11(off) off(DI)(R9*1)
#define ROW12(off) off(DI)(R8*4)
#define ROW13(off) off(DI)(R10*1)
#define ROW14(off) off(DI)(R9*2)
#define ROW15(off) off(DI)(R11*1)

// Stores of the 16 transposed rows, 64 bytes apart, at DX.
#define STORE16X64 \
	VMOVDQU32 Z0, (DX);      \
	VMOVDQU32 Z1, 64(DX);    \
	VMOVDQU32 Z2, 128(DX);   \
	VMOVDQU32 Z3, 192(DX);   \
	VMOVDQU32 Z4, 256(DX);   \
	VMOVDQU32 Z5, 320(DX);   \
	VMOVDQU32 Z6, 384(DX);   \
	VMOVDQU32 Z7, 448(DX);   \
	VMOVDQU32 Z8, 512(DX);   \
	VMOVDQU32 Z9, 576(DX);   \
	VMOVDQU32 Z10, 640(DX);  \
	VMOVDQU32 Z11, 704(DX);  \
	VMOVDQU32 Z12, 768(DX);  \
	VMOVDQU32 Z13, 832(DX);  \
	VMOVDQU32 Z14, 896(DX);  \
	VMOVDQU32 Z15, 960(DX)

// func gemmPackTransF32(dst *uint16, src *float32, lds, kb int)
// dst[q*1024 + r*32 + j*2 + e] = bf16(src[j*lds + 32q + 2r + e]) for
// j < 16, r < 16, e < 2, q < kb: one AMX B tile (16 columns of op(B)) per
// block from a transposed B (N×K, K contiguous). Each block: 16 rows of 32
// floats become 16 rows of 16 bf16 pairs (Z0-Z15), and TRANSPOSE16 turns
// the pairs (32-bit elements) around so that Z(r) holds pair r of every
// row.
TEXT ·gemmPackTransF32(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ kb+24(FP), CX
	ROWSETUP
	TESTQ CX, CX
	JEQ   transf32done

transf32loop:
	VMOVUPS ROW0(0), Z16
	VMOVUPS ROW0(64), Z17
	VCVTNE2PS2BF16(0, 17, 16)
	VMOVUPS ROW1(0), Z18
	VMOVUPS ROW1(64), Z19
	VCVTNE2PS2BF16(1, 19, 18)
	VMOVUPS ROW2(0), Z16
	VMOVUPS ROW2(64), Z17
	VCVTNE2PS2BF16(2, 17, 16)
	VMOVUPS ROW3(0), Z18
	VMOVUPS ROW3(64), Z19
	VCVTNE2PS2BF16(3, 19, 18)
	VMOVUPS ROW4(0), Z16
	VMOVUPS ROW4(64), Z17
	VCVTNE2PS2BF16(4, 17, 16)
	VMOVUPS ROW5(0), Z18
	VMOVUPS ROW5(64), Z19
	VCVTNE2PS2BF16(5, 19, 18)
	VMOVUPS ROW6(0), Z16
	VMOVUPS ROW6(64), Z17
	VCVTNE2PS2BF16(6, 17, 16)
	VMOVUPS ROW7(0), Z18
	VMOVUPS ROW7(64), Z19
	VCVTNE2PS2BF16(7, 19, 18)
	VMOVUPS ROW8(0), Z16
	VMOVUPS ROW8(64), Z17
	VCVTNE2PS2BF16(8, 17, 16)
	VMOVUPS ROW9(0), Z18
	VMOVUPS ROW9(64), Z19
	VCVTNE2PS2BF16(9, 19, 18)
	VMOVUPS ROW10(0), Z16
	VMOVUPS ROW10(64), Z17
	VCVTNE2PS2BF16(10, 17, 16)
	VMOVUPS ROW11(0), Z18
	VMOVUPS ROW11(64), Z19
	VCVTNE2PS2BF16(11, 19, 18)
	VMOVUPS ROW12(0), Z16
	VMOVUPS ROW12(64), Z17
	VCVTNE2PS2BF16(12, 17, 16)
	VMOVUPS ROW13(0), Z18
	VMOVUPS ROW13(64), Z19
	VCVTNE2PS2BF16(13, 19, 18)
	VMOVUPS ROW14(0), Z16
	VMOVUPS ROW14(64), Z17
	VCVTNE2PS2BF16(14, 17, 16)
	VMOVUPS ROW15(0), Z18
	VMOVUPS ROW15(64), Z19
	VCVTNE2PS2BF16(15, 19, 18)
	TRANSPOSE16
	STORE16X64
	ADDQ $128, SI
	ADDQ $128, DI
	ADDQ $2048, DX
	DECQ CX
	JNZ  transf32loop

transf32done:
	VZEROUPPER
	RET

// func gemmPackTransBF16(dst, src *uint16, lds, kb int)
// gemmPackTransF32 for a BF16 source: each row's 32 bf16 of a block are
// already its 16 pairs.
TEXT ·gemmPackTransBF16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ kb+24(FP), CX
	SHLQ $1, R8               // ROWSETUP for 2-byte elements
	LEAQ (R8)(R8*2), R9
	LEAQ (R8)(R8*4), R10
	LEAQ (R9)(R8*4), R11
	LEAQ (SI)(R8*8), DI
	TESTQ CX, CX
	JEQ   transbf16done

transbf16loop:
	VMOVDQU32 ROW0(0), Z0
	VMOVDQU32 ROW1(0), Z1
	VMOVDQU32 ROW2(0), Z2
	VMOVDQU32 ROW3(0), Z3
	VMOVDQU32 ROW4(0), Z4
	VMOVDQU32 ROW5(0), Z5
	VMOVDQU32 ROW6(0), Z6
	VMOVDQU32 ROW7(0), Z7
	VMOVDQU32 ROW8(0), Z8
	VMOVDQU32 ROW9(0), Z9
	VMOVDQU32 ROW10(0), Z10
	VMOVDQU32 ROW11(0), Z11
	VMOVDQU32 ROW12(0), Z12
	VMOVDQU32 ROW13(0), Z13
	VMOVDQU32 ROW14(0), Z14
	VMOVDQU32 ROW15(0), Z15
	TRANSPOSE16
	STORE16X64
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $2048, DX
	DECQ CX
	JNZ  transbf16loop

transbf16done:
	VZEROUPPER
	RET

// Word indices for interleaving two rows X (table 1) and Y (table 2) of
// 32 bf16 into pairs: pairlo gives (X[j], Y[j]) for j = 0..15, pairhi
// (X[16+j], Y[16+j]). Index bit 5 selects the table (VPERMT2W).
DATA pairlo<>+0(SB)/8, $0x0021000100200000
DATA pairlo<>+8(SB)/8, $0x0023000300220002
DATA pairlo<>+16(SB)/8, $0x0025000500240004
DATA pairlo<>+24(SB)/8, $0x0027000700260006
DATA pairlo<>+32(SB)/8, $0x0029000900280008
DATA pairlo<>+40(SB)/8, $0x002b000b002a000a
DATA pairlo<>+48(SB)/8, $0x002d000d002c000c
DATA pairlo<>+56(SB)/8, $0x002f000f002e000e
GLOBL pairlo<>(SB), RODATA|NOPTR, $64
DATA pairhi<>+0(SB)/8, $0x0031001100300010
DATA pairhi<>+8(SB)/8, $0x0033001300320012
DATA pairhi<>+16(SB)/8, $0x0035001500340014
DATA pairhi<>+24(SB)/8, $0x0037001700360016
DATA pairhi<>+32(SB)/8, $0x0039001900380018
DATA pairhi<>+40(SB)/8, $0x003b001b003a001a
DATA pairhi<>+48(SB)/8, $0x003d001d003c001c
DATA pairhi<>+56(SB)/8, $0x003f001f003e001e
GLOBL pairhi<>(SB), RODATA|NOPTR, $64

// Interleave of one vector holding row X in words 0-15 and row Y in words
// 16-31 (VPERMW, one table): (X[j], Y[j]) for j = 0..15.
DATA pairone<>+0(SB)/8, $0x0011000100100000
DATA pairone<>+8(SB)/8, $0x0013000300120002
DATA pairone<>+16(SB)/8, $0x0015000500140004
DATA pairone<>+24(SB)/8, $0x0017000700160006
DATA pairone<>+32(SB)/8, $0x0019000900180008
DATA pairone<>+40(SB)/8, $0x001b000b001a000a
DATA pairone<>+48(SB)/8, $0x001d000d001c000c
DATA pairone<>+56(SB)/8, $0x001f000f001e000e
GLOBL pairone<>(SB), RODATA|NOPTR, $64

// func gemmPackPairsF32(dst *uint16, src *float32, lds, kb, panels, pan int)
// dst[t*pan + q*1024 + (j/16)*512 + r*32 + (j%16)*2 + e] =
// bf16(src[(32q+2r+e)*lds + 32t + j]) for j < 32, t < panels: whole B
// micro-panels (both tiles of each block), pan values apart, from a B
// stored K×N (N contiguous). Two rows of B at a time, across all the
// panels, so that B is read along its rows: for each panel, convert both
// rows' 32 values to bf16 (X, Y), interleave X and Y word by word
// (VPERMT2W with pairlo, pairhi) and store the two halves in the two tiles.
//
// Registers: SI row 2r of B, AX the panel's columns in it, R8 lds in
// bytes, R9 = 2·lds, R11 = pan in bytes, DX tile row r of block q of panel
// 0, BX the same in panel t, R10 row r (0..15), R12 panels left, CX blocks
// left, Z30/Z31 pairlo/pairhi.
TEXT ·gemmPackPairsF32(SB), NOSPLIT, $0-48
	MOVQ    dst+0(FP), DX
	MOVQ    src+8(FP), SI
	MOVQ    lds+16(FP), R8
	SHLQ    $2, R8
	LEAQ    (R8)(R8*1), R9
	MOVQ    kb+24(FP), CX
	MOVQ    pan+40(FP), R11
	SHLQ    $1, R11
	VMOVDQU32 pairlo<>(SB), Z30
	VMOVDQU32 pairhi<>(SB), Z31
	TESTQ   CX, CX
	JEQ     pairsf32done

pairsf32block:
	XORQ R10, R10

pairsf32row:
	MOVQ SI, AX
	MOVQ DX, BX
	MOVQ panels+32(FP), R12

pairsf32panel:
	VMOVUPS (AX), Z0
	VMOVUPS 64(AX), Z1
	VMOVUPS (AX)(R8*1), Z2
	VMOVUPS 64(AX)(R8*1), Z3
	VCVTNE2PS2BF16(4, 1, 0)   // X = row 2r, the panel's 32 columns
	VCVTNE2PS2BF16(5, 3, 2)   // Y = row 2r+1
	VMOVDQA64 Z4, Z6
	VPERMT2W  Z5, Z30, Z6     // (X[j], Y[j]), j < 16
	VPERMT2W  Z5, Z31, Z4     // (X[16+j], Y[16+j])
	VMOVDQU32 Z6, (BX)
	VMOVDQU32 Z4, 1024(BX)
	ADDQ $128, AX
	ADDQ R11, BX
	DECQ R12
	JNZ  pairsf32panel
	ADDQ $64, DX
	ADDQ R9, SI
	INCQ R10
	CMPQ R10, $16
	JLT  pairsf32row
	ADDQ $1024, DX            // past the second tile: the next block
	DECQ CX
	JNZ  pairsf32block

pairsf32done:
	VZEROUPPER
	RET

// func gemmPackPairsBF16(dst, src *uint16, lds, kb, panels, pan int)
// gemmPackPairsF32 for a BF16 source: the rows are loaded as 32 bf16.
TEXT ·gemmPackPairsBF16(SB), NOSPLIT, $0-48
	MOVQ    dst+0(FP), DX
	MOVQ    src+8(FP), SI
	MOVQ    lds+16(FP), R8
	SHLQ    $1, R8
	LEAQ    (R8)(R8*1), R9
	MOVQ    kb+24(FP), CX
	MOVQ    pan+40(FP), R11
	SHLQ    $1, R11
	VMOVDQU32 pairlo<>(SB), Z30
	VMOVDQU32 pairhi<>(SB), Z31
	TESTQ   CX, CX
	JEQ     pairsbf16done

pairsbf16block:
	XORQ R10, R10

pairsbf16row:
	MOVQ SI, AX
	MOVQ DX, BX
	MOVQ panels+32(FP), R12

pairsbf16panel:
	VMOVDQU16 (AX), Z4        // X = row 2r
	VMOVDQU16 (AX)(R8*1), Z5  // Y = row 2r+1
	VMOVDQA64 Z4, Z6
	VPERMT2W  Z5, Z30, Z6
	VPERMT2W  Z5, Z31, Z4
	VMOVDQU32 Z6, (BX)
	VMOVDQU32 Z4, 1024(BX)
	ADDQ $64, AX
	ADDQ R11, BX
	DECQ R12
	JNZ  pairsbf16panel
	ADDQ $64, DX
	ADDQ R9, SI
	INCQ R10
	CMPQ R10, $16
	JLT  pairsbf16row
	ADDQ $1024, DX
	DECQ CX
	JNZ  pairsbf16block

pairsbf16done:
	VZEROUPPER
	RET

// One pair r of a transposed-A block: rows 2r and 2r+1 (16 floats each, at
// AX and AX+lds) into Z(r) as 16 bf16 pairs (row i's pair r in lane i);
// AX moves on two rows. Z16 holds pairone.
#define PAIRTF32(r) \
	VMOVUPS (AX), Z17;              \
	VMOVUPS (AX)(R8*1), Z18;        \
	VCVTNE2PS2BF16(19, 18, 17);     \
	VPERMW  Z19, Z16, r;            \
	LEAQ    (AX)(R8*2), AX

// func gemmPackPairsTF32(dst *uint16, src *float32, lds, kb int)
// dst[q*1024 + i*32 + 2r + e] = bf16(src[(32q+2r+e)*lds + i]) for i < 16:
// one AMX A tile (16 rows of op(A)) per block from a transposed A (K×M,
// M contiguous). The 32 rows of K of a block become 16 vectors of pairs
// (PAIRTF32), and TRANSPOSE16 turns them into the 16 rows of the tile.
TEXT ·gemmPackPairsTF32(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	SHLQ $2, R8
	MOVQ kb+24(FP), CX
	TESTQ CX, CX
	JEQ   pairstf32done

pairstf32loop:
	VMOVDQU32 pairone<>(SB), Z16
	MOVQ SI, AX
	PAIRTF32(Z0)
	PAIRTF32(Z1)
	PAIRTF32(Z2)
	PAIRTF32(Z3)
	PAIRTF32(Z4)
	PAIRTF32(Z5)
	PAIRTF32(Z6)
	PAIRTF32(Z7)
	PAIRTF32(Z8)
	PAIRTF32(Z9)
	PAIRTF32(Z10)
	PAIRTF32(Z11)
	PAIRTF32(Z12)
	PAIRTF32(Z13)
	PAIRTF32(Z14)
	PAIRTF32(Z15)
	MOVQ AX, SI
	TRANSPOSE16
	STORE16X64
	ADDQ $2048, DX
	DECQ CX
	JNZ  pairstf32loop

pairstf32done:
	VZEROUPPER
	RET

// PAIRTF32 for a BF16 source: row 2r's 16 bf16 in words 0-15, row 2r+1's
// in 16-31.
#define PAIRTBF16(r) \
	VMOVDQU16    (AX), Y17;                \
	VINSERTI64X4 $1, (AX)(R8*1), Z17, Z17; \
	VPERMW       Z17, Z16, r;              \
	LEAQ         (AX)(R8*2), AX

// func gemmPackPairsTBF16(dst, src *uint16, lds, kb int)
// gemmPackPairsTF32 for a BF16 source.
TEXT ·gemmPackPairsTBF16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	SHLQ $1, R8
	MOVQ kb+24(FP), CX
	TESTQ CX, CX
	JEQ   pairstbf16done

pairstbf16loop:
	VMOVDQU32 pairone<>(SB), Z16
	MOVQ SI, AX
	PAIRTBF16(Z0)
	PAIRTBF16(Z1)
	PAIRTBF16(Z2)
	PAIRTBF16(Z3)
	PAIRTBF16(Z4)
	PAIRTBF16(Z5)
	PAIRTBF16(Z6)
	PAIRTBF16(Z7)
	PAIRTBF16(Z8)
	PAIRTBF16(Z9)
	PAIRTBF16(Z10)
	PAIRTBF16(Z11)
	PAIRTBF16(Z12)
	PAIRTBF16(Z13)
	PAIRTBF16(Z14)
	PAIRTBF16(Z15)
	MOVQ AX, SI
	TRANSPOSE16
	STORE16X64
	ADDQ $2048, DX
	DECQ CX
	JNZ  pairstbf16loop

pairstbf16done:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Skinny kernels: rows of X (fp32 values of bf16 numbers) times a BF16
// matrix W read where it is stored. Each bf16 is widened to fp32 by a zero
// extension to 32 bits and a shift left by 16 (VPMOVZXWD, VPSLLD), and the
// products are accumulated with fp32 FMAs (exact products of two bf16).

// Horizontal sum of Z(a) + Z(b) into X(a)'s low float, through X(t).
#define HSUM2(za, zb, ya, xa, yt, xt) \
	VADDPS        zb, za, za;  \
	VEXTRACTF64X4 $1, za, yt;  \
	VADDPS        yt, ya, ya;  \
	VEXTRACTF128  $1, ya, xt;  \
	VADDPS        xt, xa, xa;  \
	VMOVHLPS      xa, xa, xt;  \
	VADDPS        xt, xa, xa;  \
	VMOVSHDUP     xa, xt;      \
	VADDSS        xt, xa, xa

// W[j, p..p+16] (W's row at DI, p in AX) widened into z.
#define WIDEN(off, z) \
	VPMOVZXWD off(DI)(AX*2), z; \
	VPSLLD    $16, z, z

// PFDIST is how far ahead in W the matrix-vector kernel prefetches: 2 KiB
// measured best for decoding (1, 4 and 8 KiB slower).
#define PFDIST 2048

// func gemmSkinnyDots4BF16(x0, x1, x2, x3 *float32, w *uint16, ldw, nw, k int, s *float32, lds int)
// s[i*lds + j] = Σ_p xi[p]·FromBF16(w[j*ldw + p]) for i < 4, j < nw: four
// rows of X against the rows of W, each element of W loaded once. Per row
// of W: two accumulators per row of X (Z0-Z7) over 32 values at a time,
// then 16, then the last k mod 16 under mask K1.
//
// Registers: R11-R14 x0-x3, DI row j of W, R8 ldw in bytes, R9 rows left,
// CX k, DX s + 4j, R15 lds in bytes, BX = 3·lds, AX p, R10 loop limit.
TEXT ·gemmSkinnyDots4BF16(SB), NOSPLIT, $0-80
	MOVQ  x0+0(FP), R11
	MOVQ  x1+8(FP), R12
	MOVQ  x2+16(FP), R13
	MOVQ  x3+24(FP), R14
	MOVQ  w+32(FP), DI
	MOVQ  ldw+40(FP), R8
	SHLQ  $1, R8
	MOVQ  nw+48(FP), R9
	MOVQ  k+56(FP), CX
	MOVQ  s+64(FP), DX
	MOVQ  lds+72(FP), R15
	SHLQ  $2, R15
	LEAQ  (R15)(R15*2), BX
	MOVQ  CX, AX
	ANDQ  $15, AX
	MOVL  $-1, R10
	BZHIL AX, R10, R10
	KMOVW R10, K1
	TESTQ R9, R9
	JEQ   dots4done

dots4row:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	XORQ   AX, AX
	LEAQ   -32(CX), R10

dots4loop32:
	CMPQ AX, R10
	JGT  dots4tail16
	WIDEN(0, Z8)
	WIDEN(32, Z9)
	VFMADD231PS (R11)(AX*4), Z8, Z0
	VFMADD231PS 64(R11)(AX*4), Z9, Z1
	VFMADD231PS (R12)(AX*4), Z8, Z2
	VFMADD231PS 64(R12)(AX*4), Z9, Z3
	VFMADD231PS (R13)(AX*4), Z8, Z4
	VFMADD231PS 64(R13)(AX*4), Z9, Z5
	VFMADD231PS (R14)(AX*4), Z8, Z6
	VFMADD231PS 64(R14)(AX*4), Z9, Z7
	ADDQ $32, AX
	JMP  dots4loop32

dots4tail16:
	LEAQ -16(CX), R10
	CMPQ AX, R10
	JGT  dots4mask
	WIDEN(0, Z8)
	VFMADD231PS (R11)(AX*4), Z8, Z0
	VFMADD231PS (R12)(AX*4), Z8, Z2
	VFMADD231PS (R13)(AX*4), Z8, Z4
	VFMADD231PS (R14)(AX*4), Z8, Z6
	ADDQ $16, AX

dots4mask:
	CMPQ AX, CX
	JGE  dots4sum
	VPMOVZXWD.Z (DI)(AX*2), K1, Z8
	VPSLLD      $16, Z8, Z8
	VMOVUPS.Z   (R11)(AX*4), K1, Z9
	VFMADD231PS Z9, Z8, Z0
	VMOVUPS.Z   (R12)(AX*4), K1, Z9
	VFMADD231PS Z9, Z8, Z2
	VMOVUPS.Z   (R13)(AX*4), K1, Z9
	VFMADD231PS Z9, Z8, Z4
	VMOVUPS.Z   (R14)(AX*4), K1, Z9
	VFMADD231PS Z9, Z8, Z6

dots4sum:
	HSUM2(Z0, Z1, Y0, X0, Y8, X8)
	HSUM2(Z2, Z3, Y2, X2, Y8, X8)
	HSUM2(Z4, Z5, Y4, X4, Y8, X8)
	HSUM2(Z6, Z7, Y6, X6, Y8, X8)
	VMOVSS X0, (DX)
	VMOVSS X2, (DX)(R15*1)
	VMOVSS X4, (DX)(R15*2)
	VMOVSS X6, (DX)(BX*1)
	ADDQ   $4, DX
	ADDQ   R8, DI
	DECQ   R9
	JNZ    dots4row

dots4done:
	VZEROUPPER
	RET

// W(p, j) for 16 columns at off(BX) (row p of W), widened into z.
#define WROW(off, z) \
	VPMOVZXWD off(BX), z; \
	VPSLLD    $16, z, z

// Rows 0-3 of a group of W at AX (R8 = ldw, R12 = 3·ldw in bytes).
#define WR0(off) off(AX)
#define WR1(off) off(AX)(R8*1)
#define WR2(off) off(AX)(R8*2)
#define WR3(off) off(AX)(R12*1)

// Z0-Z3 += x·W[row, 64 columns]: row is WR0-WR3, x broadcast in xz;
// Z4-Z7 are temps.
#define AXROW(row, xz) \
	VPMOVZXWD   row(0), Z4;       \
	VPMOVZXWD   row(32), Z5;      \
	VPMOVZXWD   row(64), Z6;      \
	VPMOVZXWD   row(96), Z7;      \
	VPSLLD      $16, Z4, Z4;      \
	VPSLLD      $16, Z5, Z5;      \
	VPSLLD      $16, Z6, Z6;      \
	VPSLLD      $16, Z7, Z7;      \
	VFMADD231PS Z4, xz, Z0;       \
	VFMADD231PS Z5, xz, Z1;       \
	VFMADD231PS Z6, xz, Z2;       \
	VFMADD231PS Z7, xz, Z3

// Z0 += x·W[row, 16 columns], as AXROW.
#define AXROW16(row, xz) \
	VPMOVZXWD   row(0), Z4;     \
	VPSLLD      $16, Z4, Z4;    \
	VFMADD231PS Z4, xz, Z0

// Z0 += x·W[row, nw mod 16 columns] under mask K1, as AXROW.
#define AXROWM(row, xz) \
	VPMOVZXWD.Z row(0), K1, Z4;     \
	VPSLLD      $16, Z4, Z4;        \
	VFMADD231PS Z4, xz, Z0

// func gemmSkinnyAxpys1BF16(x *float32, w *uint16, ldw, nw, k int, s *float32)
// s[j] = Σ_p x[p]·FromBF16(w[p*ldw + j]) for j < nw, p < k: one row of X
// times W stored K×N (decoding's dinp = dout·W). W is read along its
// rows, four at a time: s (in L1) is cleared, then for each group of four
// rows every run of 64 columns of s is loaded (Z0-Z3), gets the four rows'
// products (x values broadcast in Z8-Z11), and is stored; then runs of 16,
// then the last nw mod 16 columns under mask K1. Rows k mod 4 at the end
// go one at a time (x[p] in Z8).
//
// Registers: SI x at row p, BX row p of W, R8 ldw in bytes, R12 = 3·ldw,
// R9 column, CX rows left, DX s, R10 column limit, R11 rows in the group
// (4 or 1).
TEXT ·gemmSkinnyAxpys1BF16(SB), NOSPLIT, $0-48
	MOVQ  x+0(FP), SI
	MOVQ  w+8(FP), BX
	MOVQ  ldw+16(FP), R8
	SHLQ  $1, R8
	LEAQ  (R8)(R8*2), R12
	MOVQ  k+32(FP), CX
	MOVQ  s+40(FP), DX
	MOVQ  nw+24(FP), AX
	ANDQ  $15, AX
	MOVL  $-1, R10
	BZHIL AX, R10, R10
	KMOVW R10, K1

	// Clear s.
	VPXORD Z0, Z0, Z0
	XORQ   R9, R9
	MOVQ   nw+24(FP), R10
	SUBQ   $16, R10

ax1clear:
	CMPQ    R9, R10
	JGT     ax1clearmask
	VMOVUPS Z0, (DX)(R9*4)
	ADDQ    $16, R9
	JMP     ax1clear

ax1clearmask:
	VMOVUPS Z0, K1, (DX)(R9*4)
	TESTQ   CX, CX
	JEQ     ax1done

ax1group:
	MOVQ         $4, R11
	CMPQ         CX, R11
	JGE          2(PC)
	MOVQ         $1, R11
	VBROADCASTSS (SI), Z8
	CMPQ         R11, $1
	JEQ          ax1one
	VBROADCASTSS 4(SI), Z9
	VBROADCASTSS 8(SI), Z10
	VBROADCASTSS 12(SI), Z11
	XORQ         R9, R9
	MOVQ         nw+24(FP), R10
	SUBQ         $64, R10

ax1four64:
	CMPQ    R9, R10
	JGT     ax1four16
	LEAQ    (BX)(R9*2), AX
	VMOVUPS (DX)(R9*4), Z0
	VMOVUPS 64(DX)(R9*4), Z1
	VMOVUPS 128(DX)(R9*4), Z2
	VMOVUPS 192(DX)(R9*4), Z3
	AXROW(WR0, Z8)
	AXROW(WR1, Z9)
	AXROW(WR2, Z10)
	AXROW(WR3, Z11)
	VMOVUPS Z0, (DX)(R9*4)
	VMOVUPS Z1, 64(DX)(R9*4)
	VMOVUPS Z2, 128(DX)(R9*4)
	VMOVUPS Z3, 192(DX)(R9*4)
	ADDQ    $64, R9
	JMP     ax1four64

ax1four16:
	MOVQ nw+24(FP), R10
	SUBQ $16, R10

ax1four16loop:
	CMPQ    R9, R10
	JGT     ax1fourmask
	LEAQ    (BX)(R9*2), AX
	VMOVUPS (DX)(R9*4), Z0
	AXROW16(WR0, Z8)
	AXROW16(WR1, Z9)
	AXROW16(WR2, Z10)
	AXROW16(WR3, Z11)
	VMOVUPS Z0, (DX)(R9*4)
	ADDQ    $16, R9
	JMP     ax1four16loop

ax1fourmask:
	CMPQ      R9, nw+24(FP)
	JGE       ax1next
	LEAQ      (BX)(R9*2), AX
	VMOVUPS.Z (DX)(R9*4), K1, Z0
	AXROWM(WR0, Z8)
	AXROWM(WR1, Z9)
	AXROWM(WR2, Z10)
	AXROWM(WR3, Z11)
	VMOVUPS   Z0, K1, (DX)(R9*4)
	JMP       ax1next

ax1one:
	XORQ R9, R9
	MOVQ nw+24(FP), R10
	SUBQ $16, R10

ax1one16:
	CMPQ    R9, R10
	JGT     ax1onemask
	LEAQ    (BX)(R9*2), AX
	VMOVUPS (DX)(R9*4), Z0
	AXROW16(WR0, Z8)
	VMOVUPS Z0, (DX)(R9*4)
	ADDQ    $16, R9
	JMP     ax1one16

ax1onemask:
	CMPQ      R9, nw+24(FP)
	JGE       ax1next
	LEAQ      (BX)(R9*2), AX
	VMOVUPS.Z (DX)(R9*4), K1, Z0
	AXROWM(WR0, Z8)
	VMOVUPS   Z0, K1, (DX)(R9*4)

ax1next:
	// Past the group: R11 rows of x and W.
	LEAQ (SI)(R11*4), SI
	MOVQ R11, AX
	IMULQ R8, AX
	ADDQ AX, BX
	SUBQ R11, CX
	JNZ  ax1group

ax1done:
	VZEROUPPER
	RET

// func gemmSkinnyAxpys4BF16(x0, x1, x2, x3 *float32, w *uint16, ldw, nw, k int, s *float32, lds int)
// s[i*lds + j] = Σ_p xi[p]·FromBF16(w[p*ldw + j]) for i < 4, j < nw:
// gemmSkinnyAxpys1BF16 for four rows of X, 32 columns at a time (Z0-Z7:
// two per row of X; the four x values of row p broadcast in Z10-Z13),
// then 16, then the last nw mod 16 under mask K1.
//
// Registers: R11-R14 x0-x3 at row p, BX row p of W at the current
// columns, R8 ldw in bytes, R9 columns done, CX k, DX s, R15 lds in bytes,
// SI = 3·lds, R10 rows left, AX column limit, DI W.
TEXT ·gemmSkinnyAxpys4BF16(SB), NOSPLIT, $0-80
	MOVQ  w+32(FP), DI
	MOVQ  ldw+40(FP), R8
	SHLQ  $1, R8
	MOVQ  k+56(FP), CX
	MOVQ  s+64(FP), DX
	MOVQ  lds+72(FP), R15
	SHLQ  $2, R15
	LEAQ  (R15)(R15*2), SI
	MOVQ  nw+48(FP), AX
	ANDQ  $15, AX
	MOVL  $-1, R10
	BZHIL AX, R10, R10
	KMOVW R10, K1
	XORQ  R9, R9
	TESTQ CX, CX
	JEQ   ax4done

// Four rows of x at row 0 again, W at column R9, R10 = k rows.
#define AX4START \
	MOVQ x0+0(FP), R11;  \
	MOVQ x1+8(FP), R12;  \
	MOVQ x2+16(FP), R13; \
	MOVQ x3+24(FP), R14; \
	LEAQ (DI)(R9*2), BX; \
	MOVQ CX, R10

#define AX4BCAST \
	VBROADCASTSS (R11), Z10; \
	VBROADCASTSS (R12), Z11; \
	VBROADCASTSS (R13), Z12; \
	VBROADCASTSS (R14), Z13

#define AX4NEXT \
	ADDQ $4, R11; \
	ADDQ $4, R12; \
	ADDQ $4, R13; \
	ADDQ $4, R14; \
	ADDQ R8, BX;  \
	DECQ R10

ax4chunk32:
	MOVQ nw+48(FP), AX
	SUBQ $32, AX
	CMPQ R9, AX
	JGT  ax4chunk16
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	AX4START

ax4loop32:
	AX4BCAST
	WROW(0, Z8)
	WROW(32, Z9)
	VFMADD231PS Z8, Z10, Z0
	VFMADD231PS Z9, Z10, Z1
	VFMADD231PS Z8, Z11, Z2
	VFMADD231PS Z9, Z11, Z3
	VFMADD231PS Z8, Z12, Z4
	VFMADD231PS Z9, Z12, Z5
	VFMADD231PS Z8, Z13, Z6
	VFMADD231PS Z9, Z13, Z7
	AX4NEXT
	JNZ  ax4loop32
	LEAQ (DX)(R9*4), AX
	VMOVUPS Z0, (AX)
	VMOVUPS Z1, 64(AX)
	VMOVUPS Z2, (AX)(R15*1)
	VMOVUPS Z3, 64(AX)(R15*1)
	VMOVUPS Z4, (AX)(R15*2)
	VMOVUPS Z5, 64(AX)(R15*2)
	VMOVUPS Z6, (AX)(SI*1)
	VMOVUPS Z7, 64(AX)(SI*1)
	ADDQ $32, R9
	JMP  ax4chunk32

ax4chunk16:
	MOVQ nw+48(FP), AX
	SUBQ $16, AX
	CMPQ R9, AX
	JGT  ax4mask
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	VPXORD Z4, Z4, Z4
	VPXORD Z6, Z6, Z6
	AX4START

ax4loop16:
	AX4BCAST
	WROW(0, Z8)
	VFMADD231PS Z8, Z10, Z0
	VFMADD231PS Z8, Z11, Z2
	VFMADD231PS Z8, Z12, Z4
	VFMADD231PS Z8, Z13, Z6
	AX4NEXT
	JNZ  ax4loop16
	LEAQ (DX)(R9*4), AX
	VMOVUPS Z0, (AX)
	VMOVUPS Z2, (AX)(R15*1)
	VMOVUPS Z4, (AX)(R15*2)
	VMOVUPS Z6, (AX)(SI*1)
	ADDQ $16, R9
	JMP  ax4chunk16

ax4mask:
	CMPQ R9, nw+48(FP)
	JGE  ax4done
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	VPXORD Z4, Z4, Z4
	VPXORD Z6, Z6, Z6
	AX4START

ax4loopmask:
	AX4BCAST
	VPMOVZXWD.Z (BX), K1, Z8
	VPSLLD      $16, Z8, Z8
	VFMADD231PS Z8, Z10, Z0
	VFMADD231PS Z8, Z11, Z2
	VFMADD231PS Z8, Z12, Z4
	VFMADD231PS Z8, Z13, Z6
	AX4NEXT
	JNZ  ax4loopmask
	LEAQ (DX)(R9*4), AX
	VMOVUPS Z0, K1, (AX)
	VMOVUPS Z2, K1, (AX)(R15*1)
	VMOVUPS Z4, K1, (AX)(R15*2)
	VMOVUPS Z6, K1, (AX)(SI*1)

ax4done:
	VZEROUPPER
	RET

// func gemmSkinnyDotsEOBF16(xe, xo *float32, w *uint16, ldw, nw, k int, s *float32)
// s[j] = Σ_p x[p]·FromBF16(w[j*ldw + p]) for j < nw, p < k, with x given
// as its even and odd elements (xe[i] = x[2i], xo[i] = x[2i+1], zeros up
// to 16 values per 32 of k): one row of X against the rows of W
// (decoding). A 64-byte load of W holds 16 (even, odd) pairs as dwords;
// the even weights widen by a shift left by 16 and the odd ones by masking
// the low half off, with no shuffle, so a pair of rows costs 8 loads, 8
// integer ops and 8 FMAs per 64 weights a row (widening each half-vector
// with VPMOVZXWD, as the 4-row kernels do, adds 8 shuffles on one port:
// 6% slower decoding). Rows of W go two at a time, four accumulators a row
// (even and odd, two chunks of 32: Z0-Z3, Z4-Z7), then one chunk of 32,
// then the last k mod 32 weights under the word mask K1 (zeroed: the read
// stops at the row's end). PREFETCHT0 runs PFDIST bytes ahead in W.
//
// Registers: SI xe, R12 xo, DI row j of W, BX row j+1, R8 ldw in bytes,
// R9 rows left, CX k, DX s, AX p, R10 loop limit, R11 k rounded down to
// 32, Z31 the odd mask 0xFFFF0000. xe, xo and W are all indexed by
// (AX*2): p/2 floats, p halves.
#define EOHALVES(src, e, o) \
	VPSLLD $16, src, e;    \
	VPANDD Z31, src, o

TEXT ·gemmSkinnyDotsEOBF16(SB), NOSPLIT, $0-56
	MOVQ         xe+0(FP), SI
	MOVQ         xo+8(FP), R12
	MOVQ         w+16(FP), DI
	MOVQ         ldw+24(FP), R8
	SHLQ         $1, R8
	MOVQ         nw+32(FP), R9
	MOVQ         k+40(FP), CX
	MOVQ         s+48(FP), DX
	MOVQ         CX, AX
	ANDQ         $31, AX
	MOVL         $-1, R10
	BZHIL        AX, R10, R10
	KMOVD        R10, K1
	MOVQ         CX, R11
	ANDQ         $-32, R11
	MOVL         $0xffff0000, R10
	VPBROADCASTD R10, Z31

eopair:
	CMPQ   R9, $2
	JLT    eorow
	LEAQ   (DI)(R8*1), BX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	XORQ   AX, AX
	LEAQ   -64(R11), R10

eopair64:
	CMPQ        AX, R10
	JGT         eopair32
	PREFETCHT0  PFDIST(DI)(AX*2)
	PREFETCHT0  PFDIST+64(DI)(AX*2)
	PREFETCHT0  PFDIST(BX)(AX*2)
	PREFETCHT0  PFDIST+64(BX)(AX*2)
	VMOVUPS     (SI)(AX*2), Z16
	VMOVUPS     64(SI)(AX*2), Z17
	VMOVUPS     (R12)(AX*2), Z18
	VMOVUPS     64(R12)(AX*2), Z19
	VMOVDQU32   (DI)(AX*2), Z8
	VMOVDQU32   64(DI)(AX*2), Z9
	VMOVDQU32   (BX)(AX*2), Z12
	VMOVDQU32   64(BX)(AX*2), Z13
	EOHALVES(Z8, Z10, Z8)
	EOHALVES(Z9, Z11, Z9)
	EOHALVES(Z12, Z14, Z12)
	EOHALVES(Z13, Z15, Z13)
	VFMADD231PS Z16, Z10, Z0
	VFMADD231PS Z18, Z8, Z1
	VFMADD231PS Z17, Z11, Z2
	VFMADD231PS Z19, Z9, Z3
	VFMADD231PS Z16, Z14, Z4
	VFMADD231PS Z18, Z12, Z5
	VFMADD231PS Z17, Z15, Z6
	VFMADD231PS Z19, Z13, Z7
	ADDQ        $64, AX
	JMP         eopair64

eopair32:
	CMPQ        AX, R11
	JGE         eopairmask
	VMOVUPS     (SI)(AX*2), Z16
	VMOVUPS     (R12)(AX*2), Z18
	VMOVDQU32   (DI)(AX*2), Z8
	VMOVDQU32   (BX)(AX*2), Z12
	EOHALVES(Z8, Z10, Z8)
	EOHALVES(Z12, Z14, Z12)
	VFMADD231PS Z16, Z10, Z0
	VFMADD231PS Z18, Z8, Z1
	VFMADD231PS Z16, Z14, Z4
	VFMADD231PS Z18, Z12, Z5
	ADDQ        $32, AX

eopairmask:
	CMPQ        AX, CX
	JGE         eopairsum
	VMOVUPS     (SI)(AX*2), Z16
	VMOVUPS     (R12)(AX*2), Z18
	VMOVDQU16.Z (DI)(AX*2), K1, Z8
	VMOVDQU16.Z (BX)(AX*2), K1, Z12
	EOHALVES(Z8, Z10, Z8)
	EOHALVES(Z12, Z14, Z12)
	VFMADD231PS Z16, Z10, Z2
	VFMADD231PS Z18, Z8, Z3
	VFMADD231PS Z16, Z14, Z6
	VFMADD231PS Z18, Z12, Z7

eopairsum:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	HSUM2(Z0, Z2, Y0, X0, Y1, X1)
	VADDPS Z5, Z4, Z4
	VADDPS Z7, Z6, Z6
	HSUM2(Z4, Z6, Y4, X4, Y5, X5)
	VMOVSS X0, (DX)
	VMOVSS X4, 4(DX)
	ADDQ   $8, DX
	LEAQ   (DI)(R8*2), DI
	SUBQ   $2, R9
	JMP    eopair

eorow:
	TESTQ  R9, R9
	JEQ    eodone
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ   AX, AX

eorow32:
	CMPQ        AX, R11
	JGE         eorowmask
	VMOVUPS     (SI)(AX*2), Z16
	VMOVUPS     (R12)(AX*2), Z18
	VMOVDQU32   (DI)(AX*2), Z8
	EOHALVES(Z8, Z10, Z8)
	VFMADD231PS Z16, Z10, Z0
	VFMADD231PS Z18, Z8, Z1
	ADDQ        $32, AX
	JMP         eorow32

eorowmask:
	CMPQ        AX, CX
	JGE         eorowsum
	VMOVUPS     (SI)(AX*2), Z16
	VMOVUPS     (R12)(AX*2), Z18
	VMOVDQU16.Z (DI)(AX*2), K1, Z8
	EOHALVES(Z8, Z10, Z8)
	VFMADD231PS Z16, Z10, Z2
	VFMADD231PS Z18, Z8, Z3

eorowsum:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	HSUM2(Z0, Z2, Y0, X0, Y1, X1)
	VMOVSS X0, (DX)

eodone:
	VZEROUPPER
	RET
