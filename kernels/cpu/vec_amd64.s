//go:build amd64

#include "textflag.h"

// AVX-512F primitives for the row kernels; see vec_amd64.go for the Go
// signatures and vec.go for the portable versions they must agree with.

// Constants of the vector exp (Cephes expf, as in vec.go).
DATA expc<>+0(SB)/4, $0xc2d00000  // -104: below it exp rounds to 0
DATA expc<>+4(SB)/4, $0x3fb8aa3b  // log2(e)
DATA expc<>+8(SB)/4, $0x3f318000  // C1 = 0.693359375
DATA expc<>+12(SB)/4, $0xb95e8083 // C2 = -2.12194440e-4
DATA expc<>+16(SB)/4, $0x39506967 // P0
DATA expc<>+20(SB)/4, $0x3ab743ce // P1
DATA expc<>+24(SB)/4, $0x3c088908 // P2
DATA expc<>+28(SB)/4, $0x3d2aa9c1 // P3
DATA expc<>+32(SB)/4, $0x3e2aaaaa // P4
DATA expc<>+36(SB)/4, $0x3f000000 // P5
DATA expc<>+40(SB)/4, $0x3f800000 // 1
DATA expc<>+44(SB)/4, $0x43000000 // 128: cap on n
GLOBL expc<>(SB), RODATA|NOPTR, $48

// EXPCONST loads the exp constants into Z16..Z26 and Z28.
#define EXPCONST \
	VBROADCASTSS expc<>+0(SB), Z16;  \
	VBROADCASTSS expc<>+4(SB), Z17;  \
	VBROADCASTSS expc<>+8(SB), Z18;  \
	VBROADCASTSS expc<>+12(SB), Z19; \
	VBROADCASTSS expc<>+16(SB), Z20; \
	VBROADCASTSS expc<>+20(SB), Z21; \
	VBROADCASTSS expc<>+24(SB), Z22; \
	VBROADCASTSS expc<>+28(SB), Z23; \
	VBROADCASTSS expc<>+32(SB), Z24; \
	VBROADCASTSS expc<>+36(SB), Z25; \
	VBROADCASTSS expc<>+40(SB), Z26; \
	VBROADCASTSS expc<>+44(SB), Z28

// EXPZ sets x = exp(x) using n and t as scratch; NaN propagates, inputs
// below -104 (and -Inf) give 0, the result is scaled with VSCALEFPS so
// subnormal results and overflow to +Inf come out right. n is capped at 128,
// which changes no result (exp is +Inf from x = 88.73 on) but keeps huge x
// (above about 9e7, where n·C1 is no longer exact) from reducing to an r
// whose polynomial is negative, and the result -Inf.
#define EXPZ(x, n, t) \
	VMAXPS       x, Z16, x; \
	VMULPS       Z17, x, n; \
	VRNDSCALEPS  $0, n, n;  \
	VMINPS       Z28, n, n; \
	VFNMADD231PS Z18, n, x; \
	VFNMADD231PS Z19, n, x; \
	VMOVAPS      Z20, t;    \
	VFMADD213PS  Z21, x, t; \
	VFMADD213PS  Z22, x, t; \
	VFMADD213PS  Z23, x, t; \
	VFMADD213PS  Z24, x, t; \
	VFMADD213PS  Z25, x, t; \
	VFMADD213PS  Z26, x, t; \
	VFMADD213PS  Z26, x, t; \
	VSCALEFPS    n, t, x

// HSUM0 sums the 16 lanes of Z0 into X0 (clobbers X1) in the order the
// four-key reduction of dotsAVX512/dots4AVX512 uses, so a dot product comes
// out bit-identical whichever path computed it: b_i = a_i + a_(i+8), then
// ((b0+b1)+(b2+b3)) + ((b4+b5)+(b6+b7)).
#define HSUM0 \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VADDPS        Y1, Y0, Y0; \
	VHADDPS       Y0, Y0, Y0; \
	VHADDPS       Y0, Y0, Y0; \
	VEXTRACTF128  $1, Y0, X1; \
	VADDPS        X1, X0, X0

