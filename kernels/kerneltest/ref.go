package kerneltest

import "math"

// Naive float64 reference implementations of every op. They are written for
// clarity, straight from the definitions in kernels/ops.go and the package
// doc, and share no code with any backend. Shapes follow the legend of
// package kernels; every slice is row-major.

// RefGemm returns op(A)·op(B)·alpha + beta·C as a new [m,ldc] matrix (the
// columns past n are copied from c). With beta == 0 the old C is ignored.
func RefGemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) []float64 {
	out := append([]float64(nil), c...)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				var av, bv float64
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			v := alpha * s
			if beta != 0 {
				v += beta * c[i*ldc+j]
			}
			out[i*ldc+j] = v
		}
	}
	return out
}

// RefMatmulForward returns inp[N,C]·weight[OC,C]ᵀ + bias[OC] (bias may be nil).
func RefMatmulForward(inp, weight, bias []float64, n, c, oc int) []float64 {
	out := make([]float64, n*oc)
	for i := range n {
		for o := range oc {
			var s float64
			if bias != nil {
				s = bias[o]
			}
			for j := range c {
				s += inp[i*c+j] * weight[o*c+j]
			}
			out[i*oc+o] = s
		}
	}
	return out
}

// RefMatmulBackward returns the gradients of Σ dout·out for MatmulForward:
// dinp[N,C], dweight[OC,C], dbias[OC] (not accumulated into anything).
func RefMatmulBackward(dout, inp, weight []float64, n, c, oc int) (dinp, dweight, dbias []float64) {
	dinp = make([]float64, n*c)
	dweight = make([]float64, oc*c)
	dbias = make([]float64, oc)
	for i := range n {
		for o := range oc {
			g := dout[i*oc+o]
			dbias[o] += g
			for j := range c {
				dinp[i*c+j] += g * weight[o*c+j]
				dweight[o*c+j] += g * inp[i*c+j]
			}
		}
	}
	return
}

// RefLayerNormForward returns out[N,C], mean[N], rstd[N] (biased variance);
// weight and bias may be nil.
func RefLayerNormForward(inp, weight, bias []float64, n, c int, eps float64) (out, mean, rstd []float64) {
	out = make([]float64, n*c)
	mean = make([]float64, n)
	rstd = make([]float64, n)
	for i := range n {
		x := inp[i*c : i*c+c]
		var m float64
		for _, v := range x {
			m += v
		}
		m /= float64(c)
		var va float64
		for _, v := range x {
			va += (v - m) * (v - m)
		}
		va /= float64(c)
		r := 1 / math.Sqrt(va+eps)
		mean[i], rstd[i] = m, r
		for j, v := range x {
			y := (v - m) * r
			if weight != nil {
				y *= weight[j]
			}
			if bias != nil {
				y += bias[j]
			}
			out[i*c+j] = y
		}
	}
	return
}

// RefLayerNormBackward returns the gradients of Σ dout·out for LayerNorm
// with the given statistics (recomputed here, not taken from a device):
// dinp[N,C], dweight[C], dbias[C].
func RefLayerNormBackward(dout, inp, weight []float64, n, c int, eps float64) (dinp, dweight, dbias []float64) {
	_, mean, rstd := RefLayerNormForward(inp, nil, nil, n, c, eps)
	dinp = make([]float64, n*c)
	dweight = make([]float64, c)
	dbias = make([]float64, c)
	for i := range n {
		// y_j = xhat_j·w_j + b_j, xhat_j = (x_j - μ)·r.
		// dL/dxhat_j = g_j = dout_j·w_j;
		// dL/dx_k = r·(g_k - mean_j(g_j) - xhat_k·mean_j(g_j·xhat_j)).
		g := make([]float64, c)
		xhat := make([]float64, c)
		var mg, mgx float64
		for j := range c {
			xhat[j] = (inp[i*c+j] - mean[i]) * rstd[i]
			g[j] = dout[i*c+j]
			if weight != nil {
				g[j] *= weight[j]
			}
			mg += g[j]
			mgx += g[j] * xhat[j]
			dweight[j] += dout[i*c+j] * xhat[j]
			dbias[j] += dout[i*c+j]
		}
		mg /= float64(c)
		mgx /= float64(c)
		for k := range c {
			dinp[i*c+k] = rstd[i] * (g[k] - mg - xhat[k]*mgx)
		}
	}
	return
}

