//go:build amd64

#include "textflag.h"

// AVX2+FMA primitives for the row kernels, for CPUs without AVX-512; see
// vec_amd64.go for the Go signatures. Each one does, lane for lane, the
// arithmetic of its AVX-512 twin in vec_amd64.s, so the two give
// bit-identical results:
//   - exp uses the same range reduction and polynomial, and scales by 2^n in
//     two exact-or-correctly-rounded steps where VSCALEFPS takes one;
//   - a 16-lane accumulator becomes a pair of 8-lane ones (low, high half),
//     added together first when reduced, which is VEXTRACTF64X4 + VADDPS;
//   - the exp sums keep the 64 lanes of the AVX-512 loop in 8 registers.

// VEC8 fills 32 bytes of avx2c<> at off with the 64-bit pattern v.
#define VEC8(off, v) \
	DATA avx2c<>+(off)(SB)/8, $v;    \
	DATA avx2c<>+(off+8)(SB)/8, $v;  \
	DATA avx2c<>+(off+16)(SB)/8, $v; \
	DATA avx2c<>+(off+24)(SB)/8, $v

VEC8(0, 0xc2d00000c2d00000)   // -104: below it exp rounds to 0
VEC8(32, 0x4300000043000000)  // 128: cap on n (exp overflows well before)
VEC8(64, 0x3fb8aa3b3fb8aa3b)  // log2(e)
VEC8(96, 0x3f3180003f318000)  // C1 = 0.693359375
VEC8(128, 0xb95e8083b95e8083) // C2 = -2.12194440e-4
VEC8(160, 0x3950696739506967) // P0
VEC8(192, 0x3ab743ce3ab743ce) // P1
VEC8(224, 0x3c0889083c088908) // P2
VEC8(256, 0x3d2aa9c13d2aa9c1) // P3
VEC8(288, 0x3e2aaaaa3e2aaaaa) // P4
VEC8(320, 0x3f0000003f000000) // P5
VEC8(352, 0x3f8000003f800000) // 1
VEC8(384, 0x0000007f0000007f) // 127 (int32): exponent bias
VEC8(416, 0xff800000ff800000) // -Inf
VEC8(448, 0xffffffffffffffff) // tail masks: 8 lanes set ...
VEC8(480, 0x0000000000000000) // ... then 8 clear
GLOBL avx2c<>(SB), RODATA|NOPTR, $512

// TAILMASKY sets y to a mask of the low CX lanes (0 < CX < 8); clobbers R10.
#define TAILMASKY(y) \
	LEAQ    avx2c<>+480(SB), R10; \
	SHLQ    $2, CX;               \
	SUBQ    CX, R10;              \
	SHRQ    $2, CX;               \
	VMOVUPS (R10), y

// EXPCONSTY loads the exp constants kept in registers: Y4 = -104,
// Y5 = log2(e), Y6 = C1, Y7 = 1.
#define EXPCONSTY \
	VMOVUPS avx2c<>+0(SB), Y4;  \
	VMOVUPS avx2c<>+64(SB), Y5; \
	VMOVUPS avx2c<>+96(SB), Y6; \
	VMOVUPS avx2c<>+352(SB), Y7

// EXPY sets x = exp(x) using n and t as scratch, step for step as EXPZ in
// vec_amd64.s. VSCALEFPS(t, n) becomes (t·2^n1)·2^n2 with n1 = n>>1,
// n2 = n-n1, both in [-75, 64] as n is in [-150, 128]: the first product
// is exact and the second rounds once, like VSCALEFPS, subnormals included.
// n is capped at 128, which changes nothing (exp is +Inf there either way)
// but keeps the exponent arithmetic in range; NaN propagates through t.
#define EXPY(x, n, t) \
	VMAXPS       x, Y4, x;                \
	VMULPS       Y5, x, n;                \
	VROUNDPS     $0, n, n;                \
	VMINPS       avx2c<>+32(SB), n, n;    \
	VFNMADD231PS Y6, n, x;                \
	VFNMADD231PS avx2c<>+128(SB), n, x;   \
	VCVTPS2DQ    n, n;                    \
	VMOVUPS      avx2c<>+160(SB), t;      \
	VFMADD213PS  avx2c<>+192(SB), x, t;   \
	VFMADD213PS  avx2c<>+224(SB), x, t;   \
	VFMADD213PS  avx2c<>+256(SB), x, t;   \
	VFMADD213PS  avx2c<>+288(SB), x, t;   \
	VFMADD213PS  avx2c<>+320(SB), x, t;   \
	VFMADD213PS  Y7, x, t;                \
	VFMADD213PS  Y7, x, t;                \
	VPSRAD       $1, n, x;                \
	VPSUBD       x, n, n;                 \
	VPADDD       avx2c<>+384(SB), x, x;   \
	VPADDD       avx2c<>+384(SB), n, n;   \
	VPSLLD       $23, x, x;               \
	VPSLLD       $23, n, n;               \
	VMULPS       x, t, t;                 \
	VMULPS       n, t, x