// RED4 reduces the four accumulators za..zd (low registers, y*/x* their
// narrower names) to the four sums [a b c d] in xa, in HSUM0's order.
// Clobbers Y16 and xb. Needs AVX512VL (EVEX VADDPS on Y16).
#define RED4(za, zb, zc, zd, ya, yb, yc, yd, xa, xb) \
	VEXTRACTF64X4 $1, za, Y16; \
	VADDPS        Y16, ya, ya; \
	VEXTRACTF64X4 $1, zb, Y16; \
	VADDPS        Y16, yb, yb; \
	VEXTRACTF64X4 $1, zc, Y16; \
	VADDPS        Y16, yc, yc; \
	VEXTRACTF64X4 $1, zd, Y16; \
	VADDPS        Y16, yd, yd; \
	VHADDPS       yb, ya, ya;  \
	VHADDPS       yd, yc, yc;  \
	VHADDPS       yc, ya, ya;  \
	VEXTRACTF128  $1, ya, xb;  \
	VADDPS        xb, xa, xa

// RED1 reduces z to a scalar in x exactly as HSUM0 does; clobbers Y16, xt.
#define RED1(z, y, x, xt) \
	VEXTRACTF64X4 $1, z, Y16; \
	VADDPS        Y16, y, y;  \
	VHADDPS       y, y, y;    \
	VHADDPS       y, y, y;    \
	VEXTRACTF128  $1, y, xt;  \
	VADDPS        xt, x, x

// TAILMASK sets K1 to the low CX bits (0 < CX < 16); clobbers AX.
#define TAILMASK \
	MOVL  $1, AX;  \
	SHLL  CX, AX;  \
	DECL  AX;      \
	KMOVW AX, K1

// func maxAVX512(x []float32) float32
TEXT ·maxAVX512(SB), NOSPLIT, $0-28
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	MOVL         $0xff800000, AX
	VPBROADCASTD AX, Z0
	VMOVAPS      Z0, Z1
	VMOVAPS      Z0, Z2
	VMOVAPS      Z0, Z3
	VMOVAPS      Z0, Z4

max64:
	CMPQ   CX, $64
	JLT    max16
	VMAXPS (SI), Z0, Z0
	VMAXPS 64(SI), Z1, Z1
	VMAXPS 128(SI), Z2, Z2
	VMAXPS 192(SI), Z3, Z3
	ADDQ   $256, SI
	SUBQ   $64, CX
	JMP    max64

max16:
	CMPQ   CX, $16
	JLT    maxtail
	VMAXPS (SI), Z0, Z0
	ADDQ   $64, SI
	SUBQ   $16, CX
	JMP    max16

maxtail:
	TESTQ   CX, CX
	JEQ     maxreduce
	TAILMASK
	VMOVUPS (SI), K1, Z4
	VMAXPS  Z4, Z0, Z0

maxreduce:
	VMAXPS        Z1, Z0, Z0
	VMAXPS        Z3, Z2, Z2
	VMAXPS        Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VMAXPS        X1, X0, X0
	VZEROUPPER
	MOVSS         X0, ret+24(FP)
	RET

// func expSumAVX512(x []float32, m float32) float32
TEXT ·expSumAVX512(SB), NOSPLIT, $0-36
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	VBROADCASTSS m+24(FP), Z27
	EXPCONST
	VPXORD       Z12, Z12, Z12
	VPXORD       Z13, Z13, Z13
	VPXORD       Z14, Z14, Z14
	VPXORD       Z15, Z15, Z15

es64:
	CMPQ    CX, $64
	JLT     es16
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VSUBPS  Z27, Z0, Z0
	VSUBPS  Z27, Z1, Z1
	VSUBPS  Z27, Z2, Z2
	VSUBPS  Z27, Z3, Z3
	EXPZ(Z0, Z4, Z8)
	EXPZ(Z1, Z5, Z9)
	EXPZ(Z2, Z6, Z10)
	EXPZ(Z3, Z7, Z11)
	VADDPS  Z0, Z12, Z12
	VADDPS  Z1, Z13, Z13
	VADDPS  Z2, Z14, Z14
	VADDPS  Z3, Z15, Z15
	ADDQ    $256, SI
	SUBQ    $64, CX
	JMP     es64

es16:
	CMPQ    CX, $16
	JLT     estail
	VMOVUPS (SI), Z0
	VSUBPS  Z27, Z0, Z0
	EXPZ(Z0, Z4, Z8)
	VADDPS  Z0, Z12, Z12
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     es16

