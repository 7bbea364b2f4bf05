// Macros shared by the amd64 assembly of the GEMM kernels.

// Transpose Z0-Z15 (row i = Z(i), 16 floats each) in place through Z16-Z31:
// afterwards Z(p) holds column p. Four rounds of 16 shuffles: interleave
// pairs of rows, then pairs of pairs, then 128-bit lanes twice.
#define TRANSPOSE16                               \
	VUNPCKLPS Z1, Z0, Z16;                    \
	VUNPCKHPS Z1, Z0, Z17;                    \
	VUNPCKLPS Z3, Z2, Z18;                    \
	VUNPCKHPS Z3, Z2, Z19;                    \
	VUNPCKLPS Z5, Z4, Z20;                    \
	VUNPCKHPS Z5, Z4, Z21;                    \
	VUNPCKLPS Z7, Z6, Z22;                    \
	VUNPCKHPS Z7, Z6, Z23;                    \
	VUNPCKLPS Z9, Z8, Z24;                    \
	VUNPCKHPS Z9, Z8, Z25;                    \
	VUNPCKLPS Z11, Z10, Z26;                  \
	VUNPCKHPS Z11, Z10, Z27;                  \
	VUNPCKLPS Z13, Z12, Z28;                  \
	VUNPCKHPS Z13, Z12, Z29;                  \
	VUNPCKLPS Z15, Z14, Z30;                  \
	VUNPCKHPS Z15, Z14, Z31;                  \
	VSHUFPS   $0x44, Z18, Z16, Z0;            \
	VSHUFPS   $0xEE, Z18, Z16, Z1;            \
	VSHUFPS   $0x44, Z19, Z17, Z2;            \
	VSHUFPS   $0xEE, Z19, Z17, Z3;            \
	VSHUFPS   $0x44, Z22, Z20, Z4;            \
	VSHUFPS   $0xEE, Z22, Z20, Z5;            \
	VSHUFPS   $0x44, Z23, Z21, Z6;            \
	VSHUFPS   $0xEE, Z23, Z21, Z7;            \
	VSHUFPS   $0x44, Z26, Z24, Z8;            \
	VSHUFPS   $0xEE, Z26, Z24, Z9;            \
	VSHUFPS   $0x44, Z27, Z25, Z10;           \
	VSHUFPS   $0xEE, Z27, Z25, Z11;           \
	VSHUFPS   $0x44, Z30, Z28, Z12;           \
	VSHUFPS   $0xEE, Z30, Z28, Z13;           \
	VSHUFPS   $0x44, Z31, Z29, Z14;           \
	VSHUFPS   $0xEE, Z31, Z29, Z15;           \
	VSHUFF32X4 $0x88, Z4, Z0, Z16;            \
	VSHUFF32X4 $0x88, Z5, Z1, Z17;            \
	VSHUFF32X4 $0x88, Z6, Z2, Z18;            \
	VSHUFF32X4 $0x88, Z7, Z3, Z19;            \
	VSHUFF32X4 $0xDD, Z4, Z0, Z20;            \
	VSHUFF32X4 $0xDD, Z5, Z1, Z21;            \
	VSHUFF32X4 $0xDD, Z6, Z2, Z22;            \
	VSHUFF32X4 $0xDD, Z7, Z3, Z23;            \
	VSHUFF32X4 $0x88, Z12, Z8, Z24;           \
	VSHUFF32X4 $0x88, Z13, Z9, Z25;           \
	VSHUFF32X4 $0x88, Z14, Z10, Z26;          \
	VSHUFF32X4 $0x88, Z15, Z11, Z27;          \
	VSHUFF32X4 $0xDD, Z12, Z8, Z28;           \
	VSHUFF32X4 $0xDD, Z13, Z9, Z29;           \
	VSHUFF32X4 $0xDD, Z14, Z10, Z30;          \
	VSHUFF32X4 $0xDD, Z15, Z11, Z31;          \
	VSHUFF32X4 $0x88, Z24, Z16, Z0;           \
	VSHUFF32X4 $0x88, Z25, Z17, Z1;           \
	VSHUFF32X4 $0x88, Z26, Z18, Z2;           \
	VSHUFF32X4 $0x88, Z27, Z19, Z3;           \
	VSHUFF32X4 $0x88, Z28, Z20, Z4;           \
	VSHUFF32X4 $0x88, Z29, Z21, Z5;           \
	VSHUFF32X4 $0x88, Z30, Z22, Z6;           \
	VSHUFF32X4 $0x88, Z31, Z23, Z7;           \
	VSHUFF32X4 $0xDD, Z24, Z16, Z8;           \
	VSHUFF32X4 $0xDD, Z25, Z17, Z9;           \
	VSHUFF32X4 $0xDD, Z26, Z18, Z10;          \
	VSHUFF32X4 $0xDD, Z27, Z19, Z11;          \
	VSHUFF32X4 $0xDD, Z28, Z20, Z12;          \
	VSHUFF32X4 $0xDD, Z29, Z21, Z13;          \
	VSHUFF32X4 $0xDD, Z30, Z22, Z14;          \
	VSHUFF32X4 $0xDD, Z31, Z23, Z15

