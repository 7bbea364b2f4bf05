package kerneltest

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// conformance lists the op tests of Run, in the order of kernels.Ops.
var conformance = []testCase{
	{"Gemm", testGemm},
	{"MatmulForward", testMatmulForward},
	{"MatmulBackward", testMatmulBackward},
	{"AddBias", testAddBias},
	{"Add", testAdd},
	{"Scale", testScale},
	{"Embedding", testEmbedding},
	{"LayerNorm", testLayerNorm},
	{"ReLU", testReLU},
	{"GELU", testGELU},
	{"Softmax", testSoftmax},
	{"Attention", testAttention},
	{"AttentionDecode", testAttentionDecode},
	{"RMSNorm", testRMSNorm},
	{"HeadRMSNorm", testHeadRMSNorm},
	{"RoPE", testRoPE},
	{"SwiGLU", testSwiGLU},
	{"GQAAttention", testGQAAttention},
	{"GQAAttentionDecode", testGQAAttentionDecode},
	{"DecodeLongCache", testDecodeLongCache},
	{"FlashAttention", testFlashAttention},
	{"Dropout", testDropout},
	{"Mul", testMul},
	{"CrossEntropy", testCrossEntropy},
	{"LogProbGather", testLogProbGather},
	{"AdamW", testAdamW},
	{"SumSquares", testSumSquares},
}

func testGemm(e *Env) {
	shapes := [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 48, 80}, {100, 70, 129}, {5, 130, 40}}
	for _, sh := range shapes {
		m, n, k := sh[0], sh[1], sh[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for ci, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-1.25, -0.75}} {
					pad := ci * 3 // leading dimensions larger than the matrix
					ar, ac := m, k
					if ta {
						ar, ac = k, m
					}
					br, bc := k, n
					if tb {
						br, bc = n, k
					}
					lda, ldb, ldc := ac+pad, bc+pad, n+pad
					a, b := e.Randn(ar*lda, 1), e.Randn(br*ldb, 1)
					c := e.Randn(m*ldc, 1)
					var cb kernels.Buffer
					c64 := F64(c)
					if ab[1] == 0 {
						// beta == 0 overwrites C: NaNs must not propagate.
						for i := range m {
							for j := range n {
								c[i*ldc+j] = float32(math.NaN())
							}
						}
					}
					cb = e.F32(c)
					alpha, beta := ab[0], ab[1]
					e.Dev.Gemm(ta, tb, m, n, k, alpha, e.F32(a), lda, e.F32(b), ldb, beta, cb, ldc)
					want := RefGemm(ta, tb, m, n, k, float64(alpha), F64(a), lda, F64(b), ldb, float64(beta), c64, ldc)
					if ab[1] == 0 {
						// columns past n keep their (non-NaN) values.
						for i := range m {
							for j := n; j < ldc; j++ {
								want[i*ldc+j] = float64(c[i*ldc+j])
							}
						}
					}
					e.Close(fmt.Sprintf("Gemm ta=%v tb=%v m=%d n=%d k=%d alpha=%g beta=%g", ta, tb, m, n, k, alpha, beta), e.Read(cb), want, RTol)
				}
			}
		}
	}
}

var matmulShapes = [][3]int{{1, 1, 1}, {4, 3, 5}, {7, 16, 33}, {33, 64, 48}, {128, 96, 80}}

func testMatmulForward(e *Env) {
	for _, sh := range matmulShapes {
		n, c, oc := sh[0], sh[1], sh[2]
		for _, withBias := range []bool{false, true} {
			inp, w := e.Randn(n*c, 1), e.Randn(oc*c, 1)
			var bias []float32
			if withBias {
				bias = e.Randn(oc, 1)
			}
			out := e.NaNs(n * oc)
			e.Dev.MatmulForward(out, e.F32(inp), e.F32(w), e.MaybeF32(bias), n, c, oc)
			e.Close(fmt.Sprintf("MatmulForward n=%d c=%d oc=%d bias=%v", n, c, oc, withBias), e.Read(out), RefMatmulForward(F64(inp), F64(w), F64(bias), n, c, oc), RTol)
		}
	}
}

