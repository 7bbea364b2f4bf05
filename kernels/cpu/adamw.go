package cpu

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// AdamWStep is one update of PyTorch's single-tensor AdamW
// (torch.optim.AdamW, foreach=False, amsgrad=False) on n parameters at step
// (1-based), with g = grads·gradScale:
//
//	params *= 1 - lr·weightDecay
//	m = m + (1-beta1)·(g - m)                  (exp_avg.lerp_)
//	v = beta2·v + (1-beta2)·g·g                (exp_avg_sq.mul_.addcmul_)
//	denom = sqrt(v)/sqrt(1-beta2^step) + eps
//	params += (-lr/(1-beta1^step))·m / denom   (addcdiv_)
//
// The scalars (bias corrections, step size, decay factor) are computed in
// float64 and rounded to float32 as PyTorch does with its Python floats; the
// elementwise work is float32 in PyTorch's operation order. params, m and v
// are updated in place.
func (d *Device) AdamWStep(params, grads, m, v kernels.Buffer, n int, lr, beta1, beta2, eps, weightDecay, gradScale float32, step int) {
	p, g, mm, vv := f32(params)[:n], f32(grads)[:n], f32(m)[:n], f32(v)[:n]
	u := newAdamWUpdate(lr, beta1, beta2, eps, weightDecay, gradScale, step)
	d.parallelFor(n, elemGrain/2, func(lo, hi int) {
		p, g, mm, vv := p[lo:hi], g[lo:hi], mm[lo:hi], vv[lo:hi]
		if d.adamWVec(&u, p, nil, nil, g, mm, vv) {
			return
		}
		for i := range p {
			p[i], mm[i], vv[i] = u.apply(p[i], g[i], mm[i], vv[i])
		}
	})
}

// AdamWStepBF16 is AdamWStep on the fp32 master weights whose halves are
// params (rounded to nearest even) and lo (the low 16 bits, two per I32);
// see kernels.Device.
func (d *Device) AdamWStepBF16(params, lo, grads, m, v kernels.Buffer, n int, lr, beta1, beta2, eps, weightDecay, gradScale float32, step int) {
	l32 := i32(lo)
	if len(l32) < (n+1)/2 {
		panic(fmt.Sprintf("cpu: AdamWStepBF16: %d low halves in %d I32 elements", n, len(l32)))
	}
	var l []uint16
	if n > 0 {
		l = unsafe.Slice((*uint16)(unsafe.Pointer(&l32[0])), 2*len(l32))[:n] // little-endian: element 2k is lo[k]'s low half
	}
	p, g, mm, vv := bf16(params)[:n], f32(grads)[:n], f32(m)[:n], f32(v)[:n]
	u := newAdamWUpdate(lr, beta1, beta2, eps, weightDecay, gradScale, step)
	d.parallelFor(n, elemGrain/2, func(a, b int) {
		p, l, g, mm, vv := p[a:b], l[a:b], g[a:b], mm[a:b], vv[a:b]
		if d.adamWVec(&u, nil, p, l, g, mm, vv) {
			return
		}
		for i := range p {
			var w float32
			w, mm[i], vv[i] = u.apply(JoinMaster(p[i], l[i]), g[i], mm[i], vv[i])
			p[i], l[i] = SplitMaster(w)
		}
	})
}

// SplitMaster returns the halves of an fp32 master weight: hi, the weight
// rounded to nearest even (ToBF16), and lo, its low 16 bits, or 0x8001
// when w is a tie that rounded up (w is then taken one ulp further from
// zero, the one value two halves cannot tell from the tie rounded down).
// JoinMaster(SplitMaster(w)) is w, but for those ties.
func SplitMaster(w float32) (hi, lo uint16) {
	bits := math.Float32bits(w)
	hi, lo = ToBF16(w), uint16(bits)
	if lo == 0x8000 && hi != uint16(bits>>16) {
		lo = 0x8001
	}
	return hi, lo
}

