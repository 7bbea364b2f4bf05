package cpu

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// RoPEForward rotates, in place, the first nh heads of hs elements of every
// row of x[N,ld] by the rotary embedding of position pos[r] (rotate_half
// convention: pair i is elements i and i+hs/2), reading cos and sin
// [maxPos,hs/2]. Each product is rounded to float32 before the sum, as
// PyTorch's q·cos + rotate_half(q)·sin is.
func (d *Device) RoPEForward(x, pos, cos, sin kernels.Buffer, n, nh, hs, ld int) {
	d.rope(x, pos, cos, sin, n, nh, hs, ld, false)
}

// RoPEBackward applies the inverse rotation to dx in place: d(in) from
// d(out) of RoPEForward (overwrites the rotated elements).
func (d *Device) RoPEBackward(dx, pos, cos, sin kernels.Buffer, n, nh, hs, ld int) {
	d.rope(dx, pos, cos, sin, n, nh, hs, ld, true)
}

func (d *Device) rope(x, pos, cos, sin kernels.Buffer, n, nh, hs, ld int, inverse bool) {
	if hs%2 != 0 || nh*hs > ld {
		panic(fmt.Sprintf("cpu: RoPE of %d heads of %d (an odd head size, or wider than rows of %d)", nh, hs, ld))
	}
	if n == 0 || nh*hs == 0 {
		return
	}
	h := hs / 2
	v, p, cs, sn := f32(x)[:(n-1)*ld+nh*hs], i32(pos)[:n], f32(cos), f32(sin)
	maxPos := min(len(cs), len(sn)) / h
	for r, q := range p {
		if q < 0 || int(q) >= maxPos {
			panic(fmt.Sprintf("cpu: RoPE: position %d of row %d is outside the table of %d positions", q, r, maxPos))
		}
	}
	d.parallelFor(n, rowGrain(nh*hs), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			c, s := cs[int(p[r])*h:][:h], sn[int(p[r])*h:][:h]
			for k := range nh {
				a := v[r*ld+k*hs:][:hs]
				x1, x2 := a[:h], a[h:hs]
				if inverse {
					// The transpose: d1 = g1·c + g2·s, d2 = g2·c - g1·s.
					for i, ci := range c {
						g1, g2 := x1[i], x2[i]
						x1[i] = float32(g1*ci) + float32(g2*s[i])
						x2[i] = float32(g2*ci) - float32(g1*s[i])
					}
					continue
				}
				for i, ci := range c {
					a1, a2 := x1[i], x2[i]
					x1[i] = float32(a1*ci) - float32(a2*s[i])
					x2[i] = float32(a2*ci) + float32(a1*s[i])
				}
			}
		}
	})
}