// Row addressing for the transposes: rows 0-7 at SI, rows 8-15 at DI =
// SI + 8·lds, with R8 = lds, R9 = 3·lds, R10 = 5·lds, R11 = 7·lds (bytes).
#define ROWSETUP                  \
	SHLQ $2, R8;              \
	LEAQ (R8)(R8*2), R9;      \
	LEAQ (R8)(R8*4), R10;     \
	LEAQ (R9)(R8*4), R11;     \
	LEAQ (SI)(R8*8), DI

// ---------------------------------------------------------------------------
// Hand-encoded instructions. The Go assembler knows neither the AVX512-BF16
// instructions nor AMX, so these macros emit their bytes. Arguments are
// register numbers: 0-31 for Z registers; for general registers AX=0,
// CX=1, DX=2, BX=3, SP=4, BP=5, SI=6, DI=7, R8-R15=8-15; 0-7 for the AMX
// tiles TMM0-TMM7. Each encoding was checked against GNU objdump 2.40 (see
// TestGemmBF16Encodings's doc comment for the commands).
//
// EVEX prefix (Intel SDM vol. 2, 2.7.1), for a 512-bit register-to-
// register instruction in map 0F38 with W0:
//
//	62                      escape
//	P0 = R X B R' 0 0 1 0   R, R' = bits 3 and 4 of ModRM.reg, inverted;
//	                        B, X = bits 3 and 4 of ModRM.rm, inverted;
//	                        mm = 10 (0F38)
//	P1 = W vvvv 1 pp        W0; vvvv = bits 0-3 of the NDS operand,
//	                        inverted; pp = 10 (F3) or 11 (F2)
//	P2 = z L'L b V' aaa     L'L = 10 (512 bits); b = 1 for a broadcast;
//	                        V' = bit 4 of the NDS operand, inverted;
//	                        aaa = 000 (no mask)
//	opcode, ModRM = 11 reg rm
//
// In Intel operand order "op d, s1, s2" d is ModRM.reg, s1 is vvvv (NDS)
// and s2 is ModRM.rm.
#define EVEX_RRR(pp, opc, d, s1, s2) \
	BYTE $0x62; \
	BYTE $((1-(((d)>>3)&1))<<7 | (1-(((s2)>>4)&1))<<6 | (1-(((s2)>>3)&1))<<5 | (1-(((d)>>4)&1))<<4 | 2); \
	BYTE $((15-((s1)&15))<<3 | 4 | (pp)); \
	BYTE $(0x40 | (1-(((s1)>>4)&1))<<3); \
	BYTE $(opc); \
	BYTE $(0xC0 | ((d)&7)<<3 | ((s2)&7))

// VCVTNE2PS2BF16 zd, zs1, zs2 (EVEX.512.F2.0F38.W0 72 /r): zd's bf16
// words 0-15 = zs2's floats rounded to bf16 (nearest even), words 16-31 =
// zs1's. Denormal inputs become signed zeros; NaNs stay NaN (quieted).
#define VCVTNE2PS2BF16(d, s1, s2) EVEX_RRR(3, 0x72, d, s1, s2)

// VCVTNEPS2BF16 yd, zs (EVEX.512.F3.0F38.W0 72 /r): the 16 floats of zs
// rounded to the 16 bf16 words of yd, as VCVTNE2PS2BF16 does. vvvv is
// unused (1111, so s1 = 0 in the macro).
#define VCVTNEPS2BF16(d, s) EVEX_RRR(2, 0x72, d, 0, s)

// VDPBF16PS zd, zs1, zs2 (EVEX.512.F3.0F38.W0 52 /r): for each float lane
// i, zd[i] += zs1.bf16[2i]·zs2.bf16[2i] + zs1.bf16[2i+1]·zs2.bf16[2i+1].
#define VDPBF16PS(d, s1, s2) EVEX_RRR(2, 0x52, d, s1, s2)

