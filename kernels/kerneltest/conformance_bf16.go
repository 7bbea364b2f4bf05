package kerneltest

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// The bf16 tier: every op whose operands the contract lets be BF16, run
// with BF16 operands (subtests "bf16/<Op>").
//
// The contract (kernels/ops.go, kernels/kernels.go): a BF16 weight makes a
// matmul a bf16 matmul — every product's inputs are rounded to bf16 (round
// to nearest even; F32 operands are rounded as they are read) and the
// products are accumulated in fp32 into F32 outputs. Other BF16 operands
// (LayerNorm weight and bias, AddBias's bias, Add's b, an embedding table)
// are widened exactly and the op runs in fp32. The references here are the
// float64 ones of ref.go applied to inputs rounded by RefRoundBF16, which is
// exactly what the contract says a backend computes, up to the fp32
// arithmetic. So the tolerances are those of the fp32 tier:
//
//   - a product of two bf16 values (8-bit significands) has at most 16
//     significant bits and is exact in fp32, so a bf16 matmul differs from
//     the reference only by its fp32 accumulation, as an fp32 matmul does:
//     RTol (1e-5 of |want| + rms(want)) with the fp32 tier's shapes;
//   - widened operands are exact, so the LayerNorm, AddBias and Add checks
//     keep the fp32 tier's RTol, and an embedding lookup and the
//     conversions are bit-exact.
//
// The DESIGN's "bf16 ~1e-2" is the distance between a bf16 and an fp32
// computation of the same unrounded inputs; it is not needed here and would
// hide the one thing this tier checks. A backend that computes a bf16
// matmul in fp32 (no rounding), truncates instead of rounding to nearest
// even, rounds alpha·A, or rounds the accumulator to bf16 fails at RTol
// (those errors are around 2^-9 relative); bf16/Rounding shows it on exact
// cases. Inputs stay well inside the normal range: VDPBF16PS and tensor
// cores flush bf16 denormals, which the contract does not rule on for
// products.
var conformanceBF16 = []testCase{
	{"Convert", testBF16Convert},
	{"Alloc", testBF16Alloc},
	{"Gemm", testBF16Gemm},
	{"Rounding", testBF16Rounding},
	{"MatmulForward", testBF16MatmulForward},
	{"MatmulBackward", testBF16MatmulBackward},
	{"AddBias", testBF16AddBias},
	{"Add", testBF16Add},
	{"Embedding", testBF16Embedding},
	{"LayerNorm", testBF16LayerNorm},
	{"RMSNorm", testBF16RMSNorm},
	{"HeadRMSNorm", testBF16HeadRMSNorm},
	{"AdamW", testBF16AdamW},
}

// bf16Specials are float32 bit patterns whose bf16 rounding is a corner
// case (see TestRefBF16Bits for each one's value): exact values, ties to
// even both ways and of both signs, carries into the exponent, overflow to
// infinity, infinities, signed zeros, denormals and NaNs whose payload sits
// in the bits bf16 drops.
var bf16Specials = []uint32{
	0x3f800000, 0x3f800001, 0x3f807fff, 0x3f808000, 0x3f808001, 0x3f818000,
	0xbf818000, 0xbf808000, 0xbf808001, 0x3fffffff, 0x40490fdb, 0x3dcccccd,
	0x7f7f0000, 0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7fffff, 0x7f800000,
	0xff800000, 0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00008000,
	0x00008001, 0x00018000, 0x00400000, 0x007fffff, 0x807fffff, 0x00800000,
	0x7fc00000, 0x7f800001, 0x7fbfffff, 0xffffffff, 0xff800001,
}

// bf16Values returns n float32 values for the conversion tests: the
// specials first, then random bit patterns (every exponent, denormals,
// infinities and NaNs with any payload).
func bf16Values(e *Env, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		if i < len(bf16Specials) {
			v[i] = math.Float32frombits(bf16Specials[i])
		} else {
			v[i] = math.Float32frombits(e.Rng.Uint32())
		}
	}
	return v
}