// EXPACC sets Y0 = exp(Y0 - m) (m in Y3) and adds it to acc.
#define EXPACC(acc) \
	VSUBPS Y3, Y0, Y0;  \
	EXPY(Y0, Y1, Y2);   \
	VADDPS Y0, acc, acc

// HSUMY0 sums the 8 lanes of Y0 into X0 (clobbers X1) as HSUM0 does after
// its first step: ((b0+b1)+(b2+b3)) + ((b4+b5)+(b6+b7)).
#define HSUMY0 \
	VHADDPS      Y0, Y0, Y0; \
	VHADDPS      Y0, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0

// func maxAVX2(x []float32) float32
TEXT ·maxAVX2(SB), NOSPLIT, $0-28
	MOVQ    x_base+0(FP), SI
	MOVQ    x_len+8(FP), CX
	VMOVUPS avx2c<>+416(SB), Y6
	VMOVAPS Y6, Y0
	VMOVAPS Y6, Y1
	VMOVAPS Y6, Y2
	VMOVAPS Y6, Y3

max32:
	CMPQ   CX, $32
	JLT    max8
	VMAXPS (SI), Y0, Y0
	VMAXPS 32(SI), Y1, Y1
	VMAXPS 64(SI), Y2, Y2
	VMAXPS 96(SI), Y3, Y3
	ADDQ   $128, SI
	SUBQ   $32, CX
	JMP    max32

max8:
	CMPQ   CX, $8
	JLT    maxtail
	VMAXPS (SI), Y0, Y0
	ADDQ   $32, SI
	SUBQ   $8, CX
	JMP    max8

maxtail:
	TESTQ      CX, CX
	JEQ        maxreduce
	TAILMASKY(Y5)
	VMASKMOVPS (SI), Y5, Y4
	VBLENDVPS  Y5, Y4, Y6, Y4
	VMAXPS     Y4, Y0, Y0

maxreduce:
	VMAXPS       Y1, Y0, Y0
	VMAXPS       Y3, Y2, Y2
	VMAXPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VZEROUPPER
	VMOVSS       X0, ret+24(FP)
	RET

// func expSumAVX2(x []float32, m float32) float32
// Accumulators Y8..Y15 are the lanes 0-7, 8-15, ..., 56-63 of the AVX-512
// loop's Z12..Z15; lanes 0-15 (Z12) also take the 16-wide steps and the tail.
TEXT ·expSumAVX2(SB), NOSPLIT, $0-36
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	VBROADCASTSS m+24(FP), Y3
	EXPCONSTY
	VXORPS       Y8, Y8, Y8
	VXORPS       Y9, Y9, Y9
	VXORPS       Y10, Y10, Y10
	VXORPS       Y11, Y11, Y11
	VXORPS       Y12, Y12, Y12
	VXORPS       Y13, Y13, Y13
	VXORPS       Y14, Y14, Y14
	VXORPS       Y15, Y15, Y15

es64:
	CMPQ    CX, $64
	JLT     es16
	VMOVUPS (SI), Y0
	EXPACC(Y8)
	VMOVUPS 32(SI), Y0
	EXPACC(Y9)
	VMOVUPS 64(SI), Y0
	EXPACC(Y10)
	VMOVUPS 96(SI), Y0
	EXPACC(Y11)
	VMOVUPS 128(SI), Y0
	EXPACC(Y12)
	VMOVUPS 160(SI), Y0
	EXPACC(Y13)
	VMOVUPS 192(SI), Y0
	EXPACC(Y14)
	VMOVUPS 224(SI), Y0
	EXPACC(Y15)
	ADDQ    $256, SI
	SUBQ    $64, CX
	JMP     es64

