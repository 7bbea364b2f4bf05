//go:build !amd64

package cpu

// haveVecAsm is false: only the portable Go primitives exist here.
const haveVecAsm = false

func maxAVX512(x []float32) float32                                         { panic("unreachable") }
func expSumAVX512(x []float32, m float32) float32                           { panic("unreachable") }
func expStoreAVX512(dst, x []float32, m float32) float32                    { panic("unreachable") }
func scaleAVX512(x []float32, s float32)                                    { panic("unreachable") }
func dotsAVX512(dst []float32, q, k *float32, stride, hs int)               { panic("unreachable") }
func gemvTAVX512(out *float32, p []float32, v *float32, stride, hs int)     { panic("unreachable") }
func rank1AVX512(dst *float32, stride int, a []float32, x *float32, hs int) { panic("unreachable") }

func dots4AVX512(dst *float32, ldd int, q *float32, ldq int, k *float32, ldk int, n, hs int) {
	panic("unreachable")
}
func gemvT4AVX512(out *float32, ldo int, p *float32, ldp int, v *float32, ldv int, n, hs int) {
	panic("unreachable")
}
func rank4AVX512(dst *float32, ldd int, a *float32, lda int, x *float32, ldx int, n, hs int) {
	panic("unreachable")
}

func maxAVX2(x []float32) float32                                         { panic("unreachable") }
func expSumAVX2(x []float32, m float32) float32                           { panic("unreachable") }
func expStoreAVX2(dst, x []float32, m float32) float32                    { panic("unreachable") }
func scaleAVX2(x []float32, s float32)                                    { panic("unreachable") }
func dotsAVX2(dst []float32, q, k *float32, stride, hs int)               { panic("unreachable") }
func gemvTAVX2(out *float32, p []float32, v *float32, stride, hs int)     { panic("unreachable") }
func rank1AVX2(dst *float32, stride int, a []float32, x *float32, hs int) { panic("unreachable") }

func dots4AVX2(dst *float32, ldd int, q *float32, ldq int, k *float32, ldk int, n, hs int) {
	panic("unreachable")
}
func gemvT4AVX2(out *float32, ldo int, p *float32, ldp int, v *float32, ldv int, n, hs int) {
	panic("unreachable")
}
func rank4AVX2(dst *float32, ldd int, a *float32, lda int, x *float32, ldx int, n, hs int) {
	panic("unreachable")
}

func reluAVX2(dst, x []float32)        { panic("unreachable") }
func reluGradAVX2(dx, dy, y []float32) { panic("unreachable") }

func lnNormAVX512(o, x, w, b []float32, m, r float64)                     { panic("unreachable") }
func lnDxAVX512(dx, dy, x, w []float32, m, r, sg, sgn float64)            { panic("unreachable") }
func lnColSumsAVX512(accW, accB []float64, dy, x []float32, m, r float64) { panic("unreachable") }