// sameBits fails the test unless got[i] is want[i] bit for bit (signed
// zeros included), any NaN matching any NaN (the contract keeps NaNs NaN,
// not their payload).
func (e *Env) sameBits(name string, got, want []float32) {
	e.T.Helper()
	if len(got) != len(want) {
		e.T.Fatalf("%s: length %d, want %d", name, len(got), len(want))
	}
	for i := range got {
		g, w := math.Float32bits(got[i]), math.Float32bits(want[i])
		if math.IsNaN(float64(want[i])) && math.IsNaN(float64(got[i])) {
			continue
		}
		if g != w {
			e.T.Fatalf("%s: [%d] = %g (bits %#08x), want %g (bits %#08x)", name, i, got[i], g, want[i], w)
		}
	}
}

func testBF16Convert(e *Env) {
	for _, n := range []int{0, 1, 17, 1000, 100003} {
		x := bf16Values(e, n)
		want := RefRoundBF16s(x) // what a BF16 buffer written with x reads back as
		name := fmt.Sprintf("n=%d", n)

		// WriteF32 into BF16 rounds to nearest even; ReadF32 widens.
		h := e.BF16(make([]float32, n))
		e.Dev.WriteF32(h, x)
		e.sameBits(name+" WriteF32 into bf16, ReadF32", e.Read(h), want)

		// Copy F32 -> BF16 rounds (into NaNs: every element is written).
		nans := make([]float32, n)
		for i := range nans {
			nans[i] = float32(math.NaN())
		}
		h = e.BF16(nans)
		e.Dev.Copy(h, e.F32(x))
		e.sameBits(name+" Copy f32 -> bf16", e.Read(h), want)

		// Copy BF16 -> F32 widens exactly.
		src := e.BF16(x)
		f := e.NaNs(n)
		e.Dev.Copy(f, src)
		e.sameBits(name+" Copy bf16 -> f32", e.Read(f), want)

		// Copy BF16 -> BF16 copies.
		h = e.BF16(nans)
		e.Dev.Copy(h, src)
		e.sameBits(name+" Copy bf16 -> bf16", e.Read(h), want)

		// Zero clears to +0.
		e.Dev.Zero(h)
		e.sameBits(name+" Zero", e.Read(h), make([]float32, n))

		// A view that starts and ends inside a buffer (an odd element
		// offset: byte offsets that are not 4-aligned).
		if n >= 5 {
			whole := e.BF16(nans)
			v := whole.Slice(1, n-2)
			e.Dev.WriteF32(v, x[:n-2])
			got := e.Read(whole)
			e.sameBits(name+" WriteF32 into a bf16 view", got[1:n-1], want[:n-2])
			e.sameBits(name+" WriteF32 into a bf16 view: outside it", []float32{got[0], got[n-1]}, []float32{nans[0], nans[0]})
			e.Dev.Zero(v)
			got = e.Read(whole)
			e.sameBits(name+" Zero of a bf16 view", got[1:n-1], make([]float32, n-2))
			e.sameBits(name+" Zero of a bf16 view: outside it", []float32{got[0], got[n-1]}, []float32{nans[0], nans[0]})
		}
	}
}

