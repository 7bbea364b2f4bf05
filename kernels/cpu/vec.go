package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

// Vector primitives shared by the row kernels (softmax, cross-entropy,
// attention). Each has a portable Go version (go*) and, on amd64, an AVX-512
// version in vec_amd64.s and an AVX2+FMA one in vec_avx2_amd64.s that
// computes bit for bit what the AVX-512 one does; the Device methods below
// pick one from d.isa, so Options{ISA: "avx2"} runs the AVX2 code and
// Options{ISA: "generic"} the portable code everywhere.

// vecISA is the instruction set the vector primitives use: AVX-512 (F and
// VL; every AVX-512 CPU but the Xeon Phi has both), else AVX2 with FMA, else
// the portable Go code; never more than d.isa.
func (d *Device) vecISA() isa {
	switch {
	case !haveVecAsm:
		return isaGeneric
	case d.isa >= isaAVX512 && cpu.X86.HasAVX512VL:
		return isaAVX512
	case d.isa >= isaAVX2 && cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return isaAVX2
	}
	return isaGeneric
}

// rowMax returns max(x); x must not be empty.
func (d *Device) rowMax(x []float32) float32 {
	switch d.vecISA() {
	case isaAVX512:
		return maxAVX512(x)
	case isaAVX2:
		return maxAVX2(x)
	}
	return goMax(x)
}

// rowExpSum returns Σ exp(x[j]-m).
func (d *Device) rowExpSum(x []float32, m float32) float64 {
	switch d.vecISA() {
	case isaAVX512:
		return float64(expSumAVX512(x, m))
	case isaAVX2:
		return float64(expSumAVX2(x, m))
	}
	return goExpSum(x, m)
}

// rowExpStore sets dst[j] = exp(x[j]-m) and returns their sum. dst may be x.
func (d *Device) rowExpStore(dst, x []float32, m float32) float64 {
	dst = dst[:len(x)]
	switch d.vecISA() {
	case isaAVX512:
		return float64(expStoreAVX512(dst, x, m))
	case isaAVX2:
		return float64(expStoreAVX2(dst, x, m))
	}
	return goExpStore(dst, x, m)
}

// rowScale sets x[j] *= s.
func (d *Device) rowScale(x []float32, s float32) {
	switch d.vecISA() {
	case isaAVX512:
		scaleAVX512(x, s)
		return
	case isaAVX2:
		scaleAVX2(x, s)
		return
	}
	for j := range x {
		x[j] *= s
	}
}

// dots sets dst[j] = q·k[j*stride : j*stride+len(q)] for j < len(dst).
func (d *Device) dots(dst, q, k []float32, stride int) {
	if len(dst) == 0 {
		return
	}
	hs := len(q)
	_ = k[(len(dst)-1)*stride+hs-1]
	if hs%16 == 0 {
		switch d.vecISA() {
		case isaAVX512:
			dotsAVX512(dst, &q[0], &k[0], stride, hs)
			return
		case isaAVX2:
			dotsAVX2(dst, &q[0], &k[0], stride, hs)
			return
		}
	}
	goDots(dst, q, k, stride)
}

// gemvT adds Σ_j p[j]·v[j*stride : j*stride+len(out)] to out.
func (d *Device) gemvT(out, p, v []float32, stride int) {
	if len(p) == 0 {
		return
	}
	hs := len(out)
	_ = v[(len(p)-1)*stride+hs-1]
	if hs%16 == 0 {
		switch d.vecISA() {
		case isaAVX512:
			gemvTAVX512(&out[0], p, &v[0], stride, hs)
			return
		case isaAVX2:
			gemvTAVX2(&out[0], p, &v[0], stride, hs)
			return
		}
	}
	goGemvT(out, p, v, stride)
}

// rank1 adds a[j]·x to dst[j*stride : j*stride+len(x)] for j < len(a).
func (d *Device) rank1(dst []float32, stride int, a, x []float32) {
	if len(a) == 0 {
		return
	}
	hs := len(x)
	_ = dst[(len(a)-1)*stride+hs-1]
	if hs%16 == 0 {
		switch d.vecISA() {
		case isaAVX512:
			rank1AVX512(&dst[0], stride, a, &x[0], hs)
			return
		case isaAVX2:
			rank1AVX2(&dst[0], stride, a, &x[0], hs)
			return
		}
	}
	goRank1(dst, stride, a, x)
}

// dots4 is dots for four queries at once: dst[r*ldd+j] = q[r*ldq:][:hs]·
// k[j*stride:][:hs] for r < 4, j < n. Each element is bit-identical to what
// dots computes for it.
func (d *Device) dots4(dst []float32, ldd int, q []float32, ldq int, k []float32, stride, n, hs int) {
	if n == 0 {
		return
	}
	_ = dst[3*ldd+n-1]
	_ = q[3*ldq+hs-1]
	_ = k[(n-1)*stride+hs-1]
	if hs%16 == 0 {
		switch d.vecISA() {
		case isaAVX512:
			dots4AVX512(&dst[0], ldd, &q[0], ldq, &k[0], stride, n, hs)
			return
		case isaAVX2:
			dots4AVX2(&dst[0], ldd, &q[0], ldq, &k[0], stride, n, hs)
			return
		}
	}
	for r := range 4 {
		goDots(dst[r*ldd:r*ldd+n], q[r*ldq:r*ldq+hs], k, stride)
	}
}

