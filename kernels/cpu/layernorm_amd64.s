//go:build amd64

#include "textflag.h"

// AVX-512 loops of LayerNormForward/Backward (layernorm.go), 8 elements at a
// time, bit for bit what the Go loops compute: the same float64 operations
// in the same order on widened inputs (VCVTPS2PD is exact), one rounding to
// float32 (VCVTPD2PS, to nearest even as Go's conversion), then the same
// float32 operations. No FMA: Go does not fuse them on amd64 either (at
// the default GOAMD64=v1). The callers pass lengths that are multiples of 8
// and finish the rest in Go.

// func lnNormAVX512(o, x, w, b []float32, m, r float64)
// o[j] = float32((float64(x[j])-m)*r)*w[j] + b[j]
TEXT ·lnNormAVX512(SB), NOSPLIT, $0-112
	MOVQ         o_base+0(FP), DI
	MOVQ         x_base+24(FP), SI
	MOVQ         x_len+32(FP), CX
	MOVQ         w_base+48(FP), R8
	MOVQ         b_base+72(FP), R9
	VBROADCASTSD m+96(FP), Z8
	VBROADCASTSD r+104(FP), Z9

lnn8:
	CMPQ      CX, $8
	JLT       lnndone
	VCVTPS2PD (SI), Z0
	VSUBPD    Z8, Z0, Z0
	VMULPD    Z9, Z0, Z0
	VCVTPD2PS Z0, Y0
	VMULPS    (R8), Y0, Y0
	VADDPS    (R9), Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DI
	ADDQ      $32, R8
	ADDQ      $32, R9
	SUBQ      $8, CX
	JMP       lnn8

lnndone:
	VZEROUPPER
	RET

// func lnDxAVX512(dx, dy, x, w []float32, m, r, sg, sgn float64)
// dx[j] += float32((float64(dy[j])*float64(w[j]) - sg - (float64(x[j])-m)*r*sgn) * r)
TEXT ·lnDxAVX512(SB), NOSPLIT, $0-128
	MOVQ         dx_base+0(FP), DI
	MOVQ         dy_base+24(FP), SI
	MOVQ         x_base+48(FP), BX
	MOVQ         x_len+56(FP), CX
	MOVQ         w_base+72(FP), R8
	VBROADCASTSD m+96(FP), Z8
	VBROADCASTSD r+104(FP), Z9
	VBROADCASTSD sg+112(FP), Z10
	VBROADCASTSD sgn+120(FP), Z11

lnd8:
	CMPQ      CX, $8
	JLT       lnddone
	VCVTPS2PD (SI), Z0
	VCVTPS2PD (R8), Z1
	VMULPD    Z1, Z0, Z0
	VSUBPD    Z10, Z0, Z0
	VCVTPS2PD (BX), Z2
	VSUBPD    Z8, Z2, Z2
	VMULPD    Z9, Z2, Z2
	VMULPD    Z11, Z2, Z2
	VSUBPD    Z2, Z0, Z0
	VMULPD    Z9, Z0, Z0
	VCVTPD2PS Z0, Y0
	VADDPS    (DI), Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DI
	ADDQ      $32, BX
	ADDQ      $32, R8
	SUBQ      $8, CX
	JMP       lnd8

lnddone:
	VZEROUPPER
	RET

// func lnColSumsAVX512(accW, accB []float64, dy, x []float32, m, r float64)
// accW[j] += float64(dy[j]) * (float64(x[j]) - m) * r; accB[j] += float64(dy[j])
TEXT ·lnColSumsAVX512(SB), NOSPLIT, $0-112
	MOVQ         accW_base+0(FP), DI
	MOVQ         accB_base+24(FP), DX
	MOVQ         dy_base+48(FP), SI
	MOVQ         dy_len+56(FP), CX
	MOVQ         x_base+72(FP), BX
	VBROADCASTSD m+96(FP), Z8
	VBROADCASTSD r+104(FP), Z9

lnc8:
	CMPQ      CX, $8
	JLT       lncdone
	VCVTPS2PD (SI), Z0
	VCVTPS2PD (BX), Z1
	VSUBPD    Z8, Z1, Z1
	VMULPD    Z1, Z0, Z2
	VMULPD    Z9, Z2, Z2
	VADDPD    (DI), Z2, Z2
	VMOVUPD   Z2, (DI)
	VADDPD    (DX), Z0, Z0
	VMOVUPD   Z0, (DX)
	ADDQ      $32, SI
	ADDQ      $32, BX
	ADDQ      $64, DI
	ADDQ      $64, DX
	SUBQ      $8, CX
	JMP       lnc8

lncdone:
	VZEROUPPER
	RET