func testBF16Alloc(e *Env) {
	d := e.Dev
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F32} {
		for _, n := range []int{0, 1, 7, 1000, 100003} {
			name := fmt.Sprintf("Alloc(%v, %d)", dt, n)
			s0 := d.MemStats()
			b, err := d.Alloc(dt, n)
			if err != nil {
				e.T.Fatalf("%s: %v", name, err)
			}
			if b.DType() != dt || b.Len() != n {
				e.T.Fatalf("%s: got a %v buffer of %d", name, b.DType(), b.Len())
			}
			s1 := d.MemStats()
			size := int64(n) * int64(dt.Size())
			if s1.Live != s0.Live+size {
				e.T.Fatalf("%s: Live %d -> %d, want +%d", name, s0.Live, s1.Live, size)
			}
			if s1.Peak != max(s0.Peak, s1.Live) {
				e.T.Fatalf("%s: Peak %d -> %d with Live %d, want %d", name, s0.Peak, s1.Peak, s1.Live, max(s0.Peak, s1.Live))
			}
			e.sameBits(name+" is zeroed", e.Read(b), make([]float32, n))
			d.Free(b)
			s2 := d.MemStats()
			if s2.Live != s0.Live || s2.Peak != s1.Peak {
				e.T.Fatalf("%s: after Free Live %d, Peak %d; want %d, %d", name, s2.Live, s2.Peak, s0.Live, s1.Peak)
			}
		}
	}
	// Peak keeps the largest Live: two live buffers raise it by both,
	// freeing them leaves it.
	s0 := d.MemStats()
	a, err := d.Alloc(kernels.BF16, 3000)
	if err != nil {
		e.T.Fatal(err)
	}
	b, err := d.Alloc(kernels.BF16, 5001)
	if err != nil {
		e.T.Fatal(err)
	}
	s1 := d.MemStats()
	if s1.Live != s0.Live+2*8001 || s1.Peak != max(s0.Peak, s1.Live) {
		e.T.Fatalf("two bf16 buffers of 3000 and 5001: Live %d -> %d, Peak %d -> %d", s0.Live, s1.Live, s0.Peak, s1.Peak)
	}
	d.Free(a)
	d.Free(nil) // a no-op
	if s := d.MemStats(); s.Live != s0.Live+2*5001 || s.Peak != s1.Peak {
		e.T.Fatalf("after freeing 3000 bf16: Live %d, Peak %d; want %d, %d", s.Live, s.Peak, s0.Live+2*5001, s1.Peak)
	}
	d.Free(b)
	if s := d.MemStats(); s.Live != s0.Live || s.Peak != s1.Peak {
		e.T.Fatalf("after freeing both: Live %d, Peak %d; want %d, %d", s.Live, s.Peak, s0.Live, s1.Peak)
	}
}

// bf16Mixes are the operand dtypes of a bf16 Gemm: A, B.
var bf16Mixes = [][2]kernels.DType{
	{kernels.BF16, kernels.F32},
	{kernels.F32, kernels.BF16},
	{kernels.BF16, kernels.BF16},
}

// upload puts x into a guarded buffer of dt (F32 as it is, BF16 rounded).
func (e *Env) upload(dt kernels.DType, x []float32) kernels.Buffer {
	if dt == kernels.BF16 {
		return e.BF16(x)
	}
	return e.F32(x)
}

func testBF16Gemm(e *Env) {
	shapes := [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 48, 80}, {100, 70, 129}, {5, 130, 40}, {4, 6, 0}}
	for _, sh := range shapes {
		m, n, k := sh[0], sh[1], sh[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for mi, mix := range bf16Mixes {
					// alpha and beta as in the fp32 tier; -1.25·A is not
					// a bf16 when A is, so a backend that scales A before
					// rounding it fails.
					for ci, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-1.25, -0.75}} {
						pad := (ci + mi) % 3 * 3 // leading dimensions larger than the matrix
						ar, ac := m, k
						if ta {
							ar, ac = k, m
						}
						br, bc := k, n
						if tb {
							br, bc = n, k
						}
						lda, ldb, ldc := max(ac+pad, 1), max(bc+pad, 1), n+pad
						a, b := e.Randn(ar*lda, 1), e.Randn(br*ldb, 1)
						c := e.Randn(m*ldc, 1)
						c64 := F64(c)
						alpha, beta := ab[0], ab[1]
						if beta == 0 {
							// beta == 0 overwrites C: NaNs must not propagate.
							for i := range m {
								for j := range n {
									c[i*ldc+j] = float32(math.NaN())
								}
							}
						}
						cb := e.F32(c)
						e.Dev.Gemm(ta, tb, m, n, k, alpha, e.upload(mix[0], a), lda, e.upload(mix[1], b), ldb, beta, cb, ldc)
						want := RefGemm(ta, tb, m, n, k, float64(alpha), F64(RefRoundBF16s(a)), lda, F64(RefRoundBF16s(b)), ldb, float64(beta), c64, ldc)
						if beta == 0 {
							// columns past n keep their (non-NaN) values.
							for i := range m {
								for j := n; j < ldc; j++ {
									want[i*ldc+j] = float64(c[i*ldc+j])
								}
							}
						}
						e.Close(fmt.Sprintf("Gemm a=%v b=%v ta=%v tb=%v m=%d n=%d k=%d lda=%d ldb=%d ldc=%d alpha=%g beta=%g", mix[0], mix[1], ta, tb, m, n, k, lda, ldb, ldc, alpha, beta), e.Read(cb), want, RTol)
					}
				}
			}
		}
	}
}