func testMatmulBackward(e *Env) {
	for _, sh := range matmulShapes {
		n, c, oc := sh[0], sh[1], sh[2]
		// which of dinp, dweight, dbias are given
		for _, mask := range []int{7, 6, 5, 3, 1, 2, 4} {
			inp, w, dout := e.Randn(n*c, 1), e.Randn(oc*c, 1), e.Randn(n*oc, 1)
			dw0, db0 := e.Randn(oc*c, 1), e.Randn(oc, 1)
			var dinp, dw, db kernels.Buffer
			if mask&1 != 0 {
				dinp = e.NaNs(n * c)
			}
			if mask&2 != 0 {
				dw = e.F32(dw0)
			}
			if mask&4 != 0 {
				db = e.F32(db0)
			}
			e.Dev.MatmulBackward(dinp, dw, db, e.F32(dout), e.F32(inp), e.F32(w), n, c, oc)
			rdi, rdw, rdb := RefMatmulBackward(F64(dout), F64(inp), F64(w), n, c, oc)
			name := fmt.Sprintf("MatmulBackward n=%d c=%d oc=%d", n, c, oc)
			if dinp != nil {
				e.Close(name+" dinp", e.Read(dinp), rdi, RTol)
			}
			if dw != nil {
				e.Close(name+" dweight (accumulated)", e.Read(dw), add64(rdw, F64(dw0)), RTol)
			}
			if db != nil {
				e.Close(name+" dbias (accumulated)", e.Read(db), add64(rdb, F64(db0)), RTol)
			}
		}
	}
}

func testAddBias(e *Env) {
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {33, 100}, {70, 768}} {
		n, c := sh[0], sh[1]
		x, b := e.Randn(n*c, 1), e.Randn(c, 1)
		out := e.F32(x)
		e.Dev.AddBias(out, e.F32(b), n, c)
		want := F64(x)
		for i := range n {
			for j := range c {
				want[i*c+j] += float64(b[j])
			}
		}
		e.Close(fmt.Sprintf("AddBias n=%d c=%d", n, c), e.Read(out), want, RTol)
	}
}

var elemSizes = []int{0, 1, 5, 16, 17, 1000, 100003}

func testAdd(e *Env) {
	for _, n := range elemSizes {
		a, b := e.Randn(n, 1), e.Randn(n, 1)
		want := add64(F64(a), F64(b))
		out := e.NaNs(n)
		e.Dev.Add(out, e.F32(a), e.F32(b), n)
		e.Close(fmt.Sprintf("Add n=%d", n), e.Read(out), want, RTol)
		ab, bb := e.F32(a), e.F32(b)
		e.Dev.Add(ab, ab, bb, n) // out aliases a
		e.Close(fmt.Sprintf("Add n=%d out=a", n), e.Read(ab), want, RTol)
		ab = e.F32(a)
		e.Dev.Add(bb, ab, bb, n) // out aliases b
		e.Close(fmt.Sprintf("Add n=%d out=b", n), e.Read(bb), want, RTol)
	}
}

func testScale(e *Env) {
	for _, n := range elemSizes {
		x := e.Randn(n, 1)
		b := e.F32(x)
		e.Dev.Scale(b, -0.37, n)
		want := F64(x)
		for i := range want {
			want[i] *= float64(float32(-0.37))
		}
		e.Close(fmt.Sprintf("Scale n=%d", n), e.Read(b), want, RTol)
	}
}

func testMul(e *Env) {
	for _, n := range elemSizes {
		a, b := e.Randn(n, 1), e.Randn(n, 1)
		want := make([]float64, n)
		for i := range want {
			want[i] = float64(a[i]) * float64(b[i])
		}
		out := e.NaNs(n)
		e.Dev.Mul(out, e.F32(a), e.F32(b), n)
		e.Close(fmt.Sprintf("Mul n=%d", n), e.Read(out), want, RTol)
		ab, bb := e.F32(a), e.F32(b)
		e.Dev.Mul(ab, ab, bb, n)
		e.Close(fmt.Sprintf("Mul n=%d out=a", n), e.Read(ab), want, RTol)
		ab = e.F32(a)
		e.Dev.Mul(bb, ab, bb, n)
		e.Close(fmt.Sprintf("Mul n=%d out=b", n), e.Read(bb), want, RTol)
	}
}