es16:
	CMPQ    CX, $16
	JLT     estail
	VMOVUPS (SI), Y0
	EXPACC(Y8)
	VMOVUPS 32(SI), Y0
	EXPACC(Y9)
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     es16

estail:
	// 0 <= CX < 16: a full 8 into Y8 if there are 8, the rest, masked,
	// into the next register (DX = 1: Y9).
	XORQ    DX, DX
	CMPQ    CX, $8
	JLT     esmask
	VMOVUPS (SI), Y0
	EXPACC(Y8)
	ADDQ    $32, SI
	SUBQ    $8, CX
	MOVQ    $1, DX

esmask:
	TESTQ      CX, CX
	JEQ        esreduce
	TAILMASKY(Y1)
	VMASKMOVPS (SI), Y1, Y0
	VSUBPS     Y3, Y0, Y0
	EXPY(Y0, Y1, Y2)
	VANDPS     (R10), Y0, Y0
	TESTQ      DX, DX
	JNE        esmaskhi
	VADDPS     Y0, Y8, Y8
	JMP        esreduce

esmaskhi:
	VADDPS Y0, Y9, Y9

esreduce:
	VADDPS Y10, Y8, Y8
	VADDPS Y11, Y9, Y9
	VADDPS Y14, Y12, Y12
	VADDPS Y15, Y13, Y13
	VADDPS Y12, Y8, Y8
	VADDPS Y13, Y9, Y9
	VADDPS Y9, Y8, Y0
	HSUMY0
	VZEROUPPER
	VMOVSS X0, ret+32(FP)
	RET

// EXPST sets Y0 = exp(Y0 - m), stores it at p and adds it to acc.
#define EXPST(p, acc) \
	VSUBPS  Y3, Y0, Y0; \
	EXPY(Y0, Y1, Y2);   \
	VMOVUPS Y0, p;      \
	VADDPS  Y0, acc, acc

// func expStoreAVX2(dst, x []float32, m float32) float32
TEXT ·expStoreAVX2(SB), NOSPLIT, $0-60
	MOVQ         dst_base+0(FP), DI
	MOVQ         x_base+24(FP), SI
	MOVQ         x_len+32(FP), CX
	VBROADCASTSS m+48(FP), Y3
	EXPCONSTY
	VXORPS       Y8, Y8, Y8
	VXORPS       Y9, Y9, Y9
	VXORPS       Y10, Y10, Y10
	VXORPS       Y11, Y11, Y11
	VXORPS       Y12, Y12, Y12
	VXORPS       Y13, Y13, Y13
	VXORPS       Y14, Y14, Y14
	VXORPS       Y15, Y15, Y15

est64:
	CMPQ    CX, $64
	JLT     est16
	VMOVUPS (SI), Y0
	EXPST((DI), Y8)
	VMOVUPS 32(SI), Y0
	EXPST(32(DI), Y9)
	VMOVUPS 64(SI), Y0
	EXPST(64(DI), Y10)
	VMOVUPS 96(SI), Y0
	EXPST(96(DI), Y11)
	VMOVUPS 128(SI), Y0
	EXPST(128(DI), Y12)
	VMOVUPS 160(SI), Y0
	EXPST(160(DI), Y13)
	VMOVUPS 192(SI), Y0
	EXPST(192(DI), Y14)
	VMOVUPS 224(SI), Y0
	EXPST(224(DI), Y15)
	ADDQ    $256, SI
	ADDQ    $256, DI
	SUBQ    $64, CX
	JMP     est64

est16:
	CMPQ    CX, $16
	JLT     esttail
	VMOVUPS (SI), Y0
	EXPST((DI), Y8)
	VMOVUPS 32(SI), Y0
	EXPST(32(DI), Y9)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     est16

esttail:
	XORQ    DX, DX
	CMPQ    CX, $8
	JLT     estmask
	VMOVUPS (SI), Y0
	EXPST((DI), Y8)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	MOVQ    $1, DX

estmask:
	TESTQ      CX, CX
	JEQ        estreduce
	TAILMASKY(Y1)
	VMASKMOVPS (SI), Y1, Y0
	VSUBPS     Y3, Y0, Y0
	EXPY(Y0, Y1, Y2)
	VMOVUPS    (R10), Y1
	VMASKMOVPS Y0, Y1, (DI)
	VANDPS     Y1, Y0, Y0
	TESTQ      DX, DX
	JNE        estmaskhi
	VADDPS     Y0, Y8, Y8
	JMP        estreduce