estail:
	TESTQ     CX, CX
	JEQ       esreduce
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS    Z27, Z0, Z0
	EXPZ(Z0, Z4, Z8)
	VADDPS    Z0, Z12, K1, Z12

esreduce:
	VADDPS  Z13, Z12, Z12
	VADDPS  Z15, Z14, Z14
	VADDPS  Z14, Z12, Z0
	HSUM0
	VZEROUPPER
	MOVSS   X0, ret+32(FP)
	RET

// func expStoreAVX512(dst, x []float32, m float32) float32
TEXT ·expStoreAVX512(SB), NOSPLIT, $0-60
	MOVQ         dst_base+0(FP), DI
	MOVQ         x_base+24(FP), SI
	MOVQ         x_len+32(FP), CX
	VBROADCASTSS m+48(FP), Z27
	EXPCONST
	VPXORD       Z12, Z12, Z12
	VPXORD       Z13, Z13, Z13
	VPXORD       Z14, Z14, Z14
	VPXORD       Z15, Z15, Z15

est64:
	CMPQ    CX, $64
	JLT     est16
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VSUBPS  Z27, Z0, Z0
	VSUBPS  Z27, Z1, Z1
	VSUBPS  Z27, Z2, Z2
	VSUBPS  Z27, Z3, Z3
	EXPZ(Z0, Z4, Z8)
	EXPZ(Z1, Z5, Z9)
	EXPZ(Z2, Z6, Z10)
	EXPZ(Z3, Z7, Z11)
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VADDPS  Z0, Z12, Z12
	VADDPS  Z1, Z13, Z13
	VADDPS  Z2, Z14, Z14
	VADDPS  Z3, Z15, Z15
	ADDQ    $256, SI
	ADDQ    $256, DI
	SUBQ    $64, CX
	JMP     est64

est16:
	CMPQ    CX, $16
	JLT     esttail
	VMOVUPS (SI), Z0
	VSUBPS  Z27, Z0, Z0
	EXPZ(Z0, Z4, Z8)
	VMOVUPS Z0, (DI)
	VADDPS  Z0, Z12, Z12
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     est16

esttail:
	TESTQ     CX, CX
	JEQ       estreduce
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS    Z27, Z0, Z0
	EXPZ(Z0, Z4, Z8)
	VMOVUPS   Z0, K1, (DI)
	VADDPS    Z0, Z12, K1, Z12

estreduce:
	VADDPS  Z13, Z12, Z12
	VADDPS  Z15, Z14, Z14
	VADDPS  Z14, Z12, Z0
	HSUM0
	VZEROUPPER
	MOVSS   X0, ret+56(FP)
	RET

// func scaleAVX512(x []float32, s float32)
TEXT ·scaleAVX512(SB), NOSPLIT, $0-28
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	VBROADCASTSS s+24(FP), Z8

sc64:
	CMPQ    CX, $64
	JLT     sc16
	VMULPS  (SI), Z8, Z0
	VMULPS  64(SI), Z8, Z1
	VMULPS  128(SI), Z8, Z2
	VMULPS  192(SI), Z8, Z3
	VMOVUPS Z0, (SI)
	VMOVUPS Z1, 64(SI)
	VMOVUPS Z2, 128(SI)
	VMOVUPS Z3, 192(SI)
	ADDQ    $256, SI
	SUBQ    $64, CX
	JMP     sc64

sc16:
	CMPQ    CX, $16
	JLT     sctail
	VMULPS  (SI), Z8, Z0
	VMOVUPS Z0, (SI)
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     sc16

sctail:
	TESTQ     CX, CX
	JEQ       scdone
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VMULPS    Z8, Z0, Z0
	VMOVUPS   Z0, K1, (SI)

scdone:
	VZEROUPPER
	RET

// func dotsAVX512(dst []float32, q, k *float32, stride, hs int)
TEXT ·dotsAVX512(SB), NOSPLIT, $0-56
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
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ   AX, AX
	LEAQ   (BX)(DX*1), R9
	LEAQ   (BX)(DX*2), R10
	LEAQ   (BX)(R12*1), R11

