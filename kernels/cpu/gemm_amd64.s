#include "textflag.h"
#include "gemm_amd64.h"

// GEMM micro-kernels. Each computes an MR×NR tile of C from packed panels:
//
//	c[i*ldc + j] = Σ_p a[p*MR + i]·b[p*NR + j] + beta·c[i*ldc + j]
//
// C is row-major, so a vector register holds consecutive columns of one row:
// each step p loads one row of the B panel into registers, broadcasts the MR
// values of the A panel one by one, and does MR×(NR/width) FMAs. beta == 0
// (either sign) stores without reading C.

// ---------------------------------------------------------------------------
// AVX-512, MR = 14, NR = 32.
//
// Registers:
//	Z0-Z27   accumulators: row i in Z(2i) (columns 0-15) and Z(2i+1) (16-31)
//	Z28, Z29 the current row of B (columns 0-15, 16-31)
//	Z30, Z31 broadcast values of A, alternating between even and odd rows
//	AX a panel, BX b panel, DX c, R8 ldc in bytes, R10 C prefetch pointer,
//	CX, R9, R11 loop counters
//
// One step is 2 loads of B, 14 broadcasts and 28 FMAs: the two FMA ports
// are busy 14 cycles while the loads need 8 of the two load ports' cycles.
// Broadcasting into registers rather than using {1to16} memory operands
// halves the loads (each A value feeds two FMAs).

#define FMA14(bc, lo, hi) \
	VFMADD231PS bc, Z28, lo; \
	VFMADD231PS bc, Z29, hi

#define STEP14x32 \
	VMOVUPS      (BX), Z28;         \
	VMOVUPS      64(BX), Z29;       \
	VBROADCASTSS (AX), Z30;         \
	VBROADCASTSS 4(AX), Z31;        \
	FMA14(Z30, Z0, Z1);             \
	VBROADCASTSS 8(AX), Z30;        \
	FMA14(Z31, Z2, Z3);             \
	VBROADCASTSS 12(AX), Z31;       \
	FMA14(Z30, Z4, Z5);             \
	VBROADCASTSS 16(AX), Z30;       \
	FMA14(Z31, Z6, Z7);             \
	VBROADCASTSS 20(AX), Z31;       \
	FMA14(Z30, Z8, Z9);             \
	VBROADCASTSS 24(AX), Z30;       \
	FMA14(Z31, Z10, Z11);           \
	VBROADCASTSS 28(AX), Z31;       \
	FMA14(Z30, Z12, Z13);           \
	VBROADCASTSS 32(AX), Z30;       \
	FMA14(Z31, Z14, Z15);           \
	VBROADCASTSS 36(AX), Z31;       \
	FMA14(Z30, Z16, Z17);           \
	VBROADCASTSS 40(AX), Z30;       \
	FMA14(Z31, Z18, Z19);           \
	VBROADCASTSS 44(AX), Z31;       \
	FMA14(Z30, Z20, Z21);           \
	VBROADCASTSS 48(AX), Z30;       \
	FMA14(Z31, Z22, Z23);           \
	VBROADCASTSS 52(AX), Z31;       \
	FMA14(Z30, Z24, Z25);           \
	FMA14(Z31, Z26, Z27);           \
	ADDQ         $56, AX;           \
	ADDQ         $128, BX

// Prefetch the 14 rows of the C tile.
#define PREFETCHC14 \
	MOVQ       DX, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10);     \
	ADDQ       R8, R10;     \
	PREFETCHT0 (R10);       \
	PREFETCHT0 64(R10)

// Store a row: C = acc.
#define STORE14(lo, hi) \
	VMOVUPS lo, (DX);   \
	VMOVUPS hi, 64(DX); \
	ADDQ    R8, DX

// Update a row: C = acc + beta·C, beta broadcast in Z28.
#define UPDATE14(lo, hi)              \
	VFMADD231PS (DX), Z28, lo;    \
	VFMADD231PS 64(DX), Z28, hi;  \
	VMOVUPS     lo, (DX);         \
	VMOVUPS     hi, 64(DX);       \
	ADDQ        R8, DX

// func gemmTile14x32AVX512(k int, a, b, c *float32, ldc int, beta float32)
TEXT ·gemmTile14x32AVX512(SB), NOSPLIT, $0-44
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8

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
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27

	// Blocks of four steps: R11 of them, then the C prefetch, then the
	// last R9 (at most 4), so that C arrives in L1 just before the
	// epilogue instead of being evicted by the B stream.
	MOVQ CX, R9
	SHRQ $2, R9
	ANDQ $3, CX
	MOVQ R9, R11
	SUBQ $4, R11
	JLE  early14
	MOVQ $4, R9