estmaskhi:
	VADDPS Y0, Y9, Y9

estreduce:
	VADDPS Y10, Y8, Y8
	VADDPS Y11, Y9, Y9
	VADDPS Y14, Y12, Y12
	VADDPS Y15, Y13, Y13
	VADDPS Y12, Y8, Y8
	VADDPS Y13, Y9, Y9
	VADDPS Y9, Y8, Y0
	HSUMY0
	VZEROUPPER
	VMOVSS X0, ret+56(FP)
	RET

// func scaleAVX2(x []float32, s float32)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-28
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	VBROADCASTSS s+24(FP), Y8

sc32:
	CMPQ    CX, $32
	JLT     sc8
	VMULPS  (SI), Y8, Y0
	VMULPS  32(SI), Y8, Y1
	VMULPS  64(SI), Y8, Y2
	VMULPS  96(SI), Y8, Y3
	VMOVUPS Y0, (SI)
	VMOVUPS Y1, 32(SI)
	VMOVUPS Y2, 64(SI)
	VMOVUPS Y3, 96(SI)
	ADDQ    $128, SI
	SUBQ    $32, CX
	JMP     sc32

sc8:
	CMPQ    CX, $8
	JLT     sctail
	VMULPS  (SI), Y8, Y0
	VMOVUPS Y0, (SI)
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     sc8

sctail:
	TESTQ      CX, CX
	JEQ        scdone
	TAILMASKY(Y5)
	VMASKMOVPS (SI), Y5, Y0
	VMULPS     Y8, Y0, Y0
	VMASKMOVPS Y0, Y5, (SI)

scdone:
	VZEROUPPER
	RET

// RED4Y reduces four keys' low/high accumulator pairs (a0,a1) .. (d0,d1)
// to the sums [a b c d] in xa exactly as RED4 does; clobbers the others.
#define RED4Y(a0, a1, b0, b1, c0, c1, d0, d1, xa, xb, ya) \
	VADDPS       a1, a0, a0; \
	VADDPS       b1, b0, b0; \
	VADDPS       c1, c0, c0; \
	VADDPS       d1, d0, d0; \
	VHADDPS      b0, a0, a0; \
	VHADDPS      d0, c0, c0; \
	VHADDPS      c0, a0, a0; \
	VEXTRACTF128 $1, ya, xb; \
	VADDPS       xb, xa, xa

// func dotsAVX2(dst []float32, q, k *float32, stride, hs int)
// Four keys at a time, as dotsAVX512, with a low/high accumulator pair
// (Y2j, Y2j+1) per key.
TEXT ·dotsAVX2(SB), NOSPLIT, $0-56
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ q+24(FP), SI
	MOVQ k+32(FP), BX
	MOVQ stride+40(FP), DX
	SHLQ $2, DX
	MOVQ hs+48(FP), R8
	SHLQ $2, R8
	LEAQ (DX)(DX*2), R12

dots4:
	CMPQ   CX, $4
	JLT    dots1
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ   AX, AX
	LEAQ   (BX)(DX*1), R9
	LEAQ   (BX)(DX*2), R10
	LEAQ   (BX)(R12*1), R11

dots4inner:
	VMOVUPS     (SI)(AX*1), Y8
	VMOVUPS     32(SI)(AX*1), Y9
	VFMADD231PS (BX)(AX*1), Y8, Y0
	VFMADD231PS 32(BX)(AX*1), Y9, Y1
	VFMADD231PS (R9)(AX*1), Y8, Y2
	VFMADD231PS 32(R9)(AX*1), Y9, Y3
	VFMADD231PS (R10)(AX*1), Y8, Y4
	VFMADD231PS 32(R10)(AX*1), Y9, Y5
	VFMADD231PS (R11)(AX*1), Y8, Y6
	VFMADD231PS 32(R11)(AX*1), Y9, Y7
	ADDQ        $64, AX
	CMPQ        AX, R8
	JLT         dots4inner
	RED4Y(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, X0, X1, Y0)
	VMOVUPS     X0, (DI)
	ADDQ        $16, DI
	LEAQ        (BX)(DX*4), BX
	SUBQ        $4, CX
	JMP         dots4

dots1:
	TESTQ  CX, CX
	JEQ    dotsdone
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ   AX, AX

