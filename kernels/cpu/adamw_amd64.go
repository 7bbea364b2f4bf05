package cpu

import "math"

// adamWKernel is what the AVX-512 AdamW routines (adamw_amd64.s) read: the
// step's scalars, the lerp's coefficient in float64 and which end it
// starts from (fromEnd: 0xffff, a lane mask, for the end; 0 for the start).
type adamWKernel struct {
	u       adamWUpdate
	lc      float64
	fromEnd uint16
}

// adamwAVX512 runs adamWUpdate.apply on p[i], grad[i], m[i], v[i] for i < n
// (AVX-512F and DQ).
//
//go:noescape
func adamwAVX512(p, grad, m, v *float32, n int, k *adamWKernel)

// adamwBF16AVX512 is adamwAVX512 on the fp32 master weights
// JoinMaster(p[i], lo[i]), split back into p and lo (AVX-512F, BW and DQ).
//
//go:noescape
func adamwBF16AVX512(p, lo *uint16, grad, m, v *float32, n int, k *adamWKernel)

// adamWVec runs AdamW with the AVX-512 routines and reports whether it
// could (false: the device's ISA is below AVX-512, or the CPU lacks it).
// lo is nil for fp32 parameters (pf); bf16 parameters (ph) have halves lo.
func (d *Device) adamWVec(u *adamWUpdate, pf []float32, ph, lo []uint16, g, m, v []float32) bool {
	if !d.avx512Streams() {
		return false
	}
	n := len(g)
	if n == 0 {
		return true
	}
	k := adamWKernel{u: *u, lc: float64(u.w1)}
	if math.Abs(float64(u.w1)) >= 0.5 {
		k.lc, k.fromEnd = float64(u.w1-1), 0xffff
	}
	if lo == nil {
		adamwAVX512(&pf[0], &g[0], &m[0], &v[0], n, &k)
	} else {
		adamwBF16AVX512(&ph[0], &lo[0], &g[0], &m[0], &v[0], n, &k)
	}
	return true
}

// sumSquaresAVX512 returns Σ x[i]² for i < n, summed exactly as
// goSumSquares sums (AVX-512F and DQ).
//
//go:noescape
func sumSquaresAVX512(x *float32, n int) float64

// sumSquaresVec sets *s to goSumSquares(x) computed with AVX-512 and
// reports whether it could.
func (d *Device) sumSquaresVec(x []float32, s *float64) bool {
	if !d.avx512Streams() {
		return false
	}
	if len(x) == 0 {
		*s = 0
		return true
	}
	*s = sumSquaresAVX512(&x[0], len(x))
	return true
}

// avx512Streams reports whether the AVX-512 routines of this file may run:
// the device's ISA allows AVX-512 and the CPU has F, BW and DQ.
func (d *Device) avx512Streams() bool { return d.isa >= isaAVX512 && bf16HasAVX512 }
