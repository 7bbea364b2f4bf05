//go:build amd64

package cpu

// haveVecAsm is true: vec_amd64.s provides the AVX-512 primitives and
// vec_avx2_amd64.s their AVX2+FMA twins.
const haveVecAsm = true

// maxAVX512 returns max(x); len(x) > 0.
//
//go:noescape
func maxAVX512(x []float32) float32

// expSumAVX512 returns Σ exp(x[j]-m), summed in 64 float32 lanes.
//
//go:noescape
func expSumAVX512(x []float32, m float32) float32

// expStoreAVX512 sets dst[j] = exp(x[j]-m) and returns the sum; len(dst) >=
// len(x), and dst may be x.
//
//go:noescape
func expStoreAVX512(dst, x []float32, m float32) float32

// scaleAVX512 sets x[j] *= s.
//
//go:noescape
func scaleAVX512(x []float32, s float32)

// dotsAVX512 sets dst[j] = Σ_c q[c]·k[j*stride+c] for c < hs; hs%16 == 0.
//
//go:noescape
func dotsAVX512(dst []float32, q, k *float32, stride, hs int)

// gemvTAVX512 adds Σ_j p[j]·v[j*stride+c] to out[c] for c < hs; hs%16 == 0.
//
//go:noescape
func gemvTAVX512(out *float32, p []float32, v *float32, stride, hs int)

// rank1AVX512 adds a[j]·x[c] to dst[j*stride+c] for c < hs; hs%16 == 0.
//
//go:noescape
func rank1AVX512(dst *float32, stride int, a []float32, x *float32, hs int)

// dots4AVX512 sets dst[r*ldd+j] = q[r*ldq:][:hs]·k[j*ldk:][:hs] for r < 4,
// j < n; hs%16 == 0. Each product is bit-identical to dotsAVX512's.
//
//go:noescape
func dots4AVX512(dst *float32, ldd int, q *float32, ldq int, k *float32, ldk int, n, hs int)

// gemvT4AVX512 adds Σ_j p[r*ldp+j]·v[j*ldv:][:hs] to out[r*ldo:][:hs] for
// r < 4; hs%16 == 0. Per row bit-identical to gemvTAVX512.
//
//go:noescape
func gemvT4AVX512(out *float32, ldo int, p *float32, ldp int, v *float32, ldv int, n, hs int)

// rank4AVX512 adds a[r*lda+j]·x[r*ldx:][:hs] to dst[j*ldd:][:hs] for j < n
// and r = 0..3 in order; hs%16 == 0. Bit-identical to four rank1AVX512 calls.
//
//go:noescape
func rank4AVX512(dst *float32, ldd int, a *float32, lda int, x *float32, ldx int, n, hs int)

// The AVX2+FMA versions, in vec_avx2_amd64.s, for CPUs without AVX-512.
// Each computes bit for bit what its AVX-512 namesake does.

// maxAVX2 returns max(x); len(x) > 0.
//
//go:noescape
func maxAVX2(x []float32) float32

// expSumAVX2 returns Σ exp(x[j]-m), summed in 64 float32 lanes.
//
//go:noescape
func expSumAVX2(x []float32, m float32) float32

// expStoreAVX2 sets dst[j] = exp(x[j]-m) and returns the sum; len(dst) >=
// len(x), and dst may be x.
//
//go:noescape
func expStoreAVX2(dst, x []float32, m float32) float32

// scaleAVX2 sets x[j] *= s.
//
//go:noescape
func scaleAVX2(x []float32, s float32)

// dotsAVX2 sets dst[j] = Σ_c q[c]·k[j*stride+c] for c < hs; hs%16 == 0.
//
//go:noescape
func dotsAVX2(dst []float32, q, k *float32, stride, hs int)

// gemvTAVX2 adds Σ_j p[j]·v[j*stride+c] to out[c] for c < hs; hs%16 == 0.
//
//go:noescape
func gemvTAVX2(out *float32, p []float32, v *float32, stride, hs int)

// rank1AVX2 adds a[j]·x[c] to dst[j*stride+c] for c < hs; hs%16 == 0.
//
//go:noescape
func rank1AVX2(dst *float32, stride int, a []float32, x *float32, hs int)

// dots4AVX2 is dots4AVX512 on AVX2; hs%16 == 0.
//
//go:noescape
func dots4AVX2(dst *float32, ldd int, q *float32, ldq int, k *float32, ldk int, n, hs int)

// gemvT4AVX2 is gemvT4AVX512 on AVX2; hs%16 == 0.
//
//go:noescape
func gemvT4AVX2(out *float32, ldo int, p *float32, ldp int, v *float32, ldv int, n, hs int)

// rank4AVX2 is rank4AVX512 on AVX2; hs%16 == 0.
//
//go:noescape
func rank4AVX2(dst *float32, ldd int, a *float32, lda int, x *float32, ldx int, n, hs int)

// reluAVX2 sets dst[i] = x[i], or +0 where x[i] < 0 (a NaN and -0 pass), as
// ReLUForward's Go loop does; len(x)%8 == 0. Memory-bound: it serves the
// AVX-512 CPUs too.
//
//go:noescape
func reluAVX2(dst, x []float32)

// reluGradAVX2 sets dx[i] = dy[i] where y[i] > 0, else +0, as
// ReLUBackward's Go loop does; len(y)%8 == 0; dx may be dy.
//
//go:noescape
func reluGradAVX2(dx, dy, y []float32)
