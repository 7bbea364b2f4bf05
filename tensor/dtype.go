package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// DType is an element type, spelled as in safetensors headers.
type DType string

// The element types a checkpoint may hold. ReadF32 converts the float ones (F64, F32, F16, BF16,
// F8_E4M3, F8_E5M2) to float32; ReadI64 converts the integer ones and BOOL to int64.
const (
	F64    DType = "F64"
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	F8E4M3 DType = "F8_E4M3" // float8 e4m3fn: bias 7, no infinities, NaN = S.1111.111
	F8E5M2 DType = "F8_E5M2" // float8 e5m2: the high byte of a float16
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U64    DType = "U64"
	U32    DType = "U32"
	U16    DType = "U16"
	U8     DType = "U8"
	BOOL   DType = "BOOL"
)

// dtypeInfo describes a known DType: its size in bytes, whether it is a float, and its rank in the
// Hugging Face writer's order (the Rust enum's declaration order, by increasing alignment).
type dtypeInfo struct {
	size  int
	float bool
	rank  int
}

var dtypes = map[DType]dtypeInfo{
	BOOL:   {1, false, 0},
	U8:     {1, false, 1},
	I8:     {1, false, 2},
	F8E5M2: {1, true, 3},
	F8E4M3: {1, true, 4},
	I16:    {2, false, 5},
	U16:    {2, false, 6},
	F16:    {2, true, 7},
	BF16:   {2, true, 8},
	I32:    {4, false, 9},
	U32:    {4, false, 10},
	F32:    {4, true, 11},
	F64:    {8, true, 12},
	I64:    {8, false, 13},
	U64:    {8, false, 14},
}

// Size returns the size of one element in bytes, or 0 for an unknown DType.
func (d DType) Size() int { return dtypes[d].size }

// IsFloat reports whether d is a floating-point type (one ReadF32 accepts).
func (d DType) IsFloat() bool { return dtypes[d].float }

func (d DType) known() bool { _, ok := dtypes[d]; return ok }

// F16ToF32 returns the float32 value of IEEE 754 binary16 bits h. The conversion is exact:
// subnormals, signed zeros and infinities map to the same values, and a NaN stays a NaN with its
// sign and payload (shifted into the high mantissa bits).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0: // signed zero
		return math.Float32frombits(sign)
	}
	// Subnormal: mant·2⁻²⁴; normalise so the leading 1 becomes the implicit bit.
	e := uint32(127 - 15 + 1)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// F32ToF16 returns the IEEE 754 binary16 bits nearest to f, rounding ties to even. Values beyond
// the half range become ±Inf, values below half the smallest subnormal become ±0, and a NaN stays a
// NaN (quieted, sign and high payload bits kept, as x86 F16C does).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // biased half exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e >= 1 { // normal half (before rounding)
		h := uint32(e)<<10 | mant>>13
		rem := mant & 0x1fff
		if rem > 0x1000 || rem == 0x1000 && h&1 != 0 {
			h++ // may carry into the exponent, up to Inf: exactly right
		}
		return sign | uint16(h)
	}
	// Subnormal half: value = m·2^(exp-150) with the implicit bit; unit 2⁻²⁴.
	if exp == 0 {
		return sign // float32 subnormals are far below the half range
	}
	m := mant | 0x800000
	shift := uint(14 - e) // 14 for e == 0
	if shift > 24 {
		return sign
	}
	h := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && h&1 != 0 {
		h++
	}
	return sign | uint16(h)
}

// BF16ToF32 returns the float32 value of bfloat16 bits h (exact: the bits shifted left by 16).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 returns the bfloat16 bits nearest to f, rounding ties to even; overflow rounds to ±Inf
// and a NaN stays a NaN (quieted, sign and high payload bits kept).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F16ToF32Slice converts len(src) float16 values to float32; len(dst) must be at least len(src).
func F16ToF32Slice(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	t := f16Table()
	for i, h := range src {
		dst[i] = t[h]
	}
}

