package cpu

import (
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// Dropout's generator is SplitMix64 used as a counter-based hash, so any
// backend reproduces it element by element:
//
//	mix(z)  = z ^= z>>30; z *= 0xBF58476D1CE4E5B9; z ^= z>>27;
//	          z *= 0x94D049BB133111EB; z ^ z>>31
//	key     = mix(seed + γ)                 γ = 0x9E3779B97F4A7C15
//	r_i     = mix(key + (i+1)·γ)            (mod 2^64)
//	u_i     = float32(r_i >> 40) · 2^-24    uniform in [0,1), exact
//	keep_i  = u_i >= p
//
// All arithmetic is on uint64 with wrap-around; u_i is exact in float32.

const dropGamma = 0x9E3779B97F4A7C15

func splitmix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// DropoutForward sets out[i] = inp[i]·scale[i] with scale[i] = keep_i/(1-p)
// for i < n, saving scale[n] for the backward (Mul(dinp, dout, scale)); both
// overwritten, out may alias inp. keep_i comes from the counter-based
// generator above keyed by (seed, i), so it does not depend on the thread
// count or the backend. p = 0 keeps everything with scale exactly 1; p >= 1
// zeroes everything.
func (d *Device) DropoutForward(out, scale, inp kernels.Buffer, p float32, seed uint64, n int) {
	o, sc, x := f32(out)[:n], f32(scale)[:n], f32(inp)[:n]
	keepScale := float32(1 / (1 - float64(p)))
	if p >= 1 {
		keepScale = 0
	}
	// u_i >= p  ⟺  r_i>>40 >= ceil(p·2^24), both sides being exact.
	thr := uint64(0)
	if p > 0 {
		thr = uint64(math.Ceil(float64(p) * (1 << 24)))
	}
	key := splitmix(seed + dropGamma)
	d.parallelFor(n, elemGrain/4, func(lo, hi int) {
		o, sc, x := o[lo:hi], sc[lo:hi], x[lo:hi]
		z := key + uint64(lo)*dropGamma
		for i := range sc {
			z += dropGamma // key + (lo+i+1)·γ
			s := float32(0)
			if splitmix(z)>>40 >= thr {
				s = keepScale
			}
			sc[i] = s
			o[i] = x[i] * s
		}
	})
}
