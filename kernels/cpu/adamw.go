package cpu

import (
	"math"

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
	b1, b2 := float64(beta1), float64(beta2)
	bc1 := 1 - math.Pow(b1, float64(step))
	bc2 := 1 - math.Pow(b2, float64(step))
	decay := float32(1 - float64(lr)*float64(weightDecay))
	w1 := float32(1 - b1) // lerp weight
	w2 := float32(1 - b2) // addcmul value
	fb2 := beta2          // mul_(beta2)
	bc2s := float32(math.Sqrt(bc2))
	negStep := float32(-(float64(lr) / bc1))
	e := eps
	d.parallelFor(n, elemGrain/2, func(lo, hi int) {
		p, g, mm, vv := p[lo:hi], g[lo:hi], mm[lo:hi], vv[lo:hi]
		for i := range p {
			gi := g[i]
			if gradScale != 1 {
				gi *= gradScale
			}
			pi := p[i] * decay
			mi := lerp(mm[i], gi, w1)
			vi := vv[i]*fb2 + w2*gi*gi
			denom := float32(math.Sqrt(float64(vi)))/bc2s + e
			p[i] = pi + negStep*mi/denom
			mm[i], vv[i] = mi, vi
		}
	})
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

// sumSquares is SumSquares of one slice.
func (d *Device) sumSquares(v []float32) float64 {
	n := len(v)
	const block = 1 << 14
	nb := (n + block - 1) / block
	parts := make([]float64, nb)
	d.parallelFor(nb, 2, func(lo, hi int) {
		for bi := lo; bi < hi; bi++ {
			var s0, s1, s2, s3 float64
			r := v[bi*block : min(n, (bi+1)*block)]
			j := 0
			for ; j+3 < len(r); j += 4 {
				a, b, c, e := float64(r[j]), float64(r[j+1]), float64(r[j+2]), float64(r[j+3])
				s0 += a * a
				s1 += b * b
				s2 += c * c
				s3 += e * e
			}
			for ; j < len(r); j++ {
				a := float64(r[j])
				s0 += a * a
			}
			parts[bi] = (s0 + s1) + (s2 + s3)
		}
	})
	var s float64
	for _, p := range parts {
		s += p
	}
	return s
}