// F32ToF16Slice converts len(src) float32 values to float16 bits; len(dst) must be at least len(src).
func F32ToF16Slice(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = F32ToF16(f)
	}
}

// BF16ToF32Slice converts len(src) bfloat16 values to float32; len(dst) must be at least len(src).
func BF16ToF32Slice(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = BF16ToF32(h)
	}
}

// F32ToBF16Slice converts len(src) float32 values to bfloat16 bits; len(dst) must be at least
// len(src).
func F32ToBF16Slice(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = F32ToBF16(f)
	}
}

// f8e4m3ToF32 converts float8 e4m3fn bits (bias 7, no infinities, S.1111.111 is NaN).
func f8e4m3ToF32(b byte) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	exp := int(b>>3) & 0xf
	mant := float32(b & 7)
	switch {
	case exp == 0xf && b&7 == 7:
		return float32(math.NaN()) * sign
	case exp == 0:
		return sign * mant / 8 * (1.0 / 64) // 2⁻⁶
	}
	return sign * (1 + mant/8) * float32(math.Ldexp(1, exp-7))
}

// f16Table holds F16ToF32 of every half (256 KiB), built on first use: a lookup is several times
// faster than the bit manipulation when converting whole tensors.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = F16ToF32(uint16(i))
	}
	return &t
})

// decodeF32 converts the little-endian elements in src, of float type dt, into dst
// (len(dst)·dt.Size() == len(src)).
func decodeF32(dst []float32, src []byte, dt DType) {
	le := binary.LittleEndian
	switch dt {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(src[4*i:]))
		}
	case F16:
		t := f16Table()
		for i := range dst {
			dst[i] = t[le.Uint16(src[2*i:])]
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(le.Uint16(src[2*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(le.Uint64(src[8*i:])))
		}
	case F8E5M2:
		for i := range dst {
			dst[i] = F16ToF32(uint16(src[i]) << 8)
		}
	case F8E4M3:
		for i := range dst {
			dst[i] = f8e4m3ToF32(src[i])
		}
	default:
		panic(fmt.Sprintf("tensor: decodeF32 of %s", dt))
	}
}

// decodeI64 converts the little-endian elements in src, of integer type dt (or BOOL), into dst.
// U64 values above MaxInt64 wrap, as a bit cast.
func decodeI64(dst []int64, src []byte, dt DType) {
	le := binary.LittleEndian
	switch dt {
	case I64, U64:
		for i := range dst {
			dst[i] = int64(le.Uint64(src[8*i:]))
		}
	case I32:
		for i := range dst {
			dst[i] = int64(int32(le.Uint32(src[4*i:])))
		}
	case U32:
		for i := range dst {
			dst[i] = int64(le.Uint32(src[4*i:]))
		}
	case I16:
		for i := range dst {
			dst[i] = int64(int16(le.Uint16(src[2*i:])))
		}
	case U16:
		for i := range dst {
			dst[i] = int64(le.Uint16(src[2*i:]))
		}
	case I8:
		for i := range dst {
			dst[i] = int64(int8(src[i]))
		}
	case U8, BOOL:
		for i := range dst {
			dst[i] = int64(src[i])
		}
	default:
		panic(fmt.Sprintf("tensor: decodeI64 of %s", dt))
	}
}

// encodeF32 writes src converted to float type dt (F32, F16 or BF16) into dst as little-endian
// bytes (len(dst) == len(src)·dt.Size()).
func encodeF32(dst []byte, src []float32, dt DType) {
	le := binary.LittleEndian
	switch dt {
	case F32:
		for i, f := range src {
			le.PutUint32(dst[4*i:], math.Float32bits(f))
		}
	case F16:
		for i, f := range src {
			le.PutUint16(dst[2*i:], F32ToF16(f))
		}
	case BF16:
		for i, f := range src {
			le.PutUint16(dst[2*i:], F32ToBF16(f))
		}
	default:
		panic(fmt.Sprintf("tensor: encodeF32 to %s", dt))
	}
}