// gemvT4 is gemvT for four rows: out[r*ldo:][:hs] += Σ_j p[r*ldp+j]·
// v[j*stride:][:hs] for r < 4, j < n; per row bit-identical to gemvT.
func (d *Device) gemvT4(out []float32, ldo int, p []float32, ldp int, v []float32, stride, n, hs int) {
	if n == 0 {
		return
	}
	_ = out[3*ldo+hs-1]
	_ = p[3*ldp+n-1]
	_ = v[(n-1)*stride+hs-1]
	if hs%16 == 0 {
		switch d.vecISA() {
		case isaAVX512:
			gemvT4AVX512(&out[0], ldo, &p[0], ldp, &v[0], stride, n, hs)
			return
		case isaAVX2:
			gemvT4AVX2(&out[0], ldo, &p[0], ldp, &v[0], stride, n, hs)
			return
		}
	}
	for r := range 4 {
		goGemvT(out[r*ldo:r*ldo+hs], p[r*ldp:r*ldp+n], v, stride)
	}
}

// rank4 adds Σ_{r<4} a[r*lda+j]·x[r*ldx:][:hs] to dst[j*stride:][:hs] for
// j < n, bit-identical to rank1 for r = 0, 1, 2, 3 in turn.
func (d *Device) rank4(dst []float32, stride int, a []float32, lda int, x []float32, ldx, n, hs int) {
	if n == 0 {
		return
	}
	_ = dst[(n-1)*stride+hs-1]
	_ = a[3*lda+n-1]
	_ = x[3*ldx+hs-1]
	if hs%16 == 0 {
		switch d.vecISA() {
		case isaAVX512:
			rank4AVX512(&dst[0], stride, &a[0], lda, &x[0], ldx, n, hs)
			return
		case isaAVX2:
			rank4AVX2(&dst[0], stride, &a[0], lda, &x[0], ldx, n, hs)
			return
		}
	}
	for r := range 4 {
		goRank1(dst, stride, a[r*lda:r*lda+n], x[r*ldx:r*ldx+hs])
	}
}

func goMax(x []float32) float32 {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	return m
}

func goExpSum(x []float32, m float32) float64 {
	var s0, s1 float32
	j := 0
	for ; j+1 < len(x); j += 2 {
		s0 += expf(x[j] - m)
		s1 += expf(x[j+1] - m)
	}
	if j < len(x) {
		s0 += expf(x[j] - m)
	}
	return float64(s0) + float64(s1)
}

func goExpStore(dst, x []float32, m float32) float64 {
	var s0, s1 float32
	dst = dst[:len(x)]
	j := 0
	for ; j+1 < len(x); j += 2 {
		e0, e1 := expf(x[j]-m), expf(x[j+1]-m)
		dst[j], dst[j+1] = e0, e1
		s0 += e0
		s1 += e1
	}
	if j < len(x) {
		e := expf(x[j] - m)
		dst[j] = e
		s0 += e
	}
	return float64(s0) + float64(s1)
}

func goDots(dst, q, k []float32, stride int) {
	hs := len(q)
	for j := range dst {
		kr := k[j*stride : j*stride+hs]
		var s0, s1, s2, s3 float32
		c := 0
		for ; c+3 < hs; c += 4 {
			s0 += q[c] * kr[c]
			s1 += q[c+1] * kr[c+1]
			s2 += q[c+2] * kr[c+2]
			s3 += q[c+3] * kr[c+3]
		}
		for ; c < hs; c++ {
			s0 += q[c] * kr[c]
		}
		dst[j] = (s0 + s1) + (s2 + s3)
	}
}

func goGemvT(out, p, v []float32, stride int) {
	hs := len(out)
	for j, pj := range p {
		vr := v[j*stride : j*stride+hs]
		for c, x := range vr {
			out[c] += pj * x
		}
	}
}

func goRank1(dst []float32, stride int, a, x []float32) {
	hs := len(x)
	for j, aj := range a {
		r := dst[j*stride : j*stride+hs]
		for c, xc := range x {
			r[c] += aj * xc
		}
	}
}

// Constants of expf: Cephes' single-precision exp (range reduction by a
// two-part ln 2, degree-5 minimax polynomial on [-ln2/2, ln2/2]).
const (
	expLog2e = 1.44269504088896341
	expC1    = 0.693359375
	expC2    = -2.12194440e-4
	expP0    = 1.9875691500e-4
	expP1    = 1.3981999507e-3
	expP2    = 8.3334519073e-3
	expP3    = 4.1665795894e-2
	expP4    = 1.6666665459e-1
	expP5    = 5.0000001201e-1
	expHi    = 88.72283905206835  // ln(MaxFloat32)
	expLo    = -87.33654475055310 // ln(smallest normal float32)
)

// expf is a float32 exp accurate to about 1 ulp over the normal range.
// Results below the smallest normal float32 flush to 0 (the AVX-512 and AVX2
// versions return the subnormal instead; softmax sums cannot tell).
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > expHi:
		return float32(math.Inf(1))
	case x < expLo:
		return 0
	}
	t := x * expLog2e
	var e int32 // round(t), halves away from zero
	if t < 0 {
		e = int32(t - 0.5)
	} else {
		e = int32(t + 0.5)
	}
	n := float32(e)
	r := x - n*expC1
	r -= n * expC2
	y := ((((expP0*r+expP1)*r+expP2)*r+expP3)*r+expP4)*r + expP5
	y = (y*r+1)*r + 1
	if e > 127 {
		return y * 2 * math.Float32frombits(uint32(e-1+127)<<23)
	}
	if e < -126 {
		return 0
	}
	return y * math.Float32frombits(uint32(e+127)<<23)
}
