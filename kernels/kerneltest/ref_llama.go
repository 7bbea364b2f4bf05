package kerneltest

import "math"

// Naive float64 references of the LLaMA-family ops (kernels/ops.go): RMSNorm,
// RoPE, SwiGLU and grouped-query attention, written from the definitions
// and sharing no code with any backend.

// RefRMSNormForward returns out[N,C] = x·r·weight and rstd[N] = r with r =
// 1/sqrt(mean(x²)+eps) per row; weight may be nil.
func RefRMSNormForward(inp, weight []float64, n, c int, eps float64) (out, rstd []float64) {
	out, rstd = make([]float64, n*c), make([]float64, n)
	for i := range n {
		x := inp[i*c : i*c+c]
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(c)+eps)
		rstd[i] = r
		for j, v := range x {
			y := v * r
			if weight != nil {
				y *= weight[j]
			}
			out[i*c+j] = y
		}
	}
	return
}

// RefRMSNormBackward returns the gradients of Σ dout·out for RMSNorm:
// dinp[N,C] and dweight[C] (not accumulated into anything).
func RefRMSNormBackward(dout, inp, weight []float64, n, c int, eps float64) (dinp, dweight []float64) {
	_, rstd := RefRMSNormForward(inp, nil, n, c, eps)
	dinp, dweight = make([]float64, n*c), make([]float64, c)
	for i := range n {
		// y_j = x_j·r·w_j, r = (Σx²/C + eps)^-½, dr/dx_k = -r³·x_k/C:
		// dL/dx_k = r·g_k - r³·x_k·Σ_j g_j x_j / C with g = dout·w.
		r := rstd[i]
		var sgx float64
		g := make([]float64, c)
		for j := range c {
			g[j] = dout[i*c+j]
			if weight != nil {
				g[j] *= weight[j]
			}
			sgx += g[j] * inp[i*c+j]
			dweight[j] += dout[i*c+j] * inp[i*c+j] * r
		}
		for k := range c {
			dinp[i*c+k] = r*g[k] - r*r*r*inp[i*c+k]*sgx/float64(c)
		}
	}
	return
}

// gatherHeads returns the g heads of c elements at the start of each row of
// x[N,ld] as a dense [N·g, C] matrix; scatterHeads writes one back.
func gatherHeads(x []float64, n, g, c, ld int) []float64 {
	out := make([]float64, 0, n*g*c)
	for i := range n {
		out = append(out, x[i*ld:i*ld+g*c]...)
	}
	return out
}

func scatterHeads(dst, heads []float64, n, g, c, ld int) {
	for i := range n {
		copy(dst[i*ld:i*ld+g*c], heads[i*g*c:(i+1)*g*c])
	}
}

// RefRoPE returns x[N,ld] with the first nh heads of hs elements of row r
// rotated by the angle table at position pos[r] (rotate_half pairs i and
// i+hs/2), or by its inverse. cos and sin are [maxPos, hs/2].
func RefRoPE(x []float64, pos []int32, cos, sin []float64, n, nh, hs, ld int, inverse bool) []float64 {
	out := append([]float64(nil), x...)
	h := hs / 2
	for r := range n {
		for k := range nh {
			a := out[r*ld+k*hs:]
			for i := range h {
				c, s := cos[int(pos[r])*h+i], sin[int(pos[r])*h+i]
				if inverse {
					s = -s
				}
				x1, x2 := a[i], a[i+h]
				a[i] = x1*c - x2*s
				a[i+h] = x2*c + x1*s
			}
		}
	}
	return out
}

// RefSwiGLUForward returns out[N,F] = silu(gate)·up with inp[N,2F] = [gate|up].
func RefSwiGLUForward(inp []float64, n, f int) []float64 {
	out := make([]float64, n*f)
	for i := range n {
		for j := range f {
			g, u := inp[i*2*f+j], inp[i*2*f+f+j]
			out[i*f+j] = g / (1 + math.Exp(-g)) * u
		}
	}
	return out
}

// RefSwiGLUBackward returns dinp[N,2F] for RefSwiGLUForward.
func RefSwiGLUBackward(dout, inp []float64, n, f int) []float64 {
	dinp := make([]float64, n*2*f)
	for i := range n {
		for j := range f {
			g, u, dy := inp[i*2*f+j], inp[i*2*f+f+j], dout[i*f+j]
			s := 1 / (1 + math.Exp(-g))
			dinp[i*2*f+j] = dy * u * (s + g*s*(1-s))
			dinp[i*2*f+f+j] = dy * g * s
		}
	}
	return dinp
}