dots4inner:
	VMOVUPS     (SI)(AX*1), Z4
	VFMADD231PS (BX)(AX*1), Z4, Z0
	VFMADD231PS (R9)(AX*1), Z4, Z1
	VFMADD231PS (R10)(AX*1), Z4, Z2
	VFMADD231PS (R11)(AX*1), Z4, Z3
	ADDQ        $64, AX
	CMPQ        AX, R8
	JLT         dots4inner
	RED4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1)
	VMOVUPS       X0, (DI)
	ADDQ          $16, DI
	LEAQ          (BX)(DX*4), BX
	SUBQ          $4, CX
	JMP           dots4

dots1:
	TESTQ  CX, CX
	JEQ    dotsdone
	VPXORD Z0, Z0, Z0
	XORQ   AX, AX

dots1inner:
	VMOVUPS     (SI)(AX*1), Z4
	VFMADD231PS (BX)(AX*1), Z4, Z0
	ADDQ        $64, AX
	CMPQ        AX, R8
	JLT         dots1inner
	HSUM0
	MOVSS       X0, (DI)
	ADDQ        $4, DI
	ADDQ        DX, BX
	DECQ        CX
	JMP         dots1

dotsdone:
	VZEROUPPER
	RET

// func gemvTAVX512(out *float32, p []float32, v *float32, stride, hs int)
// One accumulator per 16 columns, keys in order: the same arithmetic per
// row as gemvT4AVX512.
TEXT ·gemvTAVX512(SB), NOSPLIT, $0-56
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
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	MOVQ    BX, R9
	XORQ    AX, AX

g64loop:
	CMPQ         AX, CX
	JGE          g64done
	VBROADCASTSS (SI)(AX*4), Z8
	VFMADD231PS  (R9), Z8, Z0
	VFMADD231PS  64(R9), Z8, Z1
	VFMADD231PS  128(R9), Z8, Z2
	VFMADD231PS  192(R9), Z8, Z3
	ADDQ         DX, R9
	INCQ         AX
	JMP          g64loop

g64done:
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ    $256, DI
	ADDQ    $256, BX
	SUBQ    $64, R8
	JMP     gblock64

gblock16:
	CMPQ    R8, $16
	JLT     gdone
	VMOVUPS (DI), Z0
	MOVQ    BX, R9
	XORQ    AX, AX

g16loop:
	CMPQ         AX, CX
	JGE          g16done
	VBROADCASTSS (SI)(AX*4), Z8
	VFMADD231PS  (R9), Z8, Z0
	ADDQ         DX, R9
	INCQ         AX
	JMP          g16loop

g16done:
	VMOVUPS Z0, (DI)
	ADDQ    $64, DI
	ADDQ    $64, BX
	SUBQ    $16, R8
	JMP     gblock16

gdone:
	VZEROUPPER
	RET

// func rank1AVX512(dst *float32, stride int, a []float32, x *float32, hs int)
TEXT ·rank1AVX512(SB), NOSPLIT, $0-56
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
	VMOVUPS (BX), Z0
	VMOVUPS 64(BX), Z1
	VMOVUPS 128(BX), Z2
	VMOVUPS 192(BX), Z3
	MOVQ    DI, R9
	XORQ    AX, AX

r64loop:
	CMPQ         AX, CX
	JGE          r64done
	VBROADCASTSS (SI)(AX*4), Z8
	VMOVUPS      (R9), Z4
	VMOVUPS      64(R9), Z5
	VMOVUPS      128(R9), Z6
	VMOVUPS      192(R9), Z7
	VFMADD231PS  Z0, Z8, Z4
	VFMADD231PS  Z1, Z8, Z5
	VFMADD231PS  Z2, Z8, Z6
	VFMADD231PS  Z3, Z8, Z7
	VMOVUPS      Z4, (R9)
	VMOVUPS      Z5, 64(R9)
	VMOVUPS      Z6, 128(R9)
	VMOVUPS      Z7, 192(R9)
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
	VMOVUPS (BX), Z0
	MOVQ    DI, R9
	XORQ    AX, AX

r16loop:
	CMPQ         AX, CX
	JGE          r16done
	VBROADCASTSS (SI)(AX*4), Z8
	VMOVUPS      (R9), Z4
	VFMADD231PS  Z0, Z8, Z4
	VMOVUPS      Z4, (R9)
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

