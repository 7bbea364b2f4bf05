#include "textflag.h"
#include "gemm_amd64.h"

// Conversions between float32 and bf16 slices (bf16.go's roundSliceBF16
// and widenSliceBF16).

// func roundBF16AVX512BF16(dst *uint16, src *float32, n int)
// dst[i] = ToBF16(src[i]) for i < n. 32 values at a time through
// VCVTNE2PS2BF16, which rounds as ToBF16 does except that it flushes
// denormal inputs to signed zeros: a block with a denormal (VFPCLASSPS
// 0x20) is rounded by RNE16 instead. The last n mod 32 go 16 at a time
// through RNE16 under masks.
//
// Registers: SI src, DI dst, CX values left; K1/K2 denormal lanes, K3
// tail mask.
TEXT ·roundBF16AVX512BF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	RNECONSTS

rbfloop:
	CMPQ        CX, $32
	JLT         rbftail
	VMOVUPS     (SI), Z0
	VMOVUPS     64(SI), Z1
	VFPCLASSPSZ $0x20, Z0, K1
	VFPCLASSPSZ $0x20, Z1, K2
	KORTESTW    K1, K2
	JNE         rbfexact
	VCVTNE2PS2BF16(2, 1, 0)
	VMOVDQU16   Z2, (DI)
	JMP         rbfnext

rbfexact:
	RNE16(Z0)
	VPMOVDW Z4, (DI)
	RNE16(Z1)
	VPMOVDW Z4, 32(DI)

rbfnext:
	ADDQ $128, SI
	ADDQ $64, DI
	SUBQ $32, CX
	JMP  rbfloop

rbftail:
	TESTQ CX, CX
	JEQ   rbfdone
	MOVQ  $16, AX
	CMPQ  CX, AX
	CMOVQLT CX, AX
	MOVL  $-1, DX
	BZHIL AX, DX, DX
	KMOVW DX, K3
	VMOVUPS.Z (SI), K3, Z0
	RNE16(Z0)
	VPMOVDW Z4, K3, (DI)
	ADDQ  $64, SI
	ADDQ  $32, DI
	SUBQ  AX, CX
	JMP   rbftail

rbfdone:
	VZEROUPPER
	RET

// func roundBF16AVX512(dst *uint16, src *float32, n int)
// dst[i] = ToBF16(src[i]) for i < n with RNE16 only (AVX-512F): 16 values
// at a time, the last n mod 16 under a mask.
TEXT ·roundBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	RNECONSTS

r16loop:
	TESTQ CX, CX
	JEQ   r16done
	MOVQ  $16, AX
	CMPQ  CX, AX
	CMOVQLT CX, AX
	MOVL  $-1, DX
	BZHIL AX, DX, DX
	KMOVW DX, K3
	VMOVUPS.Z (SI), K3, Z0
	RNE16(Z0)
	VPMOVDW Z4, K3, (DI)
	ADDQ  $64, SI
	ADDQ  $32, DI
	SUBQ  AX, CX
	JMP   r16loop

r16done:
	VZEROUPPER
	RET

// func widenBF16AVX512(dst *float32, src *uint16, n int)
// dst[i] = FromBF16(src[i]) for i < n: each bf16 zero-extended to 32 bits
// (VPMOVZXWD) and shifted into the high half, 64 values at a time, then
// 16 at a time under masks.
TEXT ·widenBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

w64loop:
	CMPQ      CX, $64
	JLT       w16loop
	VPMOVZXWD (SI), Z0
	VPMOVZXWD 32(SI), Z1
	VPMOVZXWD 64(SI), Z2
	VPMOVZXWD 96(SI), Z3
	VPSLLD    $16, Z0, Z0
	VPSLLD    $16, Z1, Z1
	VPSLLD    $16, Z2, Z2
	VPSLLD    $16, Z3, Z3
	VMOVUPS   Z0, (DI)
	VMOVUPS   Z1, 64(DI)
	VMOVUPS   Z2, 128(DI)
	VMOVUPS   Z3, 192(DI)
	ADDQ      $128, SI
	ADDQ      $256, DI
	SUBQ      $64, CX
	JMP       w64loop

w16loop:
	TESTQ CX, CX
	JEQ   wdone
	MOVQ  $16, AX
	CMPQ  CX, AX
	CMOVQLT CX, AX
	MOVL  $-1, DX
	BZHIL AX, DX, DX
	KMOVW DX, K3
	VPMOVZXWD.Z (SI), K3, Z0
	VPSLLD      $16, Z0, Z0
	VMOVUPS     Z0, K3, (DI)
	ADDQ  $32, SI
	ADDQ  $64, DI
	SUBQ  AX, CX
	JMP   w16loop

wdone:
	VZEROUPPER
	RET

// func roundF32BF16AVX512(dst, src *float32, n int)
// dst[i] = FromBF16(ToBF16(src[i])) for i < n: RNE16 then the bf16 back in
// the high half, 16 values at a time, the last n mod 16 under a mask. dst
// may be src.
//
// Registers: SI src, DI dst, CX values left, AX values this round; K3
// mask.
TEXT ·roundF32BF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	RNECONSTS

rffloop:
	CMPQ      CX, $16
	JLT       rfftail
	VMOVUPS   (SI), Z0
	RNE16(Z0)
	VPSLLD    $16, Z4, Z4
	VMOVDQU32 Z4, (DI)
	ADDQ      $64, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       rffloop

rfftail:
	TESTQ     CX, CX
	JEQ       rffdone
	MOVL      $-1, DX
	BZHIL     CX, DX, DX
	KMOVW     DX, K3
	VMOVUPS.Z (SI), K3, Z0
	RNE16(Z0)
	VPSLLD    $16, Z4, Z4
	VMOVDQU32 Z4, K3, (DI)

rffdone:
	VZEROUPPER
	RET