head14:
	STEP14x32
	STEP14x32
	STEP14x32
	STEP14x32
	DECQ R11
	JNZ  head14
	PREFETCHC14
	JMP  loop14

early14:
	PREFETCHC14
	TESTQ R9, R9
	JZ    tail14

loop14:
	STEP14x32
	STEP14x32
	STEP14x32
	STEP14x32
	DECQ R9
	JNZ  loop14

tail14:
	TESTQ CX, CX
	JZ    done14

loop14tail:
	STEP14x32
	DECQ CX
	JNZ  loop14tail

done14:
	MOVL beta+40(FP), R10
	SHLL $1, R10          // drop the sign bit: ±0 → 0
	JZ   store14

	VBROADCASTSS beta+40(FP), Z28
	UPDATE14(Z0, Z1)
	UPDATE14(Z2, Z3)
	UPDATE14(Z4, Z5)
	UPDATE14(Z6, Z7)
	UPDATE14(Z8, Z9)
	UPDATE14(Z10, Z11)
	UPDATE14(Z12, Z13)
	UPDATE14(Z14, Z15)
	UPDATE14(Z16, Z17)
	UPDATE14(Z18, Z19)
	UPDATE14(Z20, Z21)
	UPDATE14(Z22, Z23)
	UPDATE14(Z24, Z25)
	UPDATE14(Z26, Z27)
	VZEROUPPER
	RET

store14:
	STORE14(Z0, Z1)
	STORE14(Z2, Z3)
	STORE14(Z4, Z5)
	STORE14(Z6, Z7)
	STORE14(Z8, Z9)
	STORE14(Z10, Z11)
	STORE14(Z12, Z13)
	STORE14(Z14, Z15)
	STORE14(Z16, Z17)
	STORE14(Z18, Z19)
	STORE14(Z20, Z21)
	STORE14(Z22, Z23)
	STORE14(Z24, Z25)
	STORE14(Z26, Z27)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// AVX2 + FMA, MR = 6, NR = 16.
//
// Registers:
//	Y0-Y11   accumulators: row i in Y(2i) (columns 0-7) and Y(2i+1) (8-15)
//	Y12, Y13 the current row of B
//	Y14, Y15 broadcast values of A, alternating between even and odd rows
//	AX a panel, BX b panel, DX c, R8 ldc in bytes, CX and R9 loop counters

#define FMA6(bc, lo, hi) \
	VFMADD231PS bc, Y12, lo; \
	VFMADD231PS bc, Y13, hi

#define STEP6x16 \
	VMOVUPS      (BX), Y12;   \
	VMOVUPS      32(BX), Y13; \
	VBROADCASTSS (AX), Y14;   \
	VBROADCASTSS 4(AX), Y15;  \
	FMA6(Y14, Y0, Y1);        \
	VBROADCASTSS 8(AX), Y14;  \
	FMA6(Y15, Y2, Y3);        \
	VBROADCASTSS 12(AX), Y15; \
	FMA6(Y14, Y4, Y5);        \
	VBROADCASTSS 16(AX), Y14; \
	FMA6(Y15, Y6, Y7);        \
	VBROADCASTSS 20(AX), Y15; \
	FMA6(Y14, Y8, Y9);        \
	FMA6(Y15, Y10, Y11);      \
	ADDQ         $24, AX;     \
	ADDQ         $64, BX

#define STORE6(lo, hi)    \
	VMOVUPS lo, (DX);   \
	VMOVUPS hi, 32(DX); \
	ADDQ    R8, DX

// C = acc + beta·C, beta broadcast in Y12.
#define UPDATE6(lo, hi)              \
	VFMADD231PS (DX), Y12, lo;   \
	VFMADD231PS 32(DX), Y12, hi; \
	VMOVUPS     lo, (DX);        \
	VMOVUPS     hi, 32(DX);      \
	ADDQ        R8, DX

// func gemmTile6x16AVX2(k int, a, b, c *float32, ldc int, beta float32)
TEXT ·gemmTile6x16AVX2(SB), NOSPLIT, $0-44
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8

	MOVQ DX, R10
	MOVQ $6, R9

prefetch6:
	PREFETCHT0 (R10)
	PREFETCHT0 63(R10)
	ADDQ       R8, R10
	DECQ       R9
	JNZ        prefetch6

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

	MOVQ CX, R9
	SHRQ $2, R9
	ANDQ  $3, CX
	TESTQ R9, R9
	JZ    tail6

loop6:
	STEP6x16
	STEP6x16
	STEP6x16
	STEP6x16
	DECQ R9
	JNZ  loop6