// func dots4AVX512(dst *float32, ldd int, q *float32, ldq int, k *float32, ldk int, n, hs int)
// dst[r*ldd+j] = q[r*ldq:][:hs]·k[j*ldk:][:hs] for r < 4, j < n; hs%16 == 0.
// Each product is accumulated and reduced exactly as dotsAVX512 does.
TEXT ·dots4AVX512(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R13
	SHLQ $2, R13
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
	CMPQ   CX, $4
	JLT    d4single
	LEAQ   (BX)(DX*1), SI
	LEAQ   (SI)(DX*1), R14
	LEAQ   (R14)(DX*1), R15
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
	XORQ   AX, AX

d4inner:
	VMOVUPS     (BX)(AX*1), Z16
	VMOVUPS     (SI)(AX*1), Z17
	VMOVUPS     (R14)(AX*1), Z18
	VMOVUPS     (R15)(AX*1), Z19
	VMOVUPS     (R9)(AX*1), Z20
	VFMADD231PS Z16, Z20, Z0
	VFMADD231PS Z17, Z20, Z1
	VFMADD231PS Z18, Z20, Z2
	VFMADD231PS Z19, Z20, Z3
	VMOVUPS     (R10)(AX*1), Z21
	VFMADD231PS Z16, Z21, Z4
	VFMADD231PS Z17, Z21, Z5
	VFMADD231PS Z18, Z21, Z6
	VFMADD231PS Z19, Z21, Z7
	VMOVUPS     (R11)(AX*1), Z22
	VFMADD231PS Z16, Z22, Z8
	VFMADD231PS Z17, Z22, Z9
	VFMADD231PS Z18, Z22, Z10
	VFMADD231PS Z19, Z22, Z11
	VMOVUPS     (R12)(AX*1), Z23
	VFMADD231PS Z16, Z23, Z12
	VFMADD231PS Z17, Z23, Z13
	VFMADD231PS Z18, Z23, Z14
	VFMADD231PS Z19, Z23, Z15
	ADDQ        $64, AX
	CMPQ        AX, R8
	JLT         d4inner
	RED4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1)
	RED4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5)
	RED4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9)
	RED4(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12, X13)
	LEAQ        (R13)(R13*2), AX
	VMOVUPS     X0, (DI)
	VMOVUPS     X4, (DI)(R13*1)
	VMOVUPS     X8, (DI)(R13*2)
	VMOVUPS     X12, (DI)(AX*1)
	ADDQ        $16, DI
	LEAQ        (BX)(DX*4), BX
	SUBQ        $4, CX
	JMP         d4block

d4single:
	TESTQ  CX, CX
	JEQ    d4done
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ   AX, AX

d4sinner:
	VMOVUPS     (BX)(AX*1), Z16
	VFMADD231PS (R9)(AX*1), Z16, Z0
	VFMADD231PS (R10)(AX*1), Z16, Z1
	VFMADD231PS (R11)(AX*1), Z16, Z2
	VFMADD231PS (R12)(AX*1), Z16, Z3
	ADDQ        $64, AX
	CMPQ        AX, R8
	JLT         d4sinner
	RED1(Z0, Y0, X0, X4)
	RED1(Z1, Y1, X1, X5)
	RED1(Z2, Y2, X2, X6)
	RED1(Z3, Y3, X3, X7)
	LEAQ        (R13)(R13*2), AX
	MOVSS       X0, (DI)
	MOVSS       X1, (DI)(R13*1)
	MOVSS       X2, (DI)(R13*2)
	MOVSS       X3, (DI)(AX*1)
	ADDQ        $4, DI
	ADDQ        DX, BX
	DECQ        CX
	JMP         d4single

d4done:
	VZEROUPPER
	RET

// func gemvT4AVX512(out *float32, ldo int, p *float32, ldp int, v *float32, ldv int, n, hs int)
// out[r*ldo+c] += Σ_j p[r*ldp+j]·v[j*ldv+c] for r < 4, c < hs; hs%16 == 0.
// Per row the same arithmetic as gemvTAVX512.
TEXT ·gemvT4AVX512(SB), NOSPLIT, $0-64
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

