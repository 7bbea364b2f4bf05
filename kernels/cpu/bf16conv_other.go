//go:build !amd64

package cpu

// roundBF16Vec reports false: no vector conversion here.
func roundBF16Vec(dst []uint16, src []float32) bool { return false }

// widenBF16Vec reports false: no vector conversion here.
func widenBF16Vec(dst []float32, src []uint16) bool { return false }

// roundF32BF16Vec reports false: no vector conversion here.
func roundF32BF16Vec(dst, src []float32) bool { return false }