dots1inner:
	VMOVUPS     (SI)(AX*1), Y8
	VMOVUPS     32(SI)(AX*1), Y9
	VFMADD231PS (BX)(AX*1), Y8, Y0
	VFMADD231PS 32(BX)(AX*1), Y9, Y1
	ADDQ        $64, AX
	CMPQ        AX, R8
	JLT         dots1inner
	VADDPS      Y1, Y0, Y0
	HSUMY0
	VMOVSS      X0, (DI)
	ADDQ        $4, DI
	ADDQ        DX, BX
	DECQ        CX
	JMP         dots1

dotsdone:
	VZEROUPPER
	RET

// func gemvTAVX2(out *float32, p []float32, v *float32, stride, hs int)
// One accumulator per 8 columns, keys in order: per column the arithmetic
// of gemvTAVX512 and gemvT4AVX2.
TEXT ·gemvTAVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ v+32(FP), BX
	MOVQ stride+40(FP), DX
	SHLQ $2, DX
	MOVQ hs+48(FP), R8

gblock64:
	CMPQ    R8, $64
	JLT     gblock16
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7
	MOVQ    BX, R9
	XORQ    AX, AX

g64loop:
	CMPQ         AX, CX
	JGE          g64done
	VBROADCASTSS (SI)(AX*4), Y8
	VFMADD231PS  (R9), Y8, Y0
	VFMADD231PS  32(R9), Y8, Y1
	VFMADD231PS  64(R9), Y8, Y2
	VFMADD231PS  96(R9), Y8, Y3
	VFMADD231PS  128(R9), Y8, Y4
	VFMADD231PS  160(R9), Y8, Y5
	VFMADD231PS  192(R9), Y8, Y6
	VFMADD231PS  224(R9), Y8, Y7
	ADDQ         DX, R9
	INCQ         AX
	JMP          g64loop

g64done:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	ADDQ    $256, DI
	ADDQ    $256, BX
	SUBQ    $64, R8
	JMP     gblock64

gblock16:
	CMPQ    R8, $16
	JLT     gdone
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	MOVQ    BX, R9
	XORQ    AX, AX

g16loop:
	CMPQ         AX, CX
	JGE          g16done
	VBROADCASTSS (SI)(AX*4), Y8
	VFMADD231PS  (R9), Y8, Y0
	VFMADD231PS  32(R9), Y8, Y1
	ADDQ         DX, R9
	INCQ         AX
	JMP          g16loop

g16done:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    $64, DI
	ADDQ    $64, BX
	SUBQ    $16, R8
	JMP     gblock16

gdone:
	VZEROUPPER
	RET

// RANK1Y adds a·x to the 8 floats at off(R9): a in Y8, x in xr, t scratch.
#define RANK1Y(off, xr, t) \
	VMOVUPS     off(R9), t; \
	VFMADD231PS xr, Y8, t;  \
	VMOVUPS     t, off(R9)

// func rank1AVX2(dst *float32, stride int, a []float32, x *float32, hs int)
TEXT ·rank1AVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), DX
	SHLQ $2, DX
	MOVQ a_base+16(FP), SI
	MOVQ a_len+24(FP), CX
	MOVQ x+40(FP), BX
	MOVQ hs+48(FP), R8

rblock64:
	CMPQ    R8, $64
	JLT     rblock16
	VMOVUPS (BX), Y0
	VMOVUPS 32(BX), Y1
	VMOVUPS 64(BX), Y2
	VMOVUPS 96(BX), Y3
	VMOVUPS 128(BX), Y4
	VMOVUPS 160(BX), Y5
	VMOVUPS 192(BX), Y6
	VMOVUPS 224(BX), Y7
	MOVQ    DI, R9
	XORQ    AX, AX

r64loop:
	CMPQ         AX, CX
	JGE          r64done
	VBROADCASTSS (SI)(AX*4), Y8
	RANK1Y(0, Y0, Y9)
	RANK1Y(32, Y1, Y10)
	RANK1Y(64, Y2, Y11)
	RANK1Y(96, Y3, Y12)
	RANK1Y(128, Y4, Y13)
	RANK1Y(160, Y5, Y14)
	RANK1Y(192, Y6, Y15)
	RANK1Y(224, Y7, Y9)
	ADDQ         DX, R9
	INCQ         AX
	JMP          r64loop

r64done:
	ADDQ $256, DI
	ADDQ $256, BX
	SUBQ $64, R8
	JMP  rblock64

