package cpu

import (
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// SwiGLUForward sets out[N,F] = silu(gate)·up where each row of inp[N,2F]
// is gate (columns 0..F-1) then up (F..2F-1). silu(x) = x/(1+exp(-x)) is
// evaluated in float64 and rounded to float32 before the product, as
// PyTorch rounds act_fn(gate) before multiplying it by up.
func (d *Device) SwiGLUForward(out, inp kernels.Buffer, n, f int) {
	o, x := f32(out)[:n*f], f32(inp)[:n*2*f]
	if f == 0 {
		return
	}
	d.parallelFor(n, rowGrain(8*f), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g, u, or := x[i*2*f:i*2*f+f], x[i*2*f+f:i*2*f+2*f], o[i*f:i*f+f]
			for j, v := range g {
				z := float64(v)
				or[j] = float32(z/(1+math.Exp(-z))) * u[j]
			}
		}
	})
}

// SwiGLUBackward sets dinp[N,2F] (overwritten) to the gradient of
// SwiGLUForward: with σ = sigmoid(gate),
//
//	dgate = dout·up·σ·(1 + gate·(1-σ)),  dup = dout·gate·σ
//
// in float64, rounded once.
func (d *Device) SwiGLUBackward(dinp, dout, inp kernels.Buffer, n, f int) {
	dx, dy, x := f32(dinp)[:n*2*f], f32(dout)[:n*f], f32(inp)[:n*2*f]
	if f == 0 {
		return
	}
	d.parallelFor(n, rowGrain(8*f), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g, u := x[i*2*f:i*2*f+f], x[i*2*f+f:i*2*f+2*f]
			dg, du, dyr := dx[i*2*f:i*2*f+f], dx[i*2*f+f:i*2*f+2*f], dy[i*f:i*f+f]
			for j, v := range g {
				z := float64(v)
				s := 1 / (1 + math.Exp(-z))
				gy := float64(dyr[j])
				dg[j] = float32(gy * float64(u[j]) * s * (1 + z*(1-s)))
				du[j] = float32(gy * z * s)
			}
		}
	})
}
