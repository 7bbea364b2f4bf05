package cpu

import (
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// elemGrain is the smallest number of elements worth a goroutine in the
// elementwise kernels.
const elemGrain = 1 << 15

// AddBias adds bias[C] (F32 or BF16) to every row of out[N,C] (in place).
func (d *Device) AddBias(out, bias kernels.Buffer, n, c int) {
	o, bs := f32(out)[:n*c], asF32(bias)[:c]
	if c == 0 {
		return
	}
	d.parallelFor(n, max(1, elemGrain/c), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := o[i*c : i*c+c]
			for j, b := range bs {
				row[j] += b
			}
		}
	})
}

// Add sets out[i] = a[i] + b[i] for i < n; out may alias a or b. b may be
// BF16 (widened).
func (d *Device) Add(out, a, b kernels.Buffer, n int) {
	if h, ok := b.(BF16); ok {
		o, x, y := f32(out)[:n], f32(a)[:n], h[:n]
		d.parallelFor(n, elemGrain, func(lo, hi int) {
			o, x, y := o[lo:hi], x[lo:hi], y[lo:hi]
			for i := range o {
				o[i] = x[i] + FromBF16(y[i])
			}
		})
		return
	}
	o, x, y := f32(out)[:n], f32(a)[:n], f32(b)[:n]
	d.parallelFor(n, elemGrain, func(lo, hi int) {
		o, x, y := o[lo:hi], x[lo:hi], y[lo:hi]
		for i := range o {
			o[i] = x[i] + y[i]
		}
	})
}

// Scale sets x[i] *= s for i < n.
func (d *Device) Scale(x kernels.Buffer, s float32, n int) {
	v := f32(x)[:n]
	d.parallelFor(n, elemGrain, func(lo, hi int) {
		d.rowScale(v[lo:hi], s)
	})
}

// Mul sets out[i] = a[i]·b[i] for i < n; out may alias a or b. With b the
// scale saved by DropoutForward it is the dropout backward.
func (d *Device) Mul(out, a, b kernels.Buffer, n int) {
	o, x, y := f32(out)[:n], f32(a)[:n], f32(b)[:n]
	d.parallelFor(n, elemGrain, func(lo, hi int) {
		o, x, y := o[lo:hi], x[lo:hi], y[lo:hi]
		for i := range o {
			o[i] = x[i] * y[i]
		}
	})
}

// ReLUForward sets out[i] = max(inp[i], 0) for i < n; out may alias inp.
// NaN stays NaN, as in PyTorch.
func (d *Device) ReLUForward(out, inp kernels.Buffer, n int) {
	o, x := f32(out)[:n], f32(inp)[:n]
	asm := d.vecISA() != isaGeneric
	d.parallelFor(n, elemGrain, func(lo, hi int) {
		o, x := o[lo:hi], x[lo:hi]
		if asm {
			// Branch-free: on activations half negative at random, the
			// loop below mispredicts every other element (3 ns each).
			k := len(x) &^ 7
			reluAVX2(o[:k], x[:k])
			o, x = o[k:], x[k:]
		}
		for i, v := range x {
			if v < 0 {
				v = 0
			}
			o[i] = v
		}
	})
}

// ReLUBackward sets dinp[i] = dout[i] where out[i] > 0, else 0
// (overwrites; dinp may alias dout). out is ReLUForward's output.
func (d *Device) ReLUBackward(dinp, dout, out kernels.Buffer, n int) {
	dx, dy, y := f32(dinp)[:n], f32(dout)[:n], f32(out)[:n]
	asm := d.vecISA() != isaGeneric
	d.parallelFor(n, elemGrain, func(lo, hi int) {
		dx, dy, y := dx[lo:hi], dy[lo:hi], y[lo:hi]
		if asm {
			k := len(y) &^ 7
			reluGradAVX2(dx[:k], dy[:k], y[:k])
			dx, dy, y = dx[k:], dy[k:], y[k:]
		}
		for i, v := range y {
			if v > 0 {
				dx[i] = dy[i]
			} else {
				dx[i] = 0
			}
		}
	})
}

// GELUForward sets out[i] = inp[i]·Φ(inp[i]) for i < n, the exact (erf)
// GELU of Hugging Face's "gelu", evaluated in float64 and rounded once;
// out may alias inp.
func (d *Device) GELUForward(out, inp kernels.Buffer, n int) {
	o, x := f32(out)[:n], f32(inp)[:n]
	d.parallelFor(n, elemGrain/8, func(lo, hi int) {
		o, x := o[lo:hi], x[lo:hi]
		for i, v := range x {
			z := float64(v)
			o[i] = float32(0.5 * z * (1 + math.Erf(z*math.Sqrt2/2)))
		}
	})
}

// GELUBackward sets dinp[i] = dout[i]·(Φ(x)+x·φ(x)) with x = inp[i]
// (overwrites; dinp may alias dout).
func (d *Device) GELUBackward(dinp, dout, inp kernels.Buffer, n int) {
	dx, dy, x := f32(dinp)[:n], f32(dout)[:n], f32(inp)[:n]
	const invSqrt2Pi = 0.3989422804014327 // 1/sqrt(2π)
	d.parallelFor(n, elemGrain/8, func(lo, hi int) {
		dx, dy, x := dx[lo:hi], dy[lo:hi], x[lo:hi]
		for i, v := range x {
			z := float64(v)
			g := 0.5*(1+math.Erf(z*math.Sqrt2/2)) + z*invSqrt2Pi*math.Exp(-0.5*z*z)
			dx[i] = float32(float64(dy[i]) * g)
		}
	})
}
