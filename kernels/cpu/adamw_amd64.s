#include "textflag.h"

// AdamW updates (adamw.go) 16 parameters at a time, bit for bit what
// adamWUpdate.apply computes: float32 operations in the same order, the
// lerp as one float64 fused multiply-add rounded to float32 (two halves of
// 8 lanes each), and the last n mod 16 parameters under a mask.
//
// Both functions take k, an *adamWKernel: the adamWUpdate's eight float32
// fields (gradScale, decay, w1, w2, b2, bc2s, negStep, eps), then lc, the
// lerp coefficient as a float64 (w1, or w1-1 when the lerp starts from the
// gradient), then fromEnd, 0xffff for that second form, else 0.
//
// Constants: Z16 gradScale, Z17 decay, Z18 lc (float64), Z19 w2, Z20 b2,
// Z21 bc2s, Z22 negStep, Z23 eps; K5 all lanes when fromEnd (the lerp's
// base is g), else none. K3 is the lane mask of the current block.

// ADAMCONSTS loads them from the adamWKernel at AX.
#define ADAMCONSTS \
	VBROADCASTSS 0(AX), Z16; \
	VBROADCASTSS 4(AX), Z17; \
	VBROADCASTSD 32(AX), Z18; \
	VBROADCASTSS 12(AX), Z19; \
	VBROADCASTSS 16(AX), Z20; \
	VBROADCASTSS 20(AX), Z21; \
	VBROADCASTSS 24(AX), Z22; \
	VBROADCASTSS 28(AX), Z23; \
	KMOVW        40(AX), K5

// BLOCKMASK sets AX = min(CX, 16) and K3 to its low AX lanes.
#define BLOCKMASK \
	MOVQ    $16, AX; \
	CMPQ    CX, AX; \
	CMOVQLT CX, AX; \
	MOVL    $-1, DX; \
	BZHIL   AX, DX, DX; \
	KMOVW   DX, K3

// UPDATE applies one AdamW step to p in Z0, g in Z1, m in Z2, v in Z3,
// leaving the new p, m, v in Z0, Z2, Z3 (temps Z4-Z10), in apply's order:
// g *= gradScale; p *= decay; m = float32(base + lc·(g-m)) with base m (g
// when fromEnd) and one float64 FMA per half of 8 lanes; v = v·b2 +
// (w2·g)·g; denom = sqrt(v)/bc2s + eps; p += (negStep·m)/denom.
#define UPDATE \
	VMULPS        Z16, Z1, Z1; \
	VMULPS        Z17, Z0, Z0; \
	VSUBPS        Z2, Z1, Z4; \
	VMOVAPS       Z2, Z5; \
	VMOVAPS       Z1, K5, Z5; \
	VCVTPS2PD     Y4, Z6; \
	VCVTPS2PD     Y5, Z7; \
	VFMADD231PD   Z18, Z6, Z7; \
	VEXTRACTF32X8 $1, Z4, Y4; \
	VEXTRACTF32X8 $1, Z5, Y5; \
	VCVTPS2PD     Y4, Z6; \
	VCVTPS2PD     Y5, Z8; \
	VFMADD231PD   Z18, Z6, Z8; \
	VCVTPD2PS     Z7, Y2; \
	VCVTPD2PS     Z8, Y8; \
	VINSERTF32X8  $1, Y8, Z2, Z2; \
	VMULPS        Z20, Z3, Z3; \
	VMULPS        Z19, Z1, Z9; \
	VMULPS        Z1, Z9, Z9; \
	VADDPS        Z9, Z3, Z3; \
	VSQRTPS       Z3, Z9; \
	VDIVPS        Z21, Z9, Z9; \
	VADDPS        Z23, Z9, Z9; \
	VMULPS        Z22, Z2, Z10; \
	VDIVPS        Z9, Z10, Z10; \
	VADDPS        Z10, Z0, Z0