func testEmbedding(e *Env) {
	for _, sh := range [][3]int{{1, 1, 1}, {5, 3, 4}, {64, 10, 33}, {300, 50, 768}} {
		n, v, c := sh[0], sh[1], sh[2]
		table := e.Randn(v*c, 1)
		ids := e.RandIDs(n, v) // v < n: repeated ids
		out := e.NaNs(n * c)
		idb := e.I32(ids)
		e.Dev.EmbeddingForward(out, idb, e.F32(table), n, c)
		want := make([]float64, n*c)
		for i, id := range ids {
			for j := range c {
				want[i*c+j] = float64(table[int(id)*c+j])
			}
		}
		name := fmt.Sprintf("Embedding n=%d v=%d c=%d", n, v, c)
		e.Close(name+" forward", e.Read(out), want, 0)

		dout, dt0 := e.Randn(n*c, 1), e.Randn(v*c, 1)
		dt := e.F32(dt0)
		e.Dev.EmbeddingBackward(dt, e.F32(dout), idb, n, c)
		wantD := F64(dt0)
		for i, id := range ids {
			for j := range c {
				wantD[int(id)*c+j] += float64(dout[i*c+j])
			}
		}
		e.Close(name+" backward (accumulated)", e.Read(dt), wantD, RTol)
	}
}

func testLayerNorm(e *Env) {
	const eps = 1e-5
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {5, 768}, {17, 100}, {64, 33}} {
		n, c := sh[0], sh[1]
		for affine := range 4 {
			x := e.Randn(n*c, 1.5)
			for i := range x {
				x[i] += 3 // a mean far from zero
			}
			var w, b []float32
			if affine&1 != 0 {
				w = e.Randn(c, 1)
			}
			if affine&2 != 0 {
				b = e.Randn(c, 1)
			}
			name := fmt.Sprintf("LayerNorm n=%d c=%d weight=%v bias=%v", n, c, w != nil, b != nil)
			out, mean, rstd := e.NaNs(n*c), e.NaNs(n), e.NaNs(n)
			xb, wb := e.F32(x), e.MaybeF32(w)
			e.Dev.LayerNormForward(out, mean, rstd, xb, wb, e.MaybeF32(b), n, c, eps)
			ro, rm, rr := RefLayerNormForward(F64(x), F64(w), F64(b), n, c, eps)
			e.Close(name+" out", e.Read(out), ro, RTol)
			e.Close(name+" mean", e.Read(mean), rm, RTol)
			e.Close(name+" rstd", e.Read(rstd), rr, RTol)

			dout := e.Randn(n*c, 1)
			dx0, dw0, db0 := e.Randn(n*c, 1), e.Randn(c, 1), e.Randn(c, 1)
			dx := e.F32(dx0)
			var dw, db kernels.Buffer
			if affine != 1 { // once: no dweight/dbias at all
				dw, db = e.F32(dw0), e.F32(db0)
			}
			e.Dev.LayerNormBackward(dx, dw, db, e.F32(dout), xb, wb, mean, rstd, n, c)
			rdx, rdw, rdb := RefLayerNormBackward(F64(dout), F64(x), F64(w), n, c, eps)
			e.Close(name+" dinp (accumulated)", e.Read(dx), add64(rdx, F64(dx0)), RTol)
			if dw != nil {
				e.Close(name+" dweight (accumulated)", e.Read(dw), add64(rdw, F64(dw0)), RTol)
				e.Close(name+" dbias (accumulated)", e.Read(db), add64(rdb, F64(db0)), RTol)
			}
		}
	}
}

func testReLU(e *Env) {
	for _, n := range elemSizes {
		x := e.Randn(n, 1)
		if n > 3 {
			x[0], x[1] = 0, float32(math.Copysign(0, -1))
		}
		want, dwant := make([]float64, n), make([]float64, n)
		dout := e.Randn(n, 1)
		for i, v := range x {
			if v > 0 {
				want[i] = float64(v)
				dwant[i] = float64(dout[i])
			}
		}
		out := e.NaNs(n)
		e.Dev.ReLUForward(out, e.F32(x), n)
		e.Close(fmt.Sprintf("ReLUForward n=%d", n), e.Read(out), want, 0)
		xb := e.F32(x)
		e.Dev.ReLUForward(xb, xb, n)
		e.Close(fmt.Sprintf("ReLUForward n=%d in place", n), e.Read(xb), want, 0)

		dx := e.NaNs(n)
		e.Dev.ReLUBackward(dx, e.F32(dout), out, n)
		e.Close(fmt.Sprintf("ReLUBackward n=%d", n), e.Read(dx), dwant, 0)
		db := e.F32(dout)
		e.Dev.ReLUBackward(db, db, out, n)
		e.Close(fmt.Sprintf("ReLUBackward n=%d in place", n), e.Read(db), dwant, 0)
	}
}

