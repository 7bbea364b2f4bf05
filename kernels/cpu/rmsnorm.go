package cpu

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// RMSNorm follows Hugging Face's LlamaRMSNorm in fp32: the mean of squares
// (accumulated here in float64), rstd = 1/sqrt(mean+eps) rounded to
// float32, norm = x·rstd rounded to float32, then norm·weight. A row is
// rows of c elements at offsets given by a headLayout, so the plain
// [N,C] norm and the per-head q/k norm of a packed qkv row share the code.

// headLayout places g heads of c elements at the start of every row of a
// [N,ld] matrix; the plain norm is g = 1, ld = c.
type headLayout struct{ n, g, c, ld int }

// off is the offset of head k of row i.
func (l headLayout) off(r int) int { return r/l.g*l.ld + r%l.g*l.c }

// rows is the number of normalised vectors, N·g.
func (l headLayout) rows() int { return l.n * l.g }

// check panics unless the layout fits a buffer of size elements.
func (l headLayout) check(op string, size int) {
	if l.n < 0 || l.g < 0 || l.c < 0 || l.g*l.c > l.ld && l.n > 0 {
		panic(fmt.Sprintf("cpu: %s of %d heads of %d in rows of %d", op, l.g, l.c, l.ld))
	}
	if l.n > 0 && l.g > 0 && (l.n-1)*l.ld+l.g*l.c > size {
		panic(fmt.Sprintf("cpu: %s: %d rows of %d need %d elements, the buffer has %d", op, l.n, l.ld, (l.n-1)*l.ld+l.g*l.c, size))
	}
}

// RMSNormForward normalises each row of inp[N,C]: out = (inp·rstd)·weight
// with rstd = 1/sqrt(mean(inp²)+eps), overwriting out[N,C] and rstd[N].
// weight[C] may be nil, F32 or BF16.
func (d *Device) RMSNormForward(out, rstd, inp, weight kernels.Buffer, n, c int, eps float32) {
	d.rmsNormForward(out, rstd, inp, weight, headLayout{n, 1, c, c}, eps, "RMSNormForward")
}

// HeadRMSNormForward is RMSNormForward over the g heads of c elements at the
// start of every row of inp[N,ld] and out[N,ld] (one weight[c] for all),
// with rstd[N,g]; out's other elements are not touched.
func (d *Device) HeadRMSNormForward(out, rstd, inp, weight kernels.Buffer, n, g, c, ld int, eps float32) {
	d.rmsNormForward(out, rstd, inp, weight, headLayout{n, g, c, ld}, eps, "HeadRMSNormForward")
}

func (d *Device) rmsNormForward(out, rstd, inp, weight kernels.Buffer, l headLayout, eps float32, op string) {
	o, x, rs := f32(out), f32(inp), f32(rstd)[:l.rows()]
	l.check(op, len(o))
	l.check(op, len(x))
	w := asF32(weight)
	if w != nil {
		w = w[:l.c]
	}
	c := l.c
	if c == 0 || l.rows() == 0 {
		return
	}
	d.parallelFor(l.rows(), rowGrain(2*c), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			at := l.off(r)
			xr, or := x[at:at+c], o[at:at+c]
			var s0, s1 float64
			j := 0
			for ; j+1 < len(xr); j += 2 {
				a, b := float64(xr[j]), float64(xr[j+1])
				s0 += a * a
				s1 += b * b
			}
			for ; j < len(xr); j++ {
				s0 += float64(xr[j]) * float64(xr[j])
			}
			r32 := float32(1 / math.Sqrt((s0+s1)/float64(c)+float64(eps)))
			rs[r] = r32
			if w == nil {
				for j, v := range xr {
					or[j] = v * r32
				}
				continue
			}
			w := w[:len(xr)]
			for j, v := range xr {
				or[j] = float32(v*r32) * w[j]
			}
		}
	})
}

// RMSNormBackward is the backward of RMSNormForward given its rstd:
//
//	dinp[N,C] += rstd·(g - norm·mean(g·norm)), g = dout·weight, norm = inp·rstd
//	dweight[C] += Σ_rows dout·norm   (skipped when nil)
//
// Both ACCUMULATE. The column sums run in float64 in row order, so the
// result does not depend on the thread count.
func (d *Device) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd kernels.Buffer, n, c int) {
	d.rmsNormBackward(dinp, dweight, dout, inp, weight, rstd, headLayout{n, 1, c, c}, true, "RMSNormBackward")
}

// HeadRMSNormBackward is RMSNormBackward for HeadRMSNormForward, except that
// the head elements of dinp[N,ld] are OVERWRITTEN (dinp may alias dout);
// dweight[c] accumulates over every head of every row.
func (d *Device) HeadRMSNormBackward(dinp, dweight, dout, inp, weight, rstd kernels.Buffer, n, g, c, ld int) {
	d.rmsNormBackward(dinp, dweight, dout, inp, weight, rstd, headLayout{n, g, c, ld}, false, "HeadRMSNormBackward")
}

func (d *Device) rmsNormBackward(dinp, dweight, dout, inp, weight, rstd kernels.Buffer, l headLayout, accumulate bool, op string) {
	dx, dy, x, rs := f32(dinp), f32(dout), f32(inp), f32(rstd)[:l.rows()]
	l.check(op, len(dx))
	l.check(op, len(dy))
	l.check(op, len(x))
	w, dw := asF32(weight), f32(dweight)
	c := l.c
	if w != nil {
		w = w[:c]
	}
	if dw != nil {
		dw = dw[:c]
	}
	if c == 0 || l.rows() == 0 {
		return
	}
	// dweight first: with dinp aliasing dout, the rows below overwrite dout.
	if dw != nil {
		d.parallelFor(c, max(16, elemGrain/l.rows()), func(lo, hi int) {
			acc := make([]float64, hi-lo)
			for r := range l.rows() {
				at := l.off(r)
				s := float64(rs[r])
				xr, dyr := x[at+lo:at+hi], dy[at+lo:at+hi]
				for j, g := range dyr {
					acc[j] += float64(g) * float64(xr[j]) * s
				}
			}
			for j, v := range acc {
				dw[lo+j] += float32(v)
			}
		})
	}
	d.parallelFor(l.rows(), rowGrain(4*c), func(lo, hi int) {
		g := make([]float64, c)
		for r := lo; r < hi; r++ {
			at := l.off(r)
			xr, dyr, dxr := x[at:at+c], dy[at:at+c], dx[at:at+c]
			s := float64(rs[r])
			var sgn float64
			for j, v := range dyr {
				gj := float64(v)
				if w != nil {
					gj *= float64(w[j])
				}
				g[j] = gj
				sgn += gj * float64(xr[j])
			}
			// mean(g·norm) = s·Σg·x/c, so dx = s·(g - norm·that) = s·g - x·s³·Σg·x/c.
			k := s * s * s * sgn / float64(c)
			if accumulate {
				for j, v := range xr {
					dxr[j] += float32(s*g[j] - float64(v)*k)
				}
			} else {
				for j, v := range xr {
					dxr[j] = float32(s*g[j] - float64(v)*k)
				}
			}
		}
	})
}