// gqaSplit returns the column offsets in a packed qkv row of width
// (NH+2·NKV)·HS of query head h, its key head and its value head.
func gqaSplit(h, nh, nkv, hs int) (qo, ko, vo int) {
	kv := h / (nh / nkv)
	return h * hs, (nh + kv) * hs, (nh + nkv + kv) * hs
}

// RefGQAAttentionForward is grouped-query causal attention over
// qkv[B,T,(NH+2·NKV)·HS] with the mask rule of RefAttentionForward; query
// head h uses KV head h/(NH/NKV). Returns out[B,T,NH·HS] and
// att[B,NH,T,T].
func RefGQAAttentionForward(qkv []float64, mask []int32, b, t, nh, nkv, hs int) (out, att []float64) {
	w, cq := (nh+2*nkv)*hs, nh*hs
	out, att = make([]float64, b*t*cq), make([]float64, b*nh*t*t)
	for bi := range b {
		for h := range nh {
			qo, ko, vo := gqaSplit(h, nh, nkv, hs)
			for ti := range t {
				q := qkv[(bi*t+ti)*w+qo:][:hs]
				p := refAttnProbsQ(q, mask, bi, ti, t, t, hs, func(j int) []float64 {
					return qkv[(bi*t+j)*w+ko:][:hs]
				})
				copy(att[((bi*nh+h)*t+ti)*t:], p)
				for j, pj := range p {
					v := qkv[(bi*t+j)*w+vo:][:hs]
					for e := range hs {
						out[(bi*t+ti)*cq+h*hs+e] += pj * v[e]
					}
				}
			}
		}
	}
	return
}

// RefGQAAttentionBackward returns dqkv[B,T,(NH+2·NKV)·HS] for
// RefGQAAttentionForward: a fully masked row passes gradient to v only.
func RefGQAAttentionBackward(dout, qkv []float64, mask []int32, b, t, nh, nkv, hs int) []float64 {
	w, cq := (nh+2*nkv)*hs, nh*hs
	_, att := RefGQAAttentionForward(qkv, mask, b, t, nh, nkv, hs)
	scale := 1 / math.Sqrt(float64(hs))
	dqkv := make([]float64, len(qkv))
	for bi := range b {
		for h := range nh {
			qo, ko, vo := gqaSplit(h, nh, nkv, hs)
			for ti := range t {
				p := att[((bi*nh+h)*t+ti)*t:][:t]
				g := dout[(bi*t+ti)*cq+h*hs:][:hs]
				dp := make([]float64, t)
				var dot float64
				for j := range t {
					v := qkv[(bi*t+j)*w+vo:][:hs]
					for e := range hs {
						dp[j] += g[e] * v[e]
						dqkv[(bi*t+j)*w+vo+e] += p[j] * g[e]
					}
					dot += p[j] * dp[j]
				}
				if fullyMasked(mask, bi, ti, t) {
					continue
				}
				q := qkv[(bi*t+ti)*w+qo:][:hs]
				for j := range t {
					ds := p[j] * (dp[j] - dot)
					k := qkv[(bi*t+j)*w+ko:][:hs]
					for e := range hs {
						dqkv[(bi*t+ti)*w+qo+e] += ds * scale * k[e]
						dqkv[(bi*t+j)*w+ko+e] += ds * scale * q[e]
					}
				}
			}
		}
	}
	return dqkv
}

// RefGQAAttentionDecode runs tn new queries (positions t0..t0+tn-1, from
// qkv[B,tn,(NH+2·NKV)·HS]) against caches kc, vc [B,NKV,Tmax,HS] that already
// hold positions 0..t0+tn-1, with mask[B,Tmax]. Returns out[B,tn,NH·HS].
func RefGQAAttentionDecode(qkv, kc, vc []float64, mask []int32, b, tn, t0, tmax, nh, nkv, hs int) []float64 {
	w, cq := (nh+2*nkv)*hs, nh*hs
	out := make([]float64, b*tn*cq)
	for bi := range b {
		for h := range nh {
			kv := h / (nh / nkv)
			cb := (bi*nkv + kv) * tmax * hs
			for i := range tn {
				q := qkv[(bi*tn+i)*w+h*hs:][:hs]
				p := refAttnProbsQ(q, mask, bi, t0+i, t0+tn, tmax, hs, func(j int) []float64 {
					return kc[cb+j*hs:][:hs]
				})
				for j, pj := range p {
					v := vc[cb+j*hs:][:hs]
					for e := range hs {
						out[(bi*tn+i)*cq+h*hs+e] += pj * v[e]
					}
				}
			}
		}
	}
	return out
}