rblock16:
	CMPQ    R8, $16
	JLT     rdone
	VMOVUPS (BX), Y0
	VMOVUPS 32(BX), Y1
	MOVQ    DI, R9
	XORQ    AX, AX

r16loop:
	CMPQ         AX, CX
	JGE          r16done
	VBROADCASTSS (SI)(AX*4), Y8
	RANK1Y(0, Y0, Y9)
	RANK1Y(32, Y1, Y10)
	ADDQ         DX, R9
	INCQ         AX
	JMP          r16loop

r16done:
	ADDQ $64, DI
	ADDQ $64, BX
	SUBQ $16, R8
	JMP  rblock16

rdone:
	VZEROUPPER
	RET

// D4STEP accumulates, at byte offset AX, the products of the 8 floats of
// queries R9..R12 with those of keys BX (Y8) and SI (Y9) into Y0..Y7
// (query r, key j: Y(2r+j)).
#define D4STEP \
	VMOVUPS     (BX)(AX*1), Y8;  \
	VMOVUPS     (SI)(AX*1), Y9;  \
	VMOVUPS     (R9)(AX*1), Y10; \
	VFMADD231PS Y8, Y10, Y0;     \
	VFMADD231PS Y9, Y10, Y1;     \
	VMOVUPS     (R10)(AX*1), Y11; \
	VFMADD231PS Y8, Y11, Y2;     \
	VFMADD231PS Y9, Y11, Y3;     \
	VMOVUPS     (R11)(AX*1), Y12; \
	VFMADD231PS Y8, Y12, Y4;     \
	VFMADD231PS Y9, Y12, Y5;     \
	VMOVUPS     (R12)(AX*1), Y13; \
	VFMADD231PS Y8, Y13, Y6;     \
	VFMADD231PS Y9, Y13, Y7

#define ZERO8 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7

// func dots4AVX2(dst *float32, ldd int, q *float32, ldq int, k *float32, ldk int, n, hs int)
// Four queries by two keys: the 8 dot products need 16 half-accumulators,
// one more than there are registers, so the low halves (lanes 0-7 of each
// 16) run first and wait on the stack while the high halves run. Each
// product is accumulated and reduced exactly as dotsAVX2 does it.
TEXT ·dots4AVX2(SB), NOSPLIT, $256-64
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R13
	SHLQ $2, R13
	LEAQ (R13)(R13*2), R14
	MOVQ q+16(FP), R9
	MOVQ ldq+24(FP), AX
	SHLQ $2, AX
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	LEAQ (R11)(AX*1), R12
	MOVQ k+32(FP), BX
	MOVQ ldk+40(FP), DX
	SHLQ $2, DX
	MOVQ n+48(FP), CX
	MOVQ hs+56(FP), R8
	SHLQ $2, R8

d4block:
	CMPQ CX, $2
	JLT  d4single
	LEAQ (BX)(DX*1), SI
	ZERO8
	XORQ AX, AX

d4lo:
	D4STEP
	ADDQ    $64, AX
	CMPQ    AX, R8
	JLT     d4lo
	VMOVUPS Y0, 0(SP)
	VMOVUPS Y1, 32(SP)
	VMOVUPS Y2, 64(SP)
	VMOVUPS Y3, 96(SP)
	VMOVUPS Y4, 128(SP)
	VMOVUPS Y5, 160(SP)
	VMOVUPS Y6, 192(SP)
	VMOVUPS Y7, 224(SP)
	ZERO8
	MOVQ    $32, AX

d4hi:
	D4STEP
	ADDQ         $64, AX
	CMPQ         AX, R8
	JLT          d4hi
	VADDPS       0(SP), Y0, Y0
	VADDPS       32(SP), Y1, Y1
	VADDPS       64(SP), Y2, Y2
	VADDPS       96(SP), Y3, Y3
	VADDPS       128(SP), Y4, Y4
	VADDPS       160(SP), Y5, Y5
	VADDPS       192(SP), Y6, Y6
	VADDPS       224(SP), Y7, Y7
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      Y5, Y4, Y4
	VHADDPS      Y7, Y6, Y6
	VHADDPS      Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS       X5, X4, X4
	VMOVLPS      X0, (DI)
	VMOVHPS      X0, (DI)(R13*1)
	VMOVLPS      X4, (DI)(R13*2)
	VMOVHPS      X4, (DI)(R14*1)
	ADDQ         $8, DI
	LEAQ         (BX)(DX*2), BX
	SUBQ         $2, CX
	JMP          d4block