func testGELU(e *Env) {
	for _, n := range elemSizes {
		x := e.Randn(n, 2)
		if n > 4 {
			x[0], x[1], x[2], x[3] = 0, -9, 9, -30
		}
		dout := e.Randn(n, 1)
		want, dwant := make([]float64, n), make([]float64, n)
		for i, v := range x {
			want[i] = RefGELU(float64(v))
			dwant[i] = float64(dout[i]) * RefGELUGrad(float64(v))
		}
		out := e.NaNs(n)
		xb := e.F32(x)
		e.Dev.GELUForward(out, xb, n)
		e.Close(fmt.Sprintf("GELUForward n=%d", n), e.Read(out), want, RTol)
		dx := e.NaNs(n)
		e.Dev.GELUBackward(dx, e.F32(dout), xb, n)
		e.Close(fmt.Sprintf("GELUBackward n=%d", n), e.Read(dx), dwant, RTol)
		db := e.F32(dout)
		e.Dev.GELUBackward(db, db, xb, n)
		e.Close(fmt.Sprintf("GELUBackward n=%d in place", n), e.Read(db), dwant, RTol)
	}
}

func testSoftmax(e *Env) {
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {8, 16}, {5, 17}, {9, 100}, {4, 1023}, {2, 50272}} {
		n, c := sh[0], sh[1]
		for _, sc := range []float64{1, 30} {
			x := e.Randn(n*c, sc)
			out := e.NaNs(n * c)
			e.Dev.SoftmaxForward(out, e.F32(x), n, c)
			want := RefSoftmax(F64(x), n, c)
			e.Close(fmt.Sprintf("Softmax n=%d c=%d scale=%g", n, c, sc), e.Read(out), want, RTol)
		}
	}
}

// attnShape is a test configuration of the attention kernels.
type attnShape struct{ b, t, nh, hs int }

var attnShapes = []attnShape{{1, 1, 1, 16}, {2, 5, 2, 16}, {2, 17, 3, 64}, {1, 33, 2, 8}, {3, 9, 2, 20}, {2, 40, 1, 32}}

// attnMasks returns the masks [B,T] exercised for a shape: nil, all real,
// left padding (with a batch row that is entirely padding when B > 1), and
// holes in the middle.
func attnMasks(e *Env, b, t int) map[string][]int32 {
	ms := map[string][]int32{"nil": nil}
	ones := make([]int32, b*t)
	for i := range ones {
		ones[i] = 1
	}
	ms["ones"] = ones
	left := make([]int32, b*t)
	for bi := range b {
		pad := (bi * 3) % (t + 1)
		if bi == 1 {
			pad = t // a row of nothing but padding
		}
		for j := pad; j < t; j++ {
			left[bi*t+j] = 1
		}
	}
	ms["left"] = left
	holes := make([]int32, b*t)
	for i := range holes {
		if e.Rng.IntN(3) != 0 {
			holes[i] = 1
		}
	}
	ms["holes"] = holes
	return ms
}

func testAttention(e *Env) {
	for _, s := range attnShapes {
		c := s.nh * s.hs
		for mname, mask := range attnMasks(e, s.b, s.t) {
			name := fmt.Sprintf("Attention b=%d t=%d nh=%d hs=%d mask=%s", s.b, s.t, s.nh, s.hs, mname)
			qkv := e.Randn(s.b*s.t*3*c, 1)
			out, att := e.NaNs(s.b*s.t*c), e.NaNs(s.b*s.nh*s.t*s.t)
			qb, mb := e.F32(qkv), e.MaybeI32(mask)
			e.Dev.AttentionForward(out, att, qb, mb, s.b, s.t, s.nh, s.hs)
			ro, ra := RefAttentionForward(F64(qkv), mask, s.b, s.t, s.nh, s.hs)
			e.Close(name+" out", e.Read(out), ro, RTol)
			e.Close(name+" att", e.Read(att), ra, RTol)

			dout := e.Randn(s.b*s.t*c, 1)
			dqkv := e.NaNs(len(qkv))
			e.Dev.AttentionBackward(dqkv, e.F32(dout), qb, att, mb, s.b, s.t, s.nh, s.hs)
			e.Close(name+" dqkv", e.Read(dqkv), RefAttentionBackward(F64(dout), F64(qkv), mask, s.b, s.t, s.nh, s.hs), 2*RTol)
		}
	}
}

