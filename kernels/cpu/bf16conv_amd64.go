package cpu

import "golang.org/x/sys/cpu"

// Vector conversions for roundSliceBF16 and widenSliceBF16 (bf16conv_amd64.s).

// roundBF16AVX512BF16 sets dst[i] = ToBF16(src[i]) for i < n (AVX-512F,
// BW, DQ and BF16).
//
//go:noescape
func roundBF16AVX512BF16(dst *uint16, src *float32, n int)

// roundBF16AVX512 sets dst[i] = ToBF16(src[i]) for i < n (AVX-512F, BW
// and DQ).
//
//go:noescape
func roundBF16AVX512(dst *uint16, src *float32, n int)

// widenBF16AVX512 sets dst[i] = FromBF16(src[i]) for i < n (AVX-512F and
// BW).
//
//go:noescape
func widenBF16AVX512(dst *float32, src *uint16, n int)

// roundF32BF16AVX512 sets dst[i] = FromBF16(ToBF16(src[i])) for i < n
// (AVX-512F, BW and DQ); dst may be src.
//
//go:noescape
func roundF32BF16AVX512(dst, src *float32, n int)

// roundF32BF16Vec sets dst[i] = FromBF16(ToBF16(src[i])) (equal lengths)
// with a vector routine and reports whether there was one.
func roundF32BF16Vec(dst, src []float32) bool {
	switch {
	case len(src) == 0:
		return true
	case bf16HasAVX512:
		roundF32BF16AVX512(&dst[0], &src[0], len(src))
	default:
		return false
	}
	return true
}

var (
	bf16HasAVX512   = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ
	bf16HasBF16Conv = bf16HasAVX512 && cpu.X86.HasAVX512BF16
)

// roundBF16Vec rounds src into dst (equal lengths) with the best vector
// routine of this CPU and reports whether there was one.
func roundBF16Vec(dst []uint16, src []float32) bool {
	switch {
	case len(src) == 0:
		return true
	case bf16HasBF16Conv:
		roundBF16AVX512BF16(&dst[0], &src[0], len(src))
	case bf16HasAVX512:
		roundBF16AVX512(&dst[0], &src[0], len(src))
	default:
		return false
	}
	return true
}

// widenBF16Vec widens src into dst (equal lengths) with a vector routine
// and reports whether there was one.
func widenBF16Vec(dst []float32, src []uint16) bool {
	switch {
	case len(src) == 0:
		return true
	case bf16HasAVX512:
		widenBF16AVX512(&dst[0], &src[0], len(src))
	default:
		return false
	}
	return true
}