// roundingCases are float32 inputs with bits below bf16 precision, each
// with the bf16 it rounds to: all of them products with powers of two and
// small sums of them are exact in fp32, so a bf16 matmul must give these
// values bit for bit, while computing in fp32 (no rounding) or truncating
// gives others.
var roundingCases = [][2]float32{
	{1 + 0x1p-10, 1},                   // below half an ulp (2^-8)
	{1 + 0x1p-8, 1},                    // a tie to the even 1
	{1 + 3*0x1p-8, 1 + 0x1p-6},         // a tie to the even 1+2^-6 (truncation gives 1+2^-7)
	{1 + 0x1p-8 + 0x1p-20, 1 + 0x1p-7}, // just past the tie: up
	{-(1 + 3*0x1p-8), -(1 + 0x1p-6)},   // a negative tie
	{3 - 0x1p-20, 3},                   // rounds up
	{0.75 + 0x1p-11, 0.75},             // below half an ulp (2^-9)
}

// testBF16Rounding checks that bf16 matmuls round their F32 inputs, on
// cases where every product and sum is exact: the answers must match bit
// for bit. Each row of the F32 operand holds one case (one-hot), so no sum
// can cancel one case's error with another's.
func testBF16Rounding(e *Env) {
	nc := len(roundingCases)
	const w = 16 // the other dimension, wide enough to leave the tiny-matrix paths
	raw, rounded := make([]float32, nc), make([]float32, nc)
	for i, rc := range roundingCases {
		raw[i], rounded[i] = rc[0], rc[1]
	}
	// oneHot returns [nc, w] with row i holding v[i] in column i%w.
	oneHot := func(v []float32) []float32 {
		x := make([]float32, nc*w)
		for i := range nc {
			x[i*w+i%w] = v[i]
		}
		return x
	}
	ones := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = 1
		}
		return x
	}
	// want[i, j] = rounded[i] if column j of the ones hits the one-hot
	// column; with ones everywhere every j does.
	wantRows := func(v []float32, cols int, add float32) []float32 {
		out := make([]float32, nc*cols)
		for i := range nc {
			for j := range cols {
				out[i*cols+j] = v[i] + add
			}
		}
		return out
	}
	x := oneHot(raw)

	// Gemm with the F32 operand as A (C[nc,w] = X[nc,w]·Ones[w,w]) and as B
	// (Cᵀ: C[w,nc] = Ones[w,w]·Xᵀ with B transposed).
	c := e.NaNs(nc * w)
	e.Dev.Gemm(false, false, nc, w, w, 1, e.F32(x), w, e.BF16(ones(w*w)), w, 0, c, w)
	e.Equal("Gemm with an F32 A", e.Read(c), wantRows(rounded, w, 0))
	ct := e.NaNs(w * nc)
	e.Dev.Gemm(false, true, w, nc, w, 1, e.BF16(ones(w*w)), w, e.F32(x), w, 0, ct, nc)
	got := e.Read(ct)
	for j := range w {
		for i := range nc {
			if got[j*nc+i] != rounded[i] {
				e.T.Fatalf("Gemm with an F32 B: C[%d,%d] = %g, want %g (the bf16 of %g)", j, i, got[j*nc+i], rounded[i], raw[i])
			}
		}
	}

	// MatmulForward: out[nc,oc] = X·Onesᵀ.
	const oc = 3
	out := e.NaNs(nc * oc)
	e.Dev.MatmulForward(out, e.F32(x), e.BF16(ones(oc*w)), nil, nc, w, oc)
	e.Equal("MatmulForward rounds inp", e.Read(out), wantRows(rounded, oc, 0))

	// MatmulBackward with dout = X (N = nc rows, OC = w): dinp = X·Ones,
	// dweight += Xᵀ·inp with inp = 1+2^-10 everywhere (rounded: 1), dbias
	// += the column sums of the F32 dout, which is no product and is not
	// rounded. dweight and dbias start at 0.5; every sum stays exact.
	const cc = 5
	inpRaw := make([]float32, nc*cc)
	for i := range inpRaw {
		inpRaw[i] = 1 + 0x1p-10
	}
	halves := func(n int) []float32 {
		x := ones(n)
		for i := range x {
			x[i] = 0.5
		}
		return x
	}
	dinp, dw, db := e.NaNs(nc*cc), e.F32(halves(w*cc)), e.F32(halves(w))
	e.Dev.MatmulBackward(dinp, dw, db, e.F32(x), e.F32(inpRaw), e.BF16(ones(w*cc)), nc, cc, w)
	e.Equal("MatmulBackward dinp rounds dout", e.Read(dinp), wantRows(rounded, cc, 0))
	// dweight[o, j] = 0.5 + Σ_i round(x[i,o])·round(inp[i,j]): column o of
	// X holds the cases i with i%w == o.
	wantDW := make([]float32, w*cc)
	wantDB := make([]float32, w)
	for o := range w {
		sw, sb := float32(0.5), float32(0.5)
		for i := range nc {
			if i%w == o {
				sw += rounded[i]
				sb += raw[i]
			}
		}
		for j := range cc {
			wantDW[o*cc+j] = sw
		}
		wantDB[o] = sb
	}
	e.Equal("MatmulBackward dweight rounds dout and inp", e.Read(dw), wantDW)
	e.Equal("MatmulBackward dbias sums the unrounded dout", e.Read(db), wantDB)
}

