package cpu

import "github.com/gochat-ai/gochat/kernels"

// rowGrain is the number of rows of c elements worth a goroutine.
func rowGrain(c int) int { return max(1, elemGrain/max(c, 1)) }

// SoftmaxForward sets each row of out[N,C] to the softmax of the same row
// of inp[N,C]: exp(x-max)/Σexp(x-max) (overwrites; out may alias inp).
func (d *Device) SoftmaxForward(out, inp kernels.Buffer, n, c int) {
	o, x := f32(out)[:n*c], f32(inp)[:n*c]
	if c == 0 {
		return
	}
	d.parallelFor(n, rowGrain(c), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xr, or := x[i*c:i*c+c], o[i*c:i*c+c]
			s := d.rowExpStore(or, xr, d.rowMax(xr))
			d.rowScale(or, float32(1/s))
		}
	})
}