// fullyMasked reports whether query t of batch row b sees no real key.
func fullyMasked(mask []int32, b, t, stride int) bool {
	if mask == nil {
		return false
	}
	for j := 0; j <= t; j++ {
		if mask[b*stride+j] != 0 {
			return false
		}
	}
	return true
}

func testAttentionDecode(e *Env) {
	for _, s := range attnShapes {
		c := s.nh * s.hs
		tmax := s.t + 3
		for mname, mask := range attnMasks(e, s.b, s.t) {
			name := fmt.Sprintf("AttentionDecode b=%d t=%d nh=%d hs=%d mask=%s", s.b, s.t, s.nh, s.hs, mname)
			var mmax []int32 // the mask widened to [B,Tmax]; later entries 0
			if mask != nil {
				mmax = make([]int32, s.b*tmax)
				for bi := range s.b {
					copy(mmax[bi*tmax:], mask[bi*s.t:(bi+1)*s.t])
				}
			}
			qkv := e.Randn(s.b*s.t*3*c, 1)
			fout, att := e.NaNs(s.b*s.t*c), e.NaNs(s.b*s.nh*s.t*s.t)
			e.Dev.AttentionForward(fout, att, e.F32(qkv), e.MaybeI32(mask), s.b, s.t, s.nh, s.hs)
			full := e.Read(fout)

			// The caches start as NaN: rows not yet written must never be read.
			newCaches := func() (kernels.Buffer, kernels.Buffer) { return e.NaNs(s.b * tmax * c), e.NaNs(s.b * tmax * c) }
			mb := e.MaybeI32(mmax)

			// 1. The whole sequence at once equals AttentionForward.
			kc, vc := newCaches()
			out := e.NaNs(s.b * s.t * c)
			e.Dev.AttentionDecode(out, e.F32(qkv), kc, vc, mb, s.b, s.t, 0, tmax, s.nh, s.hs)
			// Within RTol: a backend may decode with another kernel than its
			// forward (CUDA's flash decoding); kernels/cpu's TestDecodeBitwise
			// holds the CPU to bit-for-bit equality.
			e.Close(name+" t0=0 tn=T vs AttentionForward", e.Read(out), F64(full), RTol)
			// The caches hold k and v at rows 0..T-1.
			kcache, vcache := e.Read(kc), e.Read(vc)
			for bi := range s.b {
				for ti := range s.t {
					for j := range c {
						src := qkv[(bi*s.t+ti)*3*c:]
						if kcache[(bi*tmax+ti)*c+j] != src[c+j] || vcache[(bi*tmax+ti)*c+j] != src[2*c+j] {
							e.T.Fatalf("%s: cache row %d of batch %d differs from qkv", name, ti, bi)
						}
					}
				}
			}

			// 2. One token at a time reproduces the forward at every position
			// whose query sees a real key; a fully masked one is uniform over
			// the keys so far (what HF computes for a [1, t+1] score matrix).
			kc, vc = newCaches()
			step := make([]float64, s.b*s.t*c)
			ref := make([]float64, s.b*s.t*c)
			kc64, vc64 := make([]float64, s.b*tmax*c), make([]float64, s.b*tmax*c)
			for bi := range s.b {
				for ti := range s.t {
					src := qkv[(bi*s.t+ti)*3*c:]
					for j := range c {
						kc64[(bi*tmax+ti)*c+j] = float64(src[c+j])
						vc64[(bi*tmax+ti)*c+j] = float64(src[2*c+j])
					}
				}
			}
			for ti := range s.t {
				one := make([]float32, s.b*3*c)
				for bi := range s.b {
					copy(one[bi*3*c:(bi+1)*3*c], qkv[(bi*s.t+ti)*3*c:])
				}
				o1 := e.NaNs(s.b * c)
				e.Dev.AttentionDecode(o1, e.F32(one), kc, vc, mb, s.b, 1, ti, tmax, s.nh, s.hs)
				r1 := RefAttentionDecode(F64(one), kc64, vc64, mmax, s.b, 1, ti, tmax, s.nh, s.hs)
				got := e.Read(o1)
				for bi := range s.b {
					for j := range c {
						step[(bi*s.t+ti)*c+j] = float64(got[bi*c+j])
						if fullyMasked(mask, bi, ti, s.t) {
							ref[(bi*s.t+ti)*c+j] = r1[bi*c+j]
						} else {
							ref[(bi*s.t+ti)*c+j] = float64(full[(bi*s.t+ti)*c+j])
						}
					}
				}
			}
			e.Close(name+" one token at a time", toF32(step), ref, RTol)

			// 3. A prompt then chunks of 2 against the reference.
			kc, vc = newCaches()
			p0 := s.t / 2
			for t0 := 0; t0 < s.t; {
				tn := p0
				if t0 > 0 {
					tn = min(2, s.t-t0)
				}
				if tn == 0 {
					tn = 1
				}
				chunk := make([]float32, s.b*tn*3*c)
				for bi := range s.b {
					copy(chunk[bi*tn*3*c:(bi+1)*tn*3*c], qkv[(bi*s.t+t0)*3*c:])
				}
				oc := e.NaNs(s.b * tn * c)
				e.Dev.AttentionDecode(oc, e.F32(chunk), kc, vc, mb, s.b, tn, t0, tmax, s.nh, s.hs)
				rc := RefAttentionDecode(F64(chunk), kc64, vc64, mmax, s.b, tn, t0, tmax, s.nh, s.hs)
				e.Close(fmt.Sprintf("%s chunk t0=%d tn=%d", name, t0, tn), e.Read(oc), rc, RTol)
				t0 += tn
			}
		}
	}
}