// matmulShapesBF16 adds one-row shapes (the decoding path: one token per
// sequence) and odd sizes to the fp32 tier's.
var matmulShapesBF16 = [][3]int{{1, 1, 1}, {1, 64, 50}, {1, 33, 77}, {2, 17, 9}, {4, 3, 5}, {7, 16, 33}, {33, 64, 48}, {65, 95, 81}}

func testBF16MatmulForward(e *Env) {
	for _, sh := range matmulShapesBF16 {
		n, c, oc := sh[0], sh[1], sh[2]
		for _, withBias := range []bool{false, true} {
			inp, w := e.Randn(n*c, 1), e.Randn(oc*c, 1)
			var bias []float32
			if withBias {
				bias = e.Randn(oc, 1)
			}
			out := e.NaNs(n * oc)
			e.Dev.MatmulForward(out, e.F32(inp), e.BF16(w), e.MaybeBF16(bias), n, c, oc)
			want := RefMatmulForward(F64(RefRoundBF16s(inp)), F64(RefRoundBF16s(w)), F64(RefRoundBF16s(bias)), n, c, oc)
			e.Close(fmt.Sprintf("MatmulForward bf16 weight n=%d c=%d oc=%d bias=%v", n, c, oc, withBias), e.Read(out), want, RTol)
		}
	}
}