d4single:
	TESTQ CX, CX
	JEQ   d4done
	ZERO8
	XORQ  AX, AX

d4sinner:
	VMOVUPS     (BX)(AX*1), Y8
	VMOVUPS     32(BX)(AX*1), Y9
	VFMADD231PS (R9)(AX*1), Y8, Y0
	VFMADD231PS 32(R9)(AX*1), Y9, Y1
	VFMADD231PS (R10)(AX*1), Y8, Y2
	VFMADD231PS 32(R10)(AX*1), Y9, Y3
	VFMADD231PS (R11)(AX*1), Y8, Y4
	VFMADD231PS 32(R11)(AX*1), Y9, Y5
	VFMADD231PS (R12)(AX*1), Y8, Y6
	VFMADD231PS 32(R12)(AX*1), Y9, Y7
	ADDQ        $64, AX
	CMPQ        AX, R8
	JLT         d4sinner
	RED4Y(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, X0, X1, Y0)
	VMOVSS      X0, (DI)
	VEXTRACTPS  $1, X0, (DI)(R13*1)
	VEXTRACTPS  $2, X0, (DI)(R13*2)
	VEXTRACTPS  $3, X0, (DI)(R14*1)

d4done:
	VZEROUPPER
	RET

// func gemvT4AVX2(out *float32, ldo int, p *float32, ldp int, v *float32, ldv int, n, hs int)
// 16 columns of the four rows at a time; per row the arithmetic of
// gemvTAVX2.
TEXT ·gemvT4AVX2(SB), NOSPLIT, $0-64
	MOVQ out+0(FP), DI
	MOVQ ldo+8(FP), R13
	SHLQ $2, R13
	LEAQ (R13)(R13*2), R14
	MOVQ p+16(FP), SI
	MOVQ ldp+24(FP), AX
	SHLQ $2, AX
	LEAQ (SI)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	MOVQ v+32(FP), BX
	MOVQ ldv+40(FP), DX
	SHLQ $2, DX
	MOVQ n+48(FP), CX
	MOVQ hs+56(FP), R8

g4block:
	CMPQ    R8, $16
	JLT     g4done
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS (DI)(R13*1), Y2
	VMOVUPS 32(DI)(R13*1), Y3
	VMOVUPS (DI)(R13*2), Y4
	VMOVUPS 32(DI)(R13*2), Y5
	VMOVUPS (DI)(R14*1), Y6
	VMOVUPS 32(DI)(R14*1), Y7
	MOVQ    BX, R12
	XORQ    AX, AX

g4loop:
	CMPQ         AX, CX
	JGE          g4store
	VMOVUPS      (R12), Y8
	VMOVUPS      32(R12), Y9
	VBROADCASTSS (SI)(AX*4), Y10
	VBROADCASTSS (R9)(AX*4), Y11
	VBROADCASTSS (R10)(AX*4), Y12
	VBROADCASTSS (R11)(AX*4), Y13
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ         DX, R12
	INCQ         AX
	JMP          g4loop

g4store:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, (DI)(R13*1)
	VMOVUPS Y3, 32(DI)(R13*1)
	VMOVUPS Y4, (DI)(R13*2)
	VMOVUPS Y5, 32(DI)(R13*2)
	VMOVUPS Y6, (DI)(R14*1)
	VMOVUPS Y7, 32(DI)(R14*1)
	ADDQ    $64, DI
	ADDQ    $64, BX
	SUBQ    $16, R8
	JMP     g4block

g4done:
	VZEROUPPER
	RET

// func rank4AVX2(dst *float32, ldd int, a *float32, lda int, x *float32, ldx int, n, hs int)
// 16 columns at a time: the four rows of x there in Y0..Y7, each row of dst
// gets a0·x0, a1·x1, a2·x2, a3·x3 in turn, as from four rank1AVX2 calls.
TEXT ·rank4AVX2(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), DX
	SHLQ $2, DX
	MOVQ a+16(FP), SI
	MOVQ lda+24(FP), AX
	SHLQ $2, AX
	LEAQ (SI)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	MOVQ x+32(FP), BX
	MOVQ ldx+40(FP), R13
	SHLQ $2, R13
	LEAQ (R13)(R13*2), R14
	MOVQ n+48(FP), CX
	MOVQ hs+56(FP), R8