// JoinMaster is the fp32 master weight whose halves are hi and lo (see
// SplitMaster): hi's bits, less one when hi was rounded up (lo > 0x8000),
// followed by lo.
func JoinMaster(hi, lo uint16) float32 {
	h := uint32(hi)
	if lo > 0x8000 {
		h--
	}
	return math.Float32frombits(h<<16 | uint32(lo))
}

// adamWUpdate holds the scalars of one AdamW step.
type adamWUpdate struct {
	gradScale, decay, w1, w2, b2, bc2s, negStep, eps float32
}

// newAdamWUpdate computes the scalars (bias corrections, step size, decay
// factor) in float64 and rounds them to float32 as PyTorch does with its
// Python floats.
func newAdamWUpdate(lr, beta1, beta2, eps, weightDecay, gradScale float32, step int) adamWUpdate {
	b1, b2 := float64(beta1), float64(beta2)
	bc1 := 1 - math.Pow(b1, float64(step))
	bc2 := 1 - math.Pow(b2, float64(step))
	return adamWUpdate{
		gradScale: gradScale,
		decay:     float32(1 - float64(lr)*float64(weightDecay)),
		w1:        float32(1 - b1), // lerp weight
		w2:        float32(1 - b2), // addcmul value
		b2:        beta2,           // mul_(beta2)
		bc2s:      float32(math.Sqrt(bc2)),
		negStep:   float32(-(float64(lr) / bc1)),
		eps:       eps,
	}
}

// apply updates one parameter p with gradient g and moments m, v in
// PyTorch's float32 operation order.
func (u *adamWUpdate) apply(p, g, m, v float32) (float32, float32, float32) {
	if u.gradScale != 1 {
		g *= u.gradScale
	}
	p *= u.decay
	m = lerp(m, g, u.w1)
	v = float32(v*u.b2) + float32(u.w2*g*g) // conversions: never fused
	denom := float32(math.Sqrt(float64(v)))/u.bc2s + u.eps
	return p + u.negStep*m/denom, m, v
}

// lerp is PyTorch's CPU lerp for a scalar weight: a fused multiply-add
// start + w·(end-start) when |w| < 0.5, else end - (end-start)·(1-w).
func lerp(start, end, w float32) float32 {
	if math.Abs(float64(w)) < 0.5 {
		return float32(math.FMA(float64(w), float64(end-start), float64(start)))
	}
	return float32(math.FMA(float64(w-1), float64(end-start), float64(end)))
}

// SumSquares returns Σ x[i]² over every element of every buffer, in
// float64. Blocks of a fixed size are summed independently and then added
// in order, so the result does not depend on the thread count.
func (d *Device) SumSquares(xs ...kernels.Buffer) float64 {
	var s float64
	for _, x := range xs {
		s += d.sumSquares(f32(x))
	}
	return s
}

// sumSquares is SumSquares of one slice: goSumSquares of each block of
// 2¹⁴ elements (with AVX-512 where there is one), the blocks' sums added
// in order.
func (d *Device) sumSquares(v []float32) float64 {
	n := len(v)
	const block = 1 << 14
	nb := (n + block - 1) / block
	parts := make([]float64, nb)
	d.parallelFor(nb, 2, func(lo, hi int) {
		for bi := lo; bi < hi; bi++ {
			r := v[bi*block : min(n, (bi+1)*block)]
			if !d.sumSquaresVec(r, &parts[bi]) {
				parts[bi] = goSumSquares(r)
			}
		}
	})
	var s float64
	for _, p := range parts {
		s += p
	}
	return s
}

// goSumSquares returns Σ x[i]², each square rounded to float64 and added
// to lane i mod 32; the lanes are then added in the AVX-512 routine's
// order: lane j with j+8, j+16 with j+24, those two, then halves of 4, 2
// and 1. The conversion keeps the compiler from fusing a square and its
// sum.
func goSumSquares(x []float32) float64 {
	var t [32]float64
	for i, e := range x {
		a := float64(e)
		t[i&31] += float64(a * a)
	}
	var u [8]float64
	for j := range u {
		u[j] = (t[j] + t[8+j]) + (t[16+j] + t[24+j])
	}
	for w := 4; w >= 1; w /= 2 {
		for j := range w {
			u[j] += u[j+w]
		}
	}
	return u[0]
}