func toF32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func testDropout(e *Env) {
	for _, n := range []int{0, 1, 17, 10007, 200003} {
		for _, p := range []float32{0, 0.1, 0.5} {
			for _, seed := range []uint64{0, 42, 1 << 63} {
				name := fmt.Sprintf("Dropout n=%d p=%g seed=%d", n, p, seed)
				x := e.Randn(n, 1)
				out, sc := e.NaNs(n), e.NaNs(n)
				xb := e.F32(x)
				e.Dev.DropoutForward(out, sc, xb, p, seed, n)
				got, scale := e.Read(out), e.Read(sc)
				ks := 1 / (1 - float64(p))
				kept := 0
				for i := range n {
					want := 0.0
					if RefDropoutKeep(seed, i, p) {
						want = ks
						kept++
					}
					if math.Abs(float64(scale[i])-want) > 1e-7*want || (want == 0 && scale[i] != 0) {
						e.T.Fatalf("%s: scale[%d] = %g, want %g", name, i, scale[i], want)
					}
					if got[i] != x[i]*scale[i] {
						e.T.Fatalf("%s: out[%d] = %g, want %g·%g", name, i, got[i], x[i], scale[i])
					}
				}
				if p == 0 {
					e.Equal(name+" p=0 is the identity", got, x)
				}
				if n >= 10000 {
					frac := float64(kept) / float64(n)
					sd := math.Sqrt(float64(p) * float64(1-p) / float64(n))
					if math.Abs(frac-float64(1-p)) > 5*sd+1e-12 {
						e.T.Fatalf("%s: kept %.4f, want %.4f", name, frac, 1-p)
					}
				}
				// in place
				e.Dev.DropoutForward(xb, e.NaNs(n), xb, p, seed, n)
				e.Equal(name+" in place", e.Read(xb), got)
			}
		}
	}
}

// ceTargets returns targets in [0,v) with about a quarter set to ignore.
func ceTargets(e *Env, n, v int, ignore int32) []int32 {
	t := e.RandIDs(n, v)
	for i := range t {
		if i%4 == 1 {
			t[i] = ignore
		}
	}
	return t
}

var ceShapes = [][2]int{{1, 1}, {4, 7}, {9, 100}, {6, 1001}, {3, 50272}}