// RefGELU is x·Φ(x) with the exact normal CDF.
func RefGELU(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

// RefGELUGrad is d/dx of RefGELU.
func RefGELUGrad(x float64) float64 {
	return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
}

// RefSoftmax returns the softmax of each row of inp[N,C].
func RefSoftmax(inp []float64, n, c int) []float64 {
	out := make([]float64, n*c)
	for i := range n {
		x := inp[i*c : i*c+c]
		m := math.Inf(-1)
		for _, v := range x {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range x {
			s += math.Exp(v - m)
		}
		for j, v := range x {
			out[i*c+j] = math.Exp(v-m) / s
		}
	}
	return out
}

// RefLogSoftmaxAt returns log softmax(row)[k].
func RefLogSoftmaxAt(row []float64, k int) float64 {
	m := math.Inf(-1)
	for _, v := range row {
		m = math.Max(m, v)
	}
	var s float64
	for _, v := range row {
		s += math.Exp(v - m)
	}
	return row[k] - m - math.Log(s)
}

// RefCrossEntropyForward returns losses[N] (0 on ignored rows).
func RefCrossEntropyForward(logits []float64, targets []int32, n, v int, ignore int32) []float64 {
	out := make([]float64, n)
	for i := range n {
		if targets[i] == ignore {
			continue
		}
		out[i] = -RefLogSoftmaxAt(logits[i*v:i*v+v], int(targets[i]))
	}
	return out
}

// RefCrossEntropyBackward returns dlogits[N,V] = dlosses·(softmax - onehot),
// zero on ignored rows.
func RefCrossEntropyBackward(dlosses, logits []float64, targets []int32, n, v int, ignore int32) []float64 {
	p := RefSoftmax(logits, n, v)
	out := make([]float64, n*v)
	for i := range n {
		if targets[i] == ignore {
			continue
		}
		for j := range v {
			g := p[i*v+j]
			if j == int(targets[i]) {
				g--
			}
			out[i*v+j] = dlosses[i] * g
		}
	}
	return out
}

// RefAttentionForward is Hugging Face's eager OPT attention over qkv[B,T,3C]
// with the additive mask: a key j is visible to query t iff j <= t and
// mask[b,j] == 1 (mask nil: all real). When a query sees no key, every score
// of its row carries the same most-negative value and the softmax is uniform
// over all T keys. Returns out[B,T,C] and att[B,NH,T,T].
func RefAttentionForward(qkv []float64, mask []int32, b, t, nh, hs int) (out, att []float64) {
	c := nh * hs
	out = make([]float64, b*t*c)
	att = make([]float64, b*nh*t*t)
	for bi := range b {
		for h := range nh {
			for ti := range t {
				p := refAttnProbs(qkv, mask, bi, h, ti, t, t, nh, hs, func(j int) []float64 {
					return qkv[(bi*t+j)*3*c+c+h*hs:][:hs]
				})
				copy(att[((bi*nh+h)*t+ti)*t:], p)
				for j, pj := range p {
					v := qkv[(bi*t+j)*3*c+2*c+h*hs:][:hs]
					for e := range hs {
						out[(bi*t+ti)*c+h*hs+e] += pj * v[e]
					}
				}
			}
		}
	}
	return
}

// refAttnProbs returns the probabilities of query ti (its q read from qkv
// row ti of batch bi with T rows) over nkeys keys given by key(j); the mask
// row of batch bi has stride mstride. Keys past ti are future keys.
func refAttnProbs(qkv []float64, mask []int32, bi, h, ti, t, mstride, nh, hs int, key func(j int) []float64) []float64 {
	return refAttnProbsQ(qkv[(bi*t+ti)*3*nh*hs+h*hs:][:hs], mask, bi, ti, t, mstride, hs, key)
}

// refAttnProbsQ returns softmax over nkeys keys for query q at absolute
// position pos; see RefAttentionForward for the mask rule.
func refAttnProbsQ(q []float64, mask []int32, bi, pos, nkeys, mstride, hs int, key func(j int) []float64) []float64 {
	scale := 1 / math.Sqrt(float64(hs))
	p := make([]float64, nkeys)
	visible := func(j int) bool {
		return j <= pos && (mask == nil || mask[bi*mstride+j] == 1)
	}
	any := false
	for j := range nkeys {
		any = any || visible(j)
	}
	if !any {
		for j := range p {
			p[j] = 1 / float64(nkeys)
		}
		return p
	}
	m := math.Inf(-1)
	s := make([]float64, nkeys)
	for j := range nkeys {
		if !visible(j) {
			continue
		}
		k := key(j)
		for e := range hs {
			s[j] += q[e] * scale * k[e]
		}
		m = math.Max(m, s[j])
	}
	var sum float64
	for j := range nkeys {
		if visible(j) {
			p[j] = math.Exp(s[j] - m)
			sum += p[j]
		}
	}
	for j := range p {
		p[j] /= sum
	}
	return p
}

// RefAttentionBackward returns dqkv[B,T,3C]: the softmax Jacobian of each
// row with the forward's probabilities. A fully masked row's output (the
// uniform mean of all values) does not depend on q or k, so it passes
// gradient to v only.
func RefAttentionBackward(dout, qkv []float64, mask []int32, b, t, nh, hs int) []float64 {
	c := nh * hs
	_, att := RefAttentionForward(qkv, mask, b, t, nh, hs)
	scale := 1 / math.Sqrt(float64(hs))
	dqkv := make([]float64, len(qkv))
	for bi := range b {
		for h := range nh {
			for ti := range t {
				p := att[((bi*nh+h)*t+ti)*t:][:t]
				g := dout[(bi*t+ti)*c+h*hs:][:hs]
				dp := make([]float64, t)
				var dot float64
				for j := range t {
					v := qkv[(bi*t+j)*3*c+2*c+h*hs:][:hs]
					for e := range hs {
						dp[j] += g[e] * v[e]
						dqkv[(bi*t+j)*3*c+2*c+h*hs+e] += p[j] * g[e]
					}
					dot += p[j] * dp[j]
				}
				if fullyMasked(mask, bi, ti, t) {
					continue
				}
				q := qkv[(bi*t+ti)*3*c+h*hs:][:hs]
				for j := range t {
					ds := p[j] * (dp[j] - dot)
					k := qkv[(bi*t+j)*3*c+c+h*hs:][:hs]
					for e := range hs {
						dqkv[(bi*t+ti)*3*c+h*hs+e] += ds * scale * k[e]
						dqkv[(bi*t+j)*3*c+c+h*hs+e] += ds * scale * q[e]
					}
				}
			}
		}
	}
	return dqkv
}

// RefAttentionDecode runs tn new queries (positions t0..t0+tn-1, taken from
// qkv[B,tn,3C]) against keys and values kc, vc [B,Tmax,C] that already hold
// rows 0..t0+tn-1, with mask[B,Tmax]. A query with no visible key is uniform
// over all t0+tn keys. Returns out[B,tn,C].
func RefAttentionDecode(qkv, kc, vc []float64, mask []int32, b, tn, t0, tmax, nh, hs int) []float64 {
	c := nh * hs
	out := make([]float64, b*tn*c)
	for bi := range b {
		for h := range nh {
			for i := range tn {
				q := qkv[(bi*tn+i)*3*c+h*hs:][:hs]
				p := refAttnProbsQ(q, mask, bi, t0+i, t0+tn, tmax, hs, func(j int) []float64 {
					return kc[(bi*tmax+j)*c+h*hs:][:hs]
				})
				for j, pj := range p {
					v := vc[(bi*tmax+j)*c+h*hs:][:hs]
					for e := range hs {
						out[(bi*tn+i)*c+h*hs+e] += pj * v[e]
					}
				}
			}
		}
	}
	return out
}

// RefDropoutKeep is the documented dropout generator (SplitMix64 keyed by
// the seed, indexed by element): whether element i survives with drop
// probability p.
func RefDropoutKeep(seed uint64, i int, p float32) bool {
	const gamma = 0x9E3779B97F4A7C15
	mix := func(z uint64) uint64 {
		z ^= z >> 30
		z *= 0xBF58476D1CE4E5B9
		z ^= z >> 27
		z *= 0x94D049BB133111EB
		return z ^ z>>31
	}
	key := mix(seed + gamma)
	r := mix(key + uint64(i+1)*gamma)
	u := float64(r>>40) / (1 << 24)
	return u >= float64(p)
}

// AdamWState is the float64 state of RefAdamWStep.
type AdamWState struct{ P, M, V []float64 }

// RefAdamWStep applies one PyTorch AdamW step (decoupled weight decay,
// bias-corrected moments) in float64.
func RefAdamWStep(s *AdamWState, grads []float64, lr, beta1, beta2, eps, wd, gradScale float64, step int) {
	bc1 := 1 - math.Pow(beta1, float64(step))
	bc2 := 1 - math.Pow(beta2, float64(step))
	for i := range s.P {
		g := grads[i] * gradScale
		s.P[i] *= 1 - lr*wd
		s.M[i] = beta1*s.M[i] + (1-beta1)*g
		s.V[i] = beta2*s.V[i] + (1-beta2)*g*g
		denom := math.Sqrt(s.V[i])/math.Sqrt(bc2) + eps
		s.P[i] -= lr / bc1 * s.M[i] / denom
	}
}

// RefBF16Bits returns the bfloat16 nearest to f, ties to even, as its bit
// pattern (the upper 16 bits of the float32 of the same value). It is the
// suite's own rounding, written from the definition and shared with no
// backend: the lower 16 bits of f are what bf16 drops; above half an ulp
// (0x8000) the kept part rounds up, at exactly half it rounds to the even
// one. Rounding up adds one to the kept magnitude, which carries into the
// exponent where it must (0x3fff... -> 0x4000, 2.0) and turns values past
// the largest finite bf16 into infinity (0x7f7f + 1 = 0x7f80). Infinities,
// signed zeros and denormals follow the same rule (a denormal f32 rounds to
// a denormal bf16 or to zero, never flushed). A NaN stays a NaN: its top
// payload bits are kept and the quiet bit set, since dropping the payload
// of a NaN whose payload sits in the low bits would make it an infinity.
func RefBF16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	hi, lo := uint16(b>>16), b&0xffff
	if b&0x7f800000 == 0x7f800000 && b&0x007fffff != 0 {
		return hi | 0x0040
	}
	if lo > 0x8000 || lo == 0x8000 && hi&1 == 1 {
		hi++
	}
	return hi
}

// RefWidenBF16 returns the float32 of a bfloat16 bit pattern (exact).
func RefWidenBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// RefRoundBF16 returns f rounded to bfloat16 (RefBF16Bits), as a float32.
func RefRoundBF16(f float32) float32 { return RefWidenBF16(RefBF16Bits(f)) }

// RefRoundBF16s returns x rounded elementwise to bfloat16 (a new slice; nil
// stays nil).
func RefRoundBF16s(x []float32) []float32 {
	if x == nil {
		return nil
	}
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = RefRoundBF16(v)
	}
	return out
}

// RefSplitMaster returns the halves kernels.Device.AdamWStepBF16 keeps of
// an fp32 master weight w: hi, w rounded to nearest even (RefBF16Bits),
// and lo, w's low 16 bits — 0x8001 when w is a tie that rounded up, so
// that RefJoinMaster(hi, lo) is then w one ulp further from zero.
func RefSplitMaster(w float32) (hi, lo uint16) {
	bits := math.Float32bits(w)
	hi, lo = RefBF16Bits(w), uint16(bits&0xffff)
	if lo == 0x8000 && uint32(hi) == bits>>16+1 {
		lo = 0x8001
	}
	return hi, lo
}

// RefJoinMaster is the fp32 master weight with halves hi and lo: hi's bits
// less one when lo > 0x8000 (hi was rounded up), then lo.
func RefJoinMaster(hi, lo uint16) float32 {
	h := uint32(hi)
	if lo > 0x8000 {
		h--
	}
	return math.Float32frombits(h<<16 | uint32(lo))
}