// VDPBF16PS zd, zs1, disp(base){1to16}: the same with one bf16 pair at
// disp(base) broadcast to every lane. ModRM mod = 01 with an 8-bit
// displacement scaled by 4 (EVEX disp8*N compression, N = 4 for a 32-bit
// broadcast), so disp is a multiple of 4 in [-512, 508]; P2.b = 1. base is
// a general register other than SP and R12 (which would need a SIB byte).
#define VDPBF16PS_BCST(d, s1, base, disp) \
	BYTE $0x62; \
	BYTE $((1-(((d)>>3)&1))<<7 | 1<<6 | (1-(((base)>>3)&1))<<5 | (1-(((d)>>4)&1))<<4 | 2); \
	BYTE $((15-((s1)&15))<<3 | 4 | 2); \
	BYTE $(0x40 | 0x10 | (1-(((s1)>>4)&1))<<3); \
	BYTE $0x52; \
	BYTE $(0x40 | ((d)&7)<<3 | ((base)&7)); \
	BYTE $((((disp)+1024)>>2)&255) // disp/4 as a byte; disp + 1024 keeps the shift unsigned

// AMX (Intel SDM vol. 2, "TILELOADD" etc.): three-byte VEX prefix
//
//	C4
//	R X B m-mmmm            inverted R, X, B; m-mmmm = 00010 (0F38)
//	W vvvv L pp             W0; vvvv inverted (1111 when unused); L0;
//	                        pp = 00 (none), 01 (66), 10 (F3), 11 (F2)
//	opcode, ModRM [, SIB, disp32]

// LDTILECFG (AX): VEX.128.NP.0F38.W0 49 /0, ModRM 00 000 000 — load the
// 64-byte tile configuration at AX.
#define LDTILECFG_AX BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0x00

// TILERELEASE: VEX.128.NP.0F38.W0 49 C0 — return the tiles to their
// initial state (configuration and data cleared).
#define TILERELEASE BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0xC0

// TILEZERO tmm(t): VEX.128.F2.0F38.W0 49, ModRM 11 ttt 000.
#define TILEZERO(t) BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $(0xC0 | (t)<<3)

// TILELOADD tmm(t), disp(base)(index*1): VEX.128.F2.0F38.W0 4B, ModRM
// 10 ttt 100 (SIB with a 32-bit displacement), SIB 00 index base. Row r of
// the tile is read from base + disp + r·index. index is not SP.
#define TILELOADD(t, base, index, disp) \
	BYTE $0xC4; \
	BYTE $(0x80 | (1-((index)>>3))<<6 | (1-((base)>>3))<<5 | 2); \
	BYTE $0x7B; BYTE $0x4B; \
	BYTE $(0x84 | (t)<<3); \
	BYTE $(((index)&7)<<3 | ((base)&7)); \
	LONG $(disp)

// TILESTORED disp(base)(index*1), tmm(t): VEX.128.F3.0F38.W0 4B, encoded
// as TILELOADD.
#define TILESTORED(base, index, disp, t) \
	BYTE $0xC4; \
	BYTE $(0x80 | (1-((index)>>3))<<6 | (1-((base)>>3))<<5 | 2); \
	BYTE $0x7A; BYTE $0x4B; \
	BYTE $(0x84 | (t)<<3); \
	BYTE $(((index)&7)<<3 | ((base)&7)); \
	LONG $(disp)

// TDPBF16PS tmm(c), tmm(a), tmm(b): VEX.128.F3.0F38.W0 5C, vvvv = b,
// ModRM 11 ccc aaa. C (16 rows of 16 floats) += A (16 rows of 16 bf16
// pairs) · B (16 rows of 16 bf16 pairs, the pairs of K interleaved).
#define TDPBF16PS(c, a, b) BYTE $0xC4; BYTE $0xE2; BYTE $((15-(b))<<3 | 2); BYTE $0x5C; BYTE $(0xC0 | (c)<<3 | (a))

// Round the 16 floats in z to bf16 exactly as ToBF16 does, into the low
// 16 bits of each dword of Z4: add 0x7fff plus bit 16 (ties to even) and
// keep the high half, except NaNs (VFPCLASSPS: quiet 0x01 | signalling
// 0x80), which keep their high half with the quiet bit 0x40 set.
// Z29 = 1, Z30 = 0x7fff, Z31 = 0x40 (dwords); Z3 and K4 are temps.
#define RNE16(z) \
	VPSRLD      $16, z, Z3;         \
	VPANDD      Z29, Z3, Z3;        \
	VPADDD      Z30, z, Z4;         \
	VPADDD      Z3, Z4, Z4;         \
	VPSRLD      $16, Z4, Z4;        \
	VFPCLASSPSZ $0x81, z, K4;       \
	VPSRLD      $16, z, Z3;         \
	VPORD       Z31, Z3, K4, Z4

#define RNECONSTS \
	MOVL         $1, AX;      \
	VPBROADCASTD AX, Z29;     \
	MOVL         $0x7fff, AX; \
	VPBROADCASTD AX, Z30;     \
	MOVL         $0x40, AX;   \
	VPBROADCASTD AX, Z31