func testBF16MatmulBackward(e *Env) {
	for _, sh := range matmulShapesBF16 {
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
			e.Dev.MatmulBackward(dinp, dw, db, e.F32(dout), e.F32(inp), e.BF16(w), n, c, oc)
			// Both products are bf16 matmuls: dout, inp and the weight
			// rounded. dbias sums the F32 dout as it is.
			rdi, rdw, _ := RefMatmulBackward(F64(RefRoundBF16s(dout)), F64(RefRoundBF16s(inp)), F64(RefRoundBF16s(w)), n, c, oc)
			_, _, rdb := RefMatmulBackward(F64(dout), F64(inp), F64(w), n, c, oc)
			name := fmt.Sprintf("MatmulBackward bf16 weight n=%d c=%d oc=%d mask=%d", n, c, oc, mask)
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

func testBF16AddBias(e *Env) {
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {33, 100}, {70, 768}} {
		n, c := sh[0], sh[1]
		x, b := e.Randn(n*c, 1), e.Randn(c, 1)
		out := e.F32(x)
		e.Dev.AddBias(out, e.BF16(b), n, c)
		want, rb := F64(x), RefRoundBF16s(b)
		for i := range n {
			for j := range c {
				want[i*c+j] += float64(rb[j])
			}
		}
		e.Close(fmt.Sprintf("AddBias bf16 bias n=%d c=%d", n, c), e.Read(out), want, RTol)
	}
}

func testBF16Add(e *Env) {
	for _, n := range elemSizes {
		a, b := e.Randn(n, 1), e.Randn(n, 1)
		want := add64(F64(a), F64(RefRoundBF16s(b)))
		out := e.NaNs(n)
		bb := e.BF16(b)
		e.Dev.Add(out, e.F32(a), bb, n)
		e.Close(fmt.Sprintf("Add bf16 b n=%d", n), e.Read(out), want, RTol)
		ab := e.F32(a)
		e.Dev.Add(ab, ab, bb, n) // out aliases a
		e.Close(fmt.Sprintf("Add bf16 b n=%d out=a", n), e.Read(ab), want, RTol)
	}
}

func testBF16Embedding(e *Env) {
	for _, sh := range [][3]int{{1, 1, 1}, {5, 3, 4}, {64, 10, 33}, {300, 50, 768}} {
		n, v, c := sh[0], sh[1], sh[2]
		table := e.Randn(v*c, 1)
		rt := RefRoundBF16s(table)
		ids := e.RandIDs(n, v) // v < n: repeated ids
		out := e.NaNs(n * c)
		e.Dev.EmbeddingForward(out, e.I32(ids), e.BF16(table), n, c)
		want := make([]float32, n*c)
		for i, id := range ids {
			copy(want[i*c:(i+1)*c], rt[int(id)*c:])
		}
		e.Equal(fmt.Sprintf("Embedding bf16 table n=%d v=%d c=%d", n, v, c), e.Read(out), want)
	}
}

func testBF16LayerNorm(e *Env) {
	const eps = 1e-5
	for _, sh := range [][2]int{{1, 1}, {3, 7}, {5, 768}, {17, 100}, {64, 33}} {
		n, c := sh[0], sh[1]
		for affine := 1; affine < 4; affine++ { // weight, bias or both, in bf16
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
			rw, rb := RefRoundBF16s(w), RefRoundBF16s(b)
			name := fmt.Sprintf("LayerNorm bf16 n=%d c=%d weight=%v bias=%v", n, c, w != nil, b != nil)
			out, mean, rstd := e.NaNs(n*c), e.NaNs(n), e.NaNs(n)
			xb, wb := e.F32(x), e.MaybeBF16(w)
			e.Dev.LayerNormForward(out, mean, rstd, xb, wb, e.MaybeBF16(b), n, c, eps)
			ro, rm, rr := RefLayerNormForward(F64(x), F64(rw), F64(rb), n, c, eps)
			e.Close(name+" out", e.Read(out), ro, RTol)
			e.Close(name+" mean", e.Read(mean), rm, RTol)
			e.Close(name+" rstd", e.Read(rstd), rr, RTol)

			dout := e.Randn(n*c, 1)
			dx0, dw0, db0 := e.Randn(n*c, 1), e.Randn(c, 1), e.Randn(c, 1)
			dx := e.F32(dx0)
			var dw, db kernels.Buffer
			if affine != 2 { // once: no dweight/dbias at all
				dw, db = e.F32(dw0), e.F32(db0)
			}
			e.Dev.LayerNormBackward(dx, dw, db, e.F32(dout), xb, wb, mean, rstd, n, c)
			rdx, rdw, rdb := RefLayerNormBackward(F64(dout), F64(x), F64(rw), n, c, eps)
			e.Close(name+" dinp (accumulated)", e.Read(dx), add64(rdx, F64(dx0)), RTol)
			if dw != nil {
				e.Close(name+" dweight (accumulated)", e.Read(dw), add64(rdw, F64(dw0)), RTol)
				e.Close(name+" dbias (accumulated)", e.Read(db), add64(rdb, F64(db0)), RTol)
			}
		}
	}
}

// testBF16AdamW checks AdamWStepBF16 against the backend's own fp32
// AdamWStep on the joined master weights, bit for bit: after every step
// the BF16 parameters must be the fp32 result rounded to nearest even and
// the low halves its low 16 bits (RefSplitMaster; a tie rounded up is
// carried one ulp further from zero on both sides). The masters start as
// arbitrary fp32 values — the specials' neighbourhoods among them, ties
// both ways — so that every low half, those that look like NaNs as bf16
// included, goes through the kernel.
func testBF16AdamW(e *Env) {
	for _, n := range []int{1, 2, 17, 40000} {
		name := fmt.Sprintf("AdamWStepBF16 n=%d", n)
		w := e.Randn(n, 1)
		for i := 0; i < n && i < len(bf16Specials); i++ {
			if v := math.Float32frombits(bf16Specials[i]); !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) && math.Abs(float64(v)) < 1e30 {
				w[i] = v
			}
		}
		if n > 100 {
			for i := 100; i < n; i += 97 { // ties, exact bf16 values, NaN-like low halves
				b := math.Float32bits(w[i])&^0xffff | [...]uint32{0x8000, 0, 0x7fc1, 0xffff, 0xff81}[i%5]
				w[i] = math.Float32frombits(b)
			}
		}
		hi, lo := make([]float32, n), make([]int32, (n+1)/2)
		setHalves := func() {
			for i, v := range w {
				h, l := RefSplitMaster(v)
				hi[i] = RefWidenBF16(h)
				lo[i/2] = int32(uint32(lo[i/2])&^(0xffff<<(16*(i%2))) | uint32(l)<<(16*(i%2)))
				w[i] = RefJoinMaster(h, l)
			}
		}
		setHalves()
		pb := e.BF16(hi)
		lb := e.I32(lo)
		wb := e.F32(w)
		m1, v1 := e.F32(make([]float32, n)), e.F32(make([]float32, n))
		m2, v2 := e.F32(make([]float32, n)), e.F32(make([]float32, n))
		for step := 1; step <= 4; step++ {
			g := e.Randn(n, 0.1)
			gb := e.F32(g)
			e.Dev.AdamWStepBF16(pb, lb, gb, m1, v1, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.5, step)
			e.Dev.AdamWStep(wb, gb, m2, v2, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.5, step)
			w = e.Read(wb)
			setHalves()
			e.Dev.WriteF32(wb, w) // the fp32 side takes the tie adjustment too
			gotHi, gotLo := e.Read(pb), make([]int32, len(lo))
			e.Dev.ReadI32(gotLo, lb)
			for i := range n {
				if math.Float32bits(gotHi[i]) != math.Float32bits(hi[i]) {
					e.T.Fatalf("%s step %d: params[%d] = %#x, want %#x (master %#x)", name, step, i,
						math.Float32bits(gotHi[i]), math.Float32bits(hi[i]), math.Float32bits(w[i]))
				}
			}
			for k := range lo {
				if gotLo[k] != lo[k] {
					e.T.Fatalf("%s step %d: lo[%d] = %#x, want %#x", name, step, k, uint32(gotLo[k]), uint32(lo[k]))
				}
			}
			if ma, mb := e.Read(m1), e.Read(m2); !equalBits(ma, mb) {
				e.T.Fatalf("%s step %d: first moments differ from AdamWStep's", name, step)
			}
		}
	}
}

func equalBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}