// func adamwAVX512(p, grad, m, v *float32, n int, k *adamWKernel)
TEXT ·adamwAVX512(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	ADAMCONSTS

f32loop:
	TESTQ CX, CX
	JEQ   f32done
	BLOCKMASK
	VMOVUPS.Z (DI), K3, Z0
	VMOVUPS.Z (SI), K3, Z1
	VMOVUPS.Z (R8), K3, Z2
	VMOVUPS.Z (R9), K3, Z3
	UPDATE
	VMOVUPS Z0, K3, (DI)
	VMOVUPS Z2, K3, (R8)
	VMOVUPS Z3, K3, (R9)
	ADDQ $64, DI
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $64, R9
	SUBQ AX, CX
	JMP  f32loop

f32done:
	VZEROUPPER
	RET

// func adamwBF16AVX512(p, lo *uint16, grad, m, v *float32, n int, k *adamWKernel)
// The fp32 master weight is joined from its bf16 half p and its low half lo
// (JoinMaster) and split again after the update (SplitMaster): hi rounded
// to nearest even as ToBF16 does (NaNs quieted), lo its low 16 bits, or
// 0x8001 for a tie that rounded up.
// Extra constants: Z24 = 1, Z25 = 0x7fff, Z26 = 0x40, Z27 = 0x8000,
// Z28 = 0xffff (dwords).
TEXT ·adamwBF16AVX512(SB), NOSPLIT, $0-56
	MOVQ p+0(FP), DI
	MOVQ lo+8(FP), BX
	MOVQ grad+16(FP), SI
	MOVQ m+24(FP), R8
	MOVQ v+32(FP), R9
	MOVQ n+40(FP), CX
	MOVQ k+48(FP), AX
	ADAMCONSTS
	MOVL         $1, AX
	VPBROADCASTD AX, Z24
	MOVL         $0x7fff, AX
	VPBROADCASTD AX, Z25
	MOVL         $0x40, AX
	VPBROADCASTD AX, Z26
	MOVL         $0x8000, AX
	VPBROADCASTD AX, Z27
	MOVL         $0xffff, AX
	VPBROADCASTD AX, Z28

bfloop:
	TESTQ CX, CX
	JEQ   bfdone
	BLOCKMASK
	// Join: h = hi - (lo > 0x8000), w = h<<16 | lo.
	VPMOVZXWD.Z (DI), K3, Z0
	VPMOVZXWD.Z (BX), K3, Z11
	VPCMPUD     $6, Z27, Z11, K1 // lo > 0x8000
	VPSUBD      Z24, Z0, K1, Z0
	VPSLLD      $16, Z0, Z0
	VPORD       Z11, Z0, Z0
	VMOVUPS.Z   (SI), K3, Z1
	VMOVUPS.Z   (R8), K3, Z2
	VMOVUPS.Z   (R9), K3, Z3
	UPDATE
	// Split: hi = ToBF16(w) in Z12, lo = w & 0xffff in Z13, or 0x8001
	// when lo == 0x8000 and hi != w>>16.
	VPSRLD      $16, Z0, Z11
	VPANDD      Z24, Z11, Z12
	VPADDD      Z25, Z0, Z13
	VPADDD      Z12, Z13, Z13
	VPSRLD      $16, Z13, Z12
	VFPCLASSPSZ $0x81, Z0, K4
	VPORD       Z26, Z11, K4, Z12
	VPANDD      Z28, Z0, Z13
	VPCMPEQD    Z27, Z13, K1
	VPCMPD      $4, Z11, Z12, K2 // hi != w>>16
	KANDW       K1, K2, K1
	VPORD       Z24, Z13, K1, Z13
	VPMOVDW     Z12, K3, (DI)
	VPMOVDW     Z13, K3, (BX)
	VMOVUPS     Z2, K3, (R8)
	VMOVUPS     Z3, K3, (R9)
	ADDQ $32, DI
	ADDQ $32, BX
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $64, R9
	SUBQ AX, CX
	JMP  bfloop

bfdone:
	VZEROUPPER
	RET

// func sumSquaresAVX512(x *float32, n int) float64
// Σ x[i]² in float64 (each square rounded, then added: no FMA), in 32
// lanes: element i goes to lane i mod 32, held as four vectors of 8
// (Z4-Z7). The lanes are added as goSumSquares does: (Z4+Z5)+(Z6+Z7),
// then the upper 4 lanes onto the lower, then 2, then 1. The last n mod 32
// elements go in four masked groups of 8.
TEXT ·sumSquaresAVX512(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPD Z4, Z4, Z4
	VXORPD Z5, Z5, Z5
	VXORPD Z6, Z6, Z6
	VXORPD Z7, Z7, Z7

ssloop:
	CMPQ      CX, $32
	JLT       sstail
	VCVTPS2PD (SI), Z0
	VCVTPS2PD 32(SI), Z1
	VCVTPS2PD 64(SI), Z2
	VCVTPS2PD 96(SI), Z3
	VMULPD    Z0, Z0, Z0
	VMULPD    Z1, Z1, Z1
	VMULPD    Z2, Z2, Z2
	VMULPD    Z3, Z3, Z3
	VADDPD    Z0, Z4, Z4
	VADDPD    Z1, Z5, Z5
	VADDPD    Z2, Z6, Z6
	VADDPD    Z3, Z7, Z7
	ADDQ      $128, SI
	SUBQ      $32, CX
	JMP       ssloop

// SSGROUP adds the squares of up to 8 elements at off(SI) (CX left from
// SI) to acc, under a mask of min(max(CX-off/4, 0), 8) lanes.
#define SSGROUP(off, acc) \
	MOVQ           CX, AX; \
	SUBQ           $(off/4), AX; \
	XORQ           DX, DX; \
	CMPQ           AX, DX; \
	CMOVQLT        DX, AX; \
	MOVQ           $8, DX; \
	CMPQ           AX, DX; \
	CMOVQGT        DX, AX; \
	MOVL           $-1, DX; \
	BZHIL          AX, DX, DX; \
	KMOVB          DX, K1; \
	VCVTPS2PD.Z    off(SI), K1, Z0; \
	VMULPD         Z0, Z0, Z0; \
	VADDPD         Z0, acc, acc

sstail:
	SSGROUP(0, Z4)
	SSGROUP(32, Z5)
	SSGROUP(64, Z6)
	SSGROUP(96, Z7)
	VADDPD        Z5, Z4, Z4
	VADDPD        Z7, Z6, Z6
	VADDPD        Z6, Z4, Z4
	VEXTRACTF64X4 $1, Z4, Y5
	VADDPD        Y5, Y4, Y4
	VEXTRACTF128  $1, Y4, X5
	VADDPD        X5, X4, X4
	VPERMILPD     $1, X4, X5
	VADDSD        X5, X4, X4
	VMOVSD        X4, ret+16(FP)
	VZEROUPPER
	RET