tail6:
	TESTQ CX, CX
	JZ    done6

loop6tail:
	STEP6x16
	DECQ CX
	JNZ  loop6tail

done6:
	MOVL beta+40(FP), R10
	SHLL $1, R10
	JZ   store6

	VBROADCASTSS beta+40(FP), Y12
	UPDATE6(Y0, Y1)
	UPDATE6(Y2, Y3)
	UPDATE6(Y4, Y5)
	UPDATE6(Y6, Y7)
	UPDATE6(Y8, Y9)
	UPDATE6(Y10, Y11)
	VZEROUPPER
	RET

store6:
	STORE6(Y0, Y1)
	STORE6(Y2, Y3)
	STORE6(Y4, Y5)
	STORE6(Y6, Y7)
	STORE6(Y8, Y9)
	STORE6(Y10, Y11)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Level-2 helpers for m == 1 or n == 1 (AVX2 + FMA).

// func gemmDotAVX2(x, y *float32, n int) float32
TEXT ·gemmDotAVX2(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), SI
	MOVQ   y+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

dot32:
	CMPQ        CX, $32
	JLT         dot8
	PREFETCHT0  2048(DI)
	PREFETCHT0  2112(DI)
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         dot32

dot8:
	CMPQ        CX, $8
	JLT         dotreduce
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         dot8

dotreduce:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVHLPS     X0, X0, X1
	VADDPS       X1, X0, X0
	VMOVSHDUP    X0, X1
	VADDSS       X1, X0, X0

dot1:
	TESTQ       CX, CX
	JZ          dotdone
	VMOVSS      (SI), X1
	VFMADD231SS (DI), X1, X0
	ADDQ        $4, SI
	ADDQ        $4, DI
	DECQ        CX
	JMP         dot1