r4block:
	CMPQ    R8, $16
	JLT     r4done
	VMOVUPS (BX), Y0
	VMOVUPS 32(BX), Y1
	VMOVUPS (BX)(R13*1), Y2
	VMOVUPS 32(BX)(R13*1), Y3
	VMOVUPS (BX)(R13*2), Y4
	VMOVUPS 32(BX)(R13*2), Y5
	VMOVUPS (BX)(R14*1), Y6
	VMOVUPS 32(BX)(R14*1), Y7
	MOVQ    DI, R12
	XORQ    AX, AX

r4loop:
	CMPQ         AX, CX
	JGE          r4next
	VBROADCASTSS (SI)(AX*4), Y8
	VBROADCASTSS (R9)(AX*4), Y9
	VBROADCASTSS (R10)(AX*4), Y10
	VBROADCASTSS (R11)(AX*4), Y11
	VMOVUPS      (R12), Y12
	VMOVUPS      32(R12), Y13
	VFMADD231PS  Y0, Y8, Y12
	VFMADD231PS  Y1, Y8, Y13
	VFMADD231PS  Y2, Y9, Y12
	VFMADD231PS  Y3, Y9, Y13
	VFMADD231PS  Y4, Y10, Y12
	VFMADD231PS  Y5, Y10, Y13
	VFMADD231PS  Y6, Y11, Y12
	VFMADD231PS  Y7, Y11, Y13
	VMOVUPS      Y12, (R12)
	VMOVUPS      Y13, 32(R12)
	ADDQ         DX, R12
	INCQ         AX
	JMP          r4loop

r4next:
	ADDQ $64, DI
	ADDQ $64, BX
	SUBQ $16, R8
	JMP  r4block

r4done:
	VZEROUPPER
	RET

// RELU4(off) sets 32 bytes of dst at off to the lanes of x at off that are
// not below zero (VCMPPS NLT_UQ: a NaN and -0 are kept), others to +0.
#define RELU4(off) \
	VMOVUPS off(SI), Y0;         \
	VCMPPS  $0x15, Y8, Y0, Y1;   \
	VANDPS  Y0, Y1, Y1;          \
	VMOVUPS Y1, off(DI)

// func reluAVX2(dst, x []float32); len(x)%8 == 0, len(dst) >= len(x).
TEXT ·reluAVX2(SB), NOSPLIT, $0-48
	MOVQ   dst_base+0(FP), DI
	MOVQ   x_base+24(FP), SI
	MOVQ   x_len+32(FP), CX
	VXORPS Y8, Y8, Y8

relu32:
	CMPQ CX, $32
	JLT  relu8
	RELU4(0)
	RELU4(32)
	RELU4(64)
	RELU4(96)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  relu32

relu8:
	CMPQ CX, $8
	JLT  reludone
	RELU4(0)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  relu8

reludone:
	VZEROUPPER
	RET

// RELUGRAD4(off) sets 32 bytes of dx at off to the lanes of dy whose y is
// above zero (VCMPPS GT_OQ: a NaN y gives +0), others to +0.
#define RELUGRAD4(off) \
	VMOVUPS off(BX), Y0;         \
	VCMPPS  $0x1e, Y8, Y0, Y1;   \
	VANDPS  off(SI), Y1, Y1;     \
	VMOVUPS Y1, off(DI)

// func reluGradAVX2(dx, dy, y []float32); len(y)%8 == 0, dx and dy at least
// as long; dx may be dy.
TEXT ·reluGradAVX2(SB), NOSPLIT, $0-72
	MOVQ   dx_base+0(FP), DI
	MOVQ   dy_base+24(FP), SI
	MOVQ   y_base+48(FP), BX
	MOVQ   y_len+56(FP), CX
	VXORPS Y8, Y8, Y8

rgrad32:
	CMPQ CX, $32
	JLT  rgrad8
	RELUGRAD4(0)
	RELUGRAD4(32)
	RELUGRAD4(64)
	RELUGRAD4(96)
	ADDQ $128, SI
	ADDQ $128, DI
	ADDQ $128, BX
	SUBQ $32, CX
	JMP  rgrad32

rgrad8:
	CMPQ CX, $8
	JLT  rgraddone
	RELUGRAD4(0)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, BX
	SUBQ $8, CX
	JMP  rgrad8

rgraddone:
	VZEROUPPER
	RET