g4block64:
	CMPQ    R8, $64
	JLT     g4block16
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	VMOVUPS (DI)(R13*1), Z4
	VMOVUPS 64(DI)(R13*1), Z5
	VMOVUPS 128(DI)(R13*1), Z6
	VMOVUPS 192(DI)(R13*1), Z7
	VMOVUPS (DI)(R13*2), Z8
	VMOVUPS 64(DI)(R13*2), Z9
	VMOVUPS 128(DI)(R13*2), Z10
	VMOVUPS 192(DI)(R13*2), Z11
	VMOVUPS (DI)(R14*1), Z12
	VMOVUPS 64(DI)(R14*1), Z13
	VMOVUPS 128(DI)(R14*1), Z14
	VMOVUPS 192(DI)(R14*1), Z15
	MOVQ    BX, R12
	XORQ    AX, AX

g4loop64:
	CMPQ         AX, CX
	JGE          g4done64
	VMOVUPS      (R12), Z16
	VMOVUPS      64(R12), Z17
	VMOVUPS      128(R12), Z18
	VMOVUPS      192(R12), Z19
	VBROADCASTSS (SI)(AX*4), Z20
	VBROADCASTSS (R9)(AX*4), Z21
	VBROADCASTSS (R10)(AX*4), Z22
	VBROADCASTSS (R11)(AX*4), Z23
	VFMADD231PS  Z16, Z20, Z0
	VFMADD231PS  Z17, Z20, Z1
	VFMADD231PS  Z18, Z20, Z2
	VFMADD231PS  Z19, Z20, Z3
	VFMADD231PS  Z16, Z21, Z4
	VFMADD231PS  Z17, Z21, Z5
	VFMADD231PS  Z18, Z21, Z6
	VFMADD231PS  Z19, Z21, Z7
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z17, Z22, Z9
	VFMADD231PS  Z18, Z22, Z10
	VFMADD231PS  Z19, Z22, Z11
	VFMADD231PS  Z16, Z23, Z12
	VFMADD231PS  Z17, Z23, Z13
	VFMADD231PS  Z18, Z23, Z14
	VFMADD231PS  Z19, Z23, Z15
	ADDQ         DX, R12
	INCQ         AX
	JMP          g4loop64

g4done64:
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VMOVUPS Z4, (DI)(R13*1)
	VMOVUPS Z5, 64(DI)(R13*1)
	VMOVUPS Z6, 128(DI)(R13*1)
	VMOVUPS Z7, 192(DI)(R13*1)
	VMOVUPS Z8, (DI)(R13*2)
	VMOVUPS Z9, 64(DI)(R13*2)
	VMOVUPS Z10, 128(DI)(R13*2)
	VMOVUPS Z11, 192(DI)(R13*2)
	VMOVUPS Z12, (DI)(R14*1)
	VMOVUPS Z13, 64(DI)(R14*1)
	VMOVUPS Z14, 128(DI)(R14*1)
	VMOVUPS Z15, 192(DI)(R14*1)
	ADDQ    $256, DI
	ADDQ    $256, BX
	SUBQ    $64, R8
	JMP     g4block64

g4block16:
	CMPQ    R8, $16
	JLT     g4done
	VMOVUPS (DI), Z0
	VMOVUPS (DI)(R13*1), Z4
	VMOVUPS (DI)(R13*2), Z8
	VMOVUPS (DI)(R14*1), Z12
	MOVQ    BX, R12
	XORQ    AX, AX

g4loop16:
	CMPQ         AX, CX
	JGE          g4done16
	VMOVUPS      (R12), Z16
	VBROADCASTSS (SI)(AX*4), Z20
	VBROADCASTSS (R9)(AX*4), Z21
	VBROADCASTSS (R10)(AX*4), Z22
	VBROADCASTSS (R11)(AX*4), Z23
	VFMADD231PS  Z16, Z20, Z0
	VFMADD231PS  Z16, Z21, Z4
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z16, Z23, Z12
	ADDQ         DX, R12
	INCQ         AX
	JMP          g4loop16

g4done16:
	VMOVUPS Z0, (DI)
	VMOVUPS Z4, (DI)(R13*1)
	VMOVUPS Z8, (DI)(R13*2)
	VMOVUPS Z12, (DI)(R14*1)
	ADDQ    $64, DI
	ADDQ    $64, BX
	SUBQ    $16, R8
	JMP     g4block16

g4done:
	VZEROUPPER
	RET