func testCrossEntropy(e *Env) {
	for _, sh := range ceShapes {
		n, v := sh[0], sh[1]
		for _, ignore := range []int32{-100, 1} {
			for _, sc := range []float64{1, 20} {
				name := fmt.Sprintf("CrossEntropy n=%d v=%d ignore=%d scale=%g", n, v, ignore, sc)
				x := e.Randn(n*v, sc)
				tg := ceTargets(e, n, v, ignore)
				xb, tb := e.F32(x), e.I32(tg)
				losses := e.NaNs(n)
				e.Dev.CrossEntropyForward(losses, xb, tb, n, v, ignore)
				e.Close(name+" losses", e.Read(losses), RefCrossEntropyForward(F64(x), tg, n, v, ignore), RTol)

				dl := e.Randn(n, 1)
				want := RefCrossEntropyBackward(F64(dl), F64(x), tg, n, v, ignore)
				dx := e.NaNs(n * v)
				dlb := e.F32(dl)
				e.Dev.CrossEntropyBackward(dx, dlb, xb, tb, n, v, ignore)
				e.Close(name+" dlogits", e.Read(dx), want, RTol)
				// dlogits aliasing logits
				e.Dev.CrossEntropyBackward(xb, dlb, xb, tb, n, v, ignore)
				e.Close(name+" dlogits in place", e.Read(xb), want, RTol)
			}
		}
	}
}

func testLogProbGather(e *Env) {
	for _, sh := range ceShapes {
		n, v := sh[0], sh[1]
		for _, sc := range []float64{1, 20} {
			x := e.Randn(n*v, sc)
			ids := e.RandIDs(n, v)
			out := e.NaNs(n)
			e.Dev.LogProbGather(out, e.F32(x), e.I32(ids), n, v)
			want := make([]float64, n)
			for i := range n {
				want[i] = RefLogSoftmaxAt(F64(x[i*v:(i+1)*v]), int(ids[i]))
			}
			e.Close(fmt.Sprintf("LogProbGather n=%d v=%d scale=%g", n, v, sc), e.Read(out), want, RTol)
		}
	}
}

func testAdamW(e *Env) {
	type hp struct{ lr, b1, b2, eps, wd, gs float32 }
	for _, h := range []hp{
		{1e-3, 0.9, 0.95, 1e-8, 0.1, 1},  // DeepSpeed-Chat's betas
		{5e-2, 0.9, 0.999, 1e-6, 0, 0.5}, // no decay, scaled gradients
		{1e-4, 0.8, 0.99, 1e-8, 0.01, 2}, // grads scaled up
	} {
		for _, n := range []int{1, 17, 40000} {
			name := fmt.Sprintf("AdamW n=%d %+v", n, h)
			p0 := e.Randn(n, 1)
			st := &AdamWState{P: F64(p0), M: make([]float64, n), V: make([]float64, n)}
			pb, mb, vb := e.F32(p0), e.F32(make([]float32, n)), e.F32(make([]float32, n))
			for step := 1; step <= 6; step++ {
				g := e.Randn(n, 0.1)
				e.Dev.AdamWStep(pb, e.F32(g), mb, vb, n, h.lr, h.b1, h.b2, h.eps, h.wd, h.gs, step)
				RefAdamWStep(st, F64(g), float64(h.lr), float64(h.b1), float64(h.b2), float64(h.eps), float64(h.wd), float64(h.gs), step)
				e.Close(fmt.Sprintf("%s step %d m", name, step), e.Read(mb), st.M, RTol)
				e.Close(fmt.Sprintf("%s step %d v", name, step), e.Read(vb), st.V, RTol)
				// The parameters move by about lr per step; judge them at
				// float32 resolution of the parameter itself.
				e.Close(fmt.Sprintf("%s step %d params", name, step), e.Read(pb), st.P, 1e-6)
			}
		}
	}
}

func testSumSquares(e *Env) {
	for _, n := range []int{0, 1, 7, 1000, 100003, 1 << 20} {
		x := e.Randn(n, 3)
		var want float64
		for _, v := range x {
			want += float64(v) * float64(v)
		}
		got := e.Dev.SumSquares(e.F32(x))
		if math.Abs(got-want) > 1e-12*want {
			e.T.Fatalf("SumSquares n=%d: %.17g, want %.17g", n, got, want)
		}
	}
}
