package cpu

import (
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// LayerNormForward normalises each row of inp[N,C]:
// out = (inp-mean)·rstd·weight + bias with the biased variance and
// rstd = 1/sqrt(var+eps), saving mean[N] and rstd[N] (all overwritten).
// weight[C] and bias[C] may be nil (no elementwise affine). The moments are
// accumulated in float64 (two passes), so they are at least as accurate as
// PyTorch's float32 Welford.
func (d *Device) LayerNormForward(out, mean, rstd, inp, weight, bias kernels.Buffer, n, c int, eps float32) {
	o, mu, rs, x := f32(out)[:n*c], f32(mean)[:n], f32(rstd)[:n], f32(inp)[:n*c]
	w, b := asF32(weight), asF32(bias)
	if w != nil {
		w = w[:c]
	}
	if b != nil {
		b = b[:c]
	}
	if c == 0 {
		return
	}
	asm := d.vecISA() == isaAVX512
	d.parallelFor(n, max(1, elemGrain/(4*c)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xr, or := x[i*c:i*c+c], o[i*c:i*c+c]
			m := sum64(xr) / float64(c)
			r := 1 / math.Sqrt(sumSqDev64(xr, m)/float64(c)+float64(eps))
			mu[i], rs[i] = float32(m), float32(r)
			switch {
			case w != nil && b != nil:
				w, b := w[:len(xr)], b[:len(xr)]
				k := 0
				if asm {
					k = len(xr) &^ 7
					lnNormAVX512(or[:k], xr[:k], w[:k], b[:k], m, r)
				}
				for j := k; j < len(xr); j++ {
					or[j] = float32((float64(xr[j])-m)*r)*w[j] + b[j]
				}
			default:
				for j, v := range xr {
					y := float32((float64(v) - m) * r)
					if w != nil {
						y *= w[j]
					}
					if b != nil {
						y += b[j]
					}
					or[j] = y
				}
			}
		}
	})
}

// LayerNormBackward is the backward of LayerNormForward, given its saved
// mean[N] and rstd[N]:
//
//	dinp[N,C] += rstd·(g - mean(g) - norm·mean(g·norm)), g = dout·weight
//	dweight[C] += Σ_rows dout·norm   (skipped when nil)
//	dbias[C]   += Σ_rows dout        (skipped when nil)
//
// with norm = (inp-mean)·rstd. All three ACCUMULATE. weight may be nil (no
// affine); the column sums run in float64, in row order, so the result does
// not depend on the thread count.
func (d *Device) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd kernels.Buffer, n, c int) {
	dx, dy, x := f32(dinp)[:n*c], f32(dout)[:n*c], f32(inp)[:n*c]
	mu, rs := f32(mean)[:n], f32(rstd)[:n]
	w, dw, db := asF32(weight), f32(dweight), f32(dbias)
	if w != nil {
		w = w[:c]
	}
	if dw != nil {
		dw = dw[:c]
	}
	if db != nil {
		db = db[:c]
	}
	if c == 0 || n == 0 {
		return
	}
	asm := d.vecISA() == isaAVX512
	d.parallelFor(n, max(1, elemGrain/(4*c)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xr, dyr, dxr := x[i*c:i*c+c], dy[i*c:i*c+c], dx[i*c:i*c+c]
			m, r := float64(mu[i]), float64(rs[i])
			sg, sgn := lnGradSums(dyr, xr, w, m, r)
			sg /= float64(c)
			sgn /= float64(c)
			if w != nil {
				w := w[:len(xr)]
				k := 0
				if asm {
					k = len(xr) &^ 7
					lnDxAVX512(dxr[:k], dyr[:k], xr[:k], w[:k], m, r, sg, sgn)
				}
				for j := k; j < len(xr); j++ {
					g := float64(dyr[j]) * float64(w[j])
					dxr[j] += float32((g - sg - (float64(xr[j])-m)*r*sgn) * r)
				}
			} else {
				for j, v := range xr {
					g := float64(dyr[j])
					dxr[j] += float32((g - sg - (float64(v)-m)*r*sgn) * r)
				}
			}
		}
	})
	if dw == nil && db == nil {
		return
	}
	d.parallelFor(c, max(16, elemGrain/n), func(lo, hi int) {
		accW := make([]float64, hi-lo)
		accB := make([]float64, hi-lo)
		k := 0
		if asm {
			k = (hi - lo) &^ 7
		}
		for i := range n {
			m, r := float64(mu[i]), float64(rs[i])
			xr, dyr := x[i*c+lo:i*c+hi], dy[i*c+lo:i*c+hi]
			if k > 0 {
				lnColSumsAVX512(accW[:k], accB[:k], dyr[:k], xr[:k], m, r)
			}
			for j := k; j < len(dyr); j++ {
				g := dyr[j]
				accW[j] += float64(g) * (float64(xr[j]) - m) * r
				accB[j] += float64(g)
			}
		}
		if dw != nil {
			for j, v := range accW {
				dw[lo+j] += float32(v)
			}
		}
		if db != nil {
			for j, v := range accB {
				db[lo+j] += float32(v)
			}
		}
	})
}

// sum64 returns Σ x in float64 with four independent partial sums.
func sum64(x []float32) float64 {
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+3 < len(x); j += 4 {
		s0 += float64(x[j])
		s1 += float64(x[j+1])
		s2 += float64(x[j+2])
		s3 += float64(x[j+3])
	}
	for ; j < len(x); j++ {
		s0 += float64(x[j])
	}
	return (s0 + s1) + (s2 + s3)
}

// sumSqDev64 returns Σ (x-m)² in float64.
func sumSqDev64(x []float32, m float64) float64 {
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+3 < len(x); j += 4 {
		a, b, c, d := float64(x[j])-m, float64(x[j+1])-m, float64(x[j+2])-m, float64(x[j+3])-m
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; j < len(x); j++ {
		a := float64(x[j]) - m
		s0 += a * a
	}
	return (s0 + s1) + (s2 + s3)
}

// lnGradSums returns Σ g and Σ g·norm for one row, g = dout·w (w nil: 1)
// and norm = (x-m)·r.
func lnGradSums(dy, x, w []float32, m, r float64) (sg, sgn float64) {
	var g0, g1, n0, n1 float64
	j := 0
	if w == nil {
		for ; j+1 < len(x); j += 2 {
			a, b := float64(dy[j]), float64(dy[j+1])
			g0 += a
			g1 += b
			n0 += a * (float64(x[j]) - m)
			n1 += b * (float64(x[j+1]) - m)
		}
		for ; j < len(x); j++ {
			a := float64(dy[j])
			g0 += a
			n0 += a * (float64(x[j]) - m)
		}
	} else {
		for ; j+1 < len(x); j += 2 {
			a, b := float64(dy[j])*float64(w[j]), float64(dy[j+1])*float64(w[j+1])
			g0 += a
			g1 += b
			n0 += a * (float64(x[j]) - m)
			n1 += b * (float64(x[j+1]) - m)
		}
		for ; j < len(x); j++ {
			a := float64(dy[j]) * float64(w[j])
			g0 += a
			n0 += a * (float64(x[j]) - m)
		}
	}
	return g0 + g1, (n0 + n1) * r
}