dotdone:
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func gemmAxpyAVX2(alpha float32, x, y *float32, n int)
TEXT ·gemmAxpyAVX2(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Y0
	MOVQ         x+8(FP), SI
	MOVQ         y+16(FP), DI
	MOVQ         n+24(FP), CX

axpy32:
	CMPQ        CX, $32
	JLT         axpy8
	VMOVUPS     (DI), Y4
	VMOVUPS     32(DI), Y5
	VMOVUPS     64(DI), Y6
	VMOVUPS     96(DI), Y7
	VFMADD231PS (SI), Y0, Y4
	VFMADD231PS 32(SI), Y0, Y5
	VFMADD231PS 64(SI), Y0, Y6
	VFMADD231PS 96(SI), Y0, Y7
	VMOVUPS     Y4, (DI)
	VMOVUPS     Y5, 32(DI)
	VMOVUPS     Y6, 64(DI)
	VMOVUPS     Y7, 96(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         axpy32

axpy8:
	CMPQ        CX, $8
	JLT         axpy1
	VMOVUPS     (DI), Y4
	VFMADD231PS (SI), Y0, Y4
	VMOVUPS     Y4, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         axpy8

axpy1:
	TESTQ       CX, CX
	JZ          axpydone
	VMOVSS      (DI), X4
	VFMADD231SS (SI), X0, X4
	VMOVSS      X4, (DI)
	ADDQ        $4, SI
	ADDQ        $4, DI
	DECQ        CX
	JMP         axpy1

axpydone:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Packing for the AVX-512 kernel.

// func gemmPackA14TAVX512(dst, src *float32, lds, groups int, alpha float32)
// dst[p*14 + i] = alpha·src[i*lds + p] for i < 14, p < 16·groups: 14 rows
// of A become a packed A panel. Rows 14 and 15 of the transpose are
// don't-cares (Z15 holds alpha); the stores are masked to 14 lanes.
TEXT ·gemmPackA14TAVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ groups+24(FP), CX
	ROWSETUP
	MOVL $0x3FFF, AX
	KMOVW AX, K1
	TESTQ CX, CX
	JZ    packa14tdone

packa14tloop:
	VBROADCASTSS alpha+32(FP), Z15
	VMULPS (SI), Z15, Z0
	VMULPS (SI)(R8*1), Z15, Z1
	VMULPS (SI)(R8*2), Z15, Z2
	VMULPS (SI)(R9*1), Z15, Z3
	VMULPS (SI)(R8*4), Z15, Z4
	VMULPS (SI)(R10*1), Z15, Z5
	VMULPS (SI)(R9*2), Z15, Z6
	VMULPS (SI)(R11*1), Z15, Z7
	VMULPS (DI), Z15, Z8
	VMULPS (DI)(R8*1), Z15, Z9
	VMULPS (DI)(R8*2), Z15, Z10
	VMULPS (DI)(R9*1), Z15, Z11
	VMULPS (DI)(R8*4), Z15, Z12
	VMULPS (DI)(R10*1), Z15, Z13
	TRANSPOSE16
	VMOVUPS Z0, K1, (DX)
	VMOVUPS Z1, K1, 56(DX)
	VMOVUPS Z2, K1, 112(DX)
	VMOVUPS Z3, K1, 168(DX)
	VMOVUPS Z4, K1, 224(DX)
	VMOVUPS Z5, K1, 280(DX)
	VMOVUPS Z6, K1, 336(DX)
	VMOVUPS Z7, K1, 392(DX)
	VMOVUPS Z8, K1, 448(DX)
	VMOVUPS Z9, K1, 504(DX)
	VMOVUPS Z10, K1, 560(DX)
	VMOVUPS Z11, K1, 616(DX)
	VMOVUPS Z12, K1, 672(DX)
	VMOVUPS Z13, K1, 728(DX)
	VMOVUPS Z14, K1, 784(DX)
	VMOVUPS Z15, K1, 840(DX)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $896, DX
	DECQ CX
	JNZ  packa14tloop

packa14tdone:
	VZEROUPPER
	RET

// func gemmPackB16TAVX512(dst, src *float32, lds, groups int)
// dst[p*32 + j] = src[j*lds + p] for j < 16, p < 16·groups: 16 rows of a
// transposed B become half of a packed B panel.
TEXT ·gemmPackB16TAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ groups+24(FP), CX
	ROWSETUP
	TESTQ CX, CX
	JZ    packb16tdone

packb16tloop:
	VMOVUPS (SI), Z0
	VMOVUPS (SI)(R8*1), Z1
	VMOVUPS (SI)(R8*2), Z2
	VMOVUPS (SI)(R9*1), Z3
	VMOVUPS (SI)(R8*4), Z4
	VMOVUPS (SI)(R10*1), Z5
	VMOVUPS (SI)(R9*2), Z6
	VMOVUPS (SI)(R11*1), Z7
	VMOVUPS (DI), Z8
	VMOVUPS (DI)(R8*1), Z9
	VMOVUPS (DI)(R8*2), Z10
	VMOVUPS (DI)(R9*1), Z11
	VMOVUPS (DI)(R8*4), Z12
	VMOVUPS (DI)(R10*1), Z13
	VMOVUPS (DI)(R9*2), Z14
	VMOVUPS (DI)(R11*1), Z15
	TRANSPOSE16
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 128(DX)
	VMOVUPS Z2, 256(DX)
	VMOVUPS Z3, 384(DX)
	VMOVUPS Z4, 512(DX)
	VMOVUPS Z5, 640(DX)
	VMOVUPS Z6, 768(DX)
	VMOVUPS Z7, 896(DX)
	VMOVUPS Z8, 1024(DX)
	VMOVUPS Z9, 1152(DX)
	VMOVUPS Z10, 1280(DX)
	VMOVUPS Z11, 1408(DX)
	VMOVUPS Z12, 1536(DX)
	VMOVUPS Z13, 1664(DX)
	VMOVUPS Z14, 1792(DX)
	VMOVUPS Z15, 1920(DX)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $2048, DX
	DECQ CX
	JNZ  packb16tloop

packb16tdone:
	VZEROUPPER
	RET

// func gemmPackA14AVX512(dst, src *float32, lds, kc int, alpha float32)
// dst[p*14 + i] = alpha·src[p*lds + i] for i < 14, p < kc: a transposed A
// (stored K×M) is already in panel order, 14 floats per step.
TEXT ·gemmPackA14AVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ kc+24(FP), CX
	SHLQ $2, R8
	VBROADCASTSS alpha+32(FP), Z15
	MOVL $0x3FFF, AX
	KMOVW AX, K1
	LEAQ (R8)(R8*2), R9
	SHLQ $1, R9           // R9 = 6 rows ahead, in bytes
	TESTQ CX, CX
	JZ    packa14done

packa14loop:
	PREFETCHT0 (SI)(R9*1)
	PREFETCHT0 55(SI)(R9*1)
	VMOVUPS.Z (SI), K1, Z0
	VMULPS    Z15, Z0, Z0
	VMOVUPS   Z0, K1, (DX)
	ADDQ      R8, SI
	ADDQ      $56, DX
	DECQ      CX
	JNZ       packa14loop

packa14done:
	VZEROUPPER
	RET

// func gemmPackB32AVX512(dst, src *float32, lds, kc int)
// dst[p*32 + j] = src[p*lds + j] for j < 32, p < kc: rows of B copied into
// a packed B panel.
TEXT ·gemmPackB32AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ kc+24(FP), CX
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	SHLQ $1, R9           // R9 = 6 rows ahead, in bytes
	TESTQ CX, CX
	JZ    packb32done

packb32loop:
	PREFETCHT0 (SI)(R9*1)
	PREFETCHT0 64(SI)(R9*1)
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	ADDQ    R8, SI
	ADDQ    $128, DX
	DECQ    CX
	JNZ     packb32loop

packb32done:
	VZEROUPPER
	RET

// Packing bf16 operands for the AVX-512 kernel (the bf16 GEMM's portable
// path, gemmPackASrcAVX512 and gemmPackBSrcAVX512): the layouts whose
// panel rows are runs of the source, widened from BF16 (VPMOVZXWD, then
// the bf16 into the high half) or rounded from F32 (RNE16) as they are
// copied.

// func gemmPackB32BF16AVX512(dst *float32, src *uint16, lds, kc int)
// dst[p*32 + j] = FromBF16(src[p*lds + j]) for j < 32, p < kc.
TEXT ·gemmPackB32BF16AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ kc+24(FP), CX
	SHLQ $1, R8
	TESTQ CX, CX
	JZ    packb32hdone

packb32hloop:
	VPMOVZXWD (SI), Z0
	VPMOVZXWD 32(SI), Z1
	VPSLLD    $16, Z0, Z0
	VPSLLD    $16, Z1, Z1
	VMOVUPS   Z0, (DX)
	VMOVUPS   Z1, 64(DX)
	ADDQ      R8, SI
	ADDQ      $128, DX
	DECQ      CX
	JNZ       packb32hloop

packb32hdone:
	VZEROUPPER
	RET

// func gemmPackB32RoundAVX512(dst, src *float32, lds, kc int)
// dst[p*32 + j] = FromBF16(ToBF16(src[p*lds + j])) for j < 32, p < kc.
TEXT ·gemmPackB32RoundAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ kc+24(FP), CX
	SHLQ $2, R8
	RNECONSTS
	TESTQ CX, CX
	JZ    packb32rdone

packb32rloop:
	VMOVUPS   (SI), Z0
	VMOVUPS   64(SI), Z1
	RNE16(Z0)
	VPSLLD    $16, Z4, Z4
	VMOVUPS   Z4, (DX)
	RNE16(Z1)
	VPSLLD    $16, Z4, Z4
	VMOVUPS   Z4, 64(DX)
	ADDQ      R8, SI
	ADDQ      $128, DX
	DECQ      CX
	JNZ       packb32rloop

packb32rdone:
	VZEROUPPER
	RET

// func gemmPackA14BF16AVX512(dst *float32, src *uint16, lds, kc int, alpha float32)
// dst[p*14 + i] = alpha·FromBF16(src[p*lds + i]) for i < 14, p < kc (a
// transposed A, 14 values a step under a mask).
TEXT ·gemmPackA14BF16AVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ kc+24(FP), CX
	SHLQ $1, R8
	VBROADCASTSS alpha+32(FP), Z15
	MOVL $0x3FFF, AX
	KMOVW AX, K1
	TESTQ CX, CX
	JZ    packa14hdone

packa14hloop:
	VPMOVZXWD.Z (SI), K1, Z0
	VPSLLD      $16, Z0, Z0
	VMULPS      Z15, Z0, Z0
	VMOVUPS     Z0, K1, (DX)
	ADDQ        R8, SI
	ADDQ        $56, DX
	DECQ        CX
	JNZ         packa14hloop

packa14hdone:
	VZEROUPPER
	RET

// func gemmPackA14RoundAVX512(dst, src *float32, lds, kc int, alpha float32)
// dst[p*14 + i] = alpha·FromBF16(ToBF16(src[p*lds + i])) for i < 14,
// p < kc.
TEXT ·gemmPackA14RoundAVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ kc+24(FP), CX
	SHLQ $2, R8
	RNECONSTS
	VBROADCASTSS alpha+32(FP), Z15
	MOVL $0x3FFF, AX
	KMOVW AX, K1
	TESTQ CX, CX
	JZ    packa14rdone

packa14rloop:
	VMOVUPS.Z (SI), K1, Z0
	RNE16(Z0)
	VPSLLD    $16, Z4, Z4
	VMULPS    Z15, Z4, Z4
	VMOVUPS   Z4, K1, (DX)
	ADDQ      R8, SI
	ADDQ      $56, DX
	DECQ      CX
	JNZ       packa14rloop

packa14rdone:
	VZEROUPPER
	RET