// func rank4AVX512(dst *float32, ldd int, a *float32, lda int, x *float32, ldx int, n, hs int)
// dst[j*ldd+c] += a[r*lda+j]·x[r*ldx+c] for j < n, then r = 0..3 in order,
// c < hs; hs%16 == 0. The same arithmetic as four rank1AVX512 calls.
TEXT ·rank4AVX512(SB), NOSPLIT, $0-64
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

r4block64:
	CMPQ    R8, $64
	JLT     r4block16
	VMOVUPS (BX), Z0
	VMOVUPS 64(BX), Z1
	VMOVUPS 128(BX), Z2
	VMOVUPS 192(BX), Z3
	VMOVUPS (BX)(R13*1), Z4
	VMOVUPS 64(BX)(R13*1), Z5
	VMOVUPS 128(BX)(R13*1), Z6
	VMOVUPS 192(BX)(R13*1), Z7
	VMOVUPS (BX)(R13*2), Z8
	VMOVUPS 64(BX)(R13*2), Z9
	VMOVUPS 128(BX)(R13*2), Z10
	VMOVUPS 192(BX)(R13*2), Z11
	VMOVUPS (BX)(R14*1), Z12
	VMOVUPS 64(BX)(R14*1), Z13
	VMOVUPS 128(BX)(R14*1), Z14
	VMOVUPS 192(BX)(R14*1), Z15
	MOVQ    DI, R12
	XORQ    AX, AX

r4loop64:
	CMPQ         AX, CX
	JGE          r4done64
	VBROADCASTSS (SI)(AX*4), Z20
	VBROADCASTSS (R9)(AX*4), Z21
	VBROADCASTSS (R10)(AX*4), Z22
	VBROADCASTSS (R11)(AX*4), Z23
	VMOVUPS      (R12), Z16
	VMOVUPS      64(R12), Z17
	VMOVUPS      128(R12), Z18
	VMOVUPS      192(R12), Z19
	VFMADD231PS  Z0, Z20, Z16
	VFMADD231PS  Z1, Z20, Z17
	VFMADD231PS  Z2, Z20, Z18
	VFMADD231PS  Z3, Z20, Z19
	VFMADD231PS  Z4, Z21, Z16
	VFMADD231PS  Z5, Z21, Z17
	VFMADD231PS  Z6, Z21, Z18
	VFMADD231PS  Z7, Z21, Z19
	VFMADD231PS  Z8, Z22, Z16
	VFMADD231PS  Z9, Z22, Z17
	VFMADD231PS  Z10, Z22, Z18
	VFMADD231PS  Z11, Z22, Z19
	VFMADD231PS  Z12, Z23, Z16
	VFMADD231PS  Z13, Z23, Z17
	VFMADD231PS  Z14, Z23, Z18
	VFMADD231PS  Z15, Z23, Z19
	VMOVUPS      Z16, (R12)
	VMOVUPS      Z17, 64(R12)
	VMOVUPS      Z18, 128(R12)
	VMOVUPS      Z19, 192(R12)
	ADDQ         DX, R12
	INCQ         AX
	JMP          r4loop64

r4done64:
	ADDQ $256, DI
	ADDQ $256, BX
	SUBQ $64, R8
	JMP  r4block64

r4block16:
	CMPQ    R8, $16
	JLT     r4done
	VMOVUPS (BX), Z0
	VMOVUPS (BX)(R13*1), Z4
	VMOVUPS (BX)(R13*2), Z8
	VMOVUPS (BX)(R14*1), Z12
	MOVQ    DI, R12
	XORQ    AX, AX

r4loop16:
	CMPQ         AX, CX
	JGE          r4done16
	VBROADCASTSS (SI)(AX*4), Z20
	VBROADCASTSS (R9)(AX*4), Z21
	VBROADCASTSS (R10)(AX*4), Z22
	VBROADCASTSS (R11)(AX*4), Z23
	VMOVUPS      (R12), Z16
	VFMADD231PS  Z0, Z20, Z16
	VFMADD231PS  Z4, Z21, Z16
	VFMADD231PS  Z8, Z22, Z16
	VFMADD231PS  Z12, Z23, Z16
	VMOVUPS      Z16, (R12)
	ADDQ         DX, R12
	INCQ         AX
	JMP          r4loop16

r4done16:
	ADDQ $64, DI
	ADDQ $64, BX
	SUBQ $16, R8
	JMP  r4block16

r4done:
	VZEROUPPER
	RET
