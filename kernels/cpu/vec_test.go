package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// ulps is the distance between got and want in units in the last place of
// want (float32), treating subnormal results as absolute differences.
func ulps(got float32, want float64) float64 {
	w := float32(want)
	if w == 0 {
		return math.Abs(float64(got)) / math.Float64frombits(0x36a0000000000000) // 2^-149
	}
	ulp := math.Abs(float64(math.Nextafter32(w, float32(math.Inf(1)))) - float64(w))
	return math.Abs(float64(got)-want) / ulp
}

func TestExpfAccuracy(t *testing.T) {
	worst := 0.0
	for x := float32(-87.3); x < 88.7; x = math.Nextafter32(x, 100) + 1e-4 {
		if u := ulps(expf(x), math.Exp(float64(x))); u > worst {
			worst = u
		}
	}
	if worst > 2 {
		t.Fatalf("expf: worst error %.2f ulp, want <= 2", worst)
	}
	t.Logf("expf worst error %.2f ulp", worst)
	if expf(-90) != 0 || !math.IsInf(float64(expf(89)), 1) || expf(0) != 1 || !math.IsNaN(float64(expf(float32(math.NaN())))) {
		t.Fatal("expf special values")
	}
}

// vecImpl is one assembly implementation of the vector primitives.
type vecImpl struct {
	name     string
	isa      string // Options.ISA that selects it
	max      func(x []float32) float32
	expSum   func(x []float32, m float32) float32
	expStore func(dst, x []float32, m float32) float32
	scale    func(x []float32, s float32)
	dots     func(dst []float32, q, k *float32, stride, hs int)
	gemvT    func(out *float32, p []float32, v *float32, stride, hs int)
	rank1    func(dst *float32, stride int, a []float32, x *float32, hs int)
}

var (
	vecAVX512 = vecImpl{"avx512", "avx512", maxAVX512, expSumAVX512, expStoreAVX512, scaleAVX512, dotsAVX512, gemvTAVX512, rank1AVX512}
	vecAVX2   = vecImpl{"avx2", "avx2", maxAVX2, expSumAVX2, expStoreAVX2, scaleAVX2, dotsAVX2, gemvTAVX2, rank1AVX2}
)

// vecDevice returns a device whose vector primitives run on isa ("avx512",
// "avx2" or "generic"), or skips t when this CPU has no such code path.
func vecDevice(t testing.TB, isa string) *Device {
	t.Helper()
	d, err := New(Options{ISA: isa})
	if err != nil {
		t.Skipf("ISA %s: %v", isa, err)
	}
	if got := d.vecISA().String(); got != isa {
		t.Skipf("ISA %s: vector primitives run on %s here", isa, got)
	}
	return d
}

func TestVecAsm(t *testing.T) {
	for _, im := range []vecImpl{vecAVX512, vecAVX2} {
		t.Run(im.name, func(t *testing.T) {
			vecDevice(t, im.isa)
			testVecImpl(t, im)
		})
	}
}

func testVecImpl(t *testing.T, im vecImpl) {
	r := rand.New(rand.NewPCG(1, 2))
	// exp accuracy over the whole useful range through expStore.
	var xs []float32
	for x := float32(-103.9); x < 88.7; x += 1e-3 {
		xs = append(xs, x)
	}
	ys := make([]float32, len(xs))
	im.expStore(ys, xs, 0)
	worst := 0.0
	for i, x := range xs {
		want := math.Exp(float64(x))
		if want < 0x1p-126 {
			if math.Abs(float64(ys[i])-want) > 0x1p-149 {
				t.Fatalf("exp(%g) = %g, want %g", x, ys[i], want)
			}
			continue
		}
		if u := ulps(ys[i], want); u > worst {
			worst = u
		}
	}
	if worst > 2 {
		t.Fatalf("exp %s: worst error %.2f ulp", im.name, worst)
	}
	t.Logf("exp %s worst error %.2f ulp", im.name, worst)
	inf := float32(math.Inf(1))
	sp := []float32{-inf, -1000, -104, 0, 89, float32(math.NaN()), inf, 1000, 88.7, -103.9, 9.4e7, 3e38}
	for n := range len(sp) + 1 { // every tail length, each value in every lane
		for rot := range sp {
			in := make([]float32, n)
			for i := range in {
				in[i] = sp[(i+rot)%len(sp)]
			}
			out := make([]float32, n+1)
			out[n] = 42
			im.expStore(out, in, 0)
			for i, x := range in {
				y, ok := out[i], false
				switch {
				case x != x:
					ok = y != y
				case x <= -104:
					ok = y == 0
				case x > 88.8:
					ok = math.IsInf(float64(y), 1)
				default:
					ok = ulps(y, math.Exp(float64(x))) <= 2
				}
				if !ok {
					t.Fatalf("exp(%g) = %g (n=%d)", x, y, n)
				}
			}
			if out[n] != 42 {
				t.Fatalf("expStore n=%d wrote past the end", n)
			}
		}
	}

	for _, n := range []int{1, 3, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 63, 64, 65, 72, 100, 129, 1000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
		}
		if got, want := im.max(x), goMax(x); got != want {
			t.Fatalf("n=%d max %g want %g", n, got, want)
		}
		m := goMax(x)
		s1 := float64(im.expSum(x, m))
		s2 := goExpSum(x, m)
		if math.Abs(s1-s2) > 1e-6*s2 {
			t.Fatalf("n=%d expsum %g want %g", n, s1, s2)
		}
		d1 := make([]float32, n+1)
		d1[n] = 42
		s3 := float64(im.expStore(d1, x, m))
		if math.Abs(s3-s2) > 1e-6*s2 || d1[n] != 42 {
			t.Fatalf("n=%d expstore sum %g want %g (guard %g)", n, s3, s2, d1[n])
		}
		if s3 != s1 {
			t.Fatalf("n=%d expstore sum %g, expsum %g", n, s3, s1)
		}
		for i := range x {
			if u := ulps(d1[i], math.Exp(float64(x[i]-m))); u > 2 && d1[i] > 1e-37 {
				t.Fatalf("n=%d expstore[%d]=%g", n, i, d1[i])
			}
		}
		// In place, as softmax calls it.
		d2 := append([]float32(nil), x...)
		if s4 := im.expStore(d2, d2, m); float64(s4) != s3 {
			t.Fatalf("n=%d in-place expstore sum %g want %g", n, s4, s3)
		}
		for i := range x {
			if math.Float32bits(d2[i]) != math.Float32bits(d1[i]) {
				t.Fatalf("n=%d in-place expstore[%d] = %g want %g", n, i, d2[i], d1[i])
			}
		}
		y := append([]float32(nil), x...)
		y = append(y, 7)
		im.scale(y[:n], 0.3)
		for i := range x {
			if y[i] != x[i]*0.3 {
				t.Fatalf("scale")
			}
		}
		if y[n] != 7 {
			t.Fatal("scale guard")
		}
		// max with the maximum in every position, and all equal.
		for i := range x {
			z := append([]float32(nil), x...)
			z[i] = 100
			if got := im.max(z); got != 100 {
				t.Fatalf("n=%d max with 100 at %d: %g", n, i, got)
			}
		}
		neg := make([]float32, n)
		for i := range neg {
			neg[i] = -5
		}
		if got := im.max(neg); got != -5 {
			t.Fatalf("n=%d max of -5s: %g", n, got)
		}
	}

	for _, hs := range []int{16, 32, 48, 64, 80, 128} {
		for _, n := range []int{1, 2, 3, 4, 5, 8, 9, 33} {
			stride := 3*hs + 16
			q := randVec(r, hs)
			k := randVec(r, (n-1)*stride+hs)
			got, want := make([]float32, n), make([]float32, n)
			im.dots(got, &q[0], &k[0], stride, hs)
			goDots(want, q, k, stride)
			for j := range got {
				if math.Abs(float64(got[j]-want[j])) > 1e-5*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("dots hs=%d n=%d j=%d: %g want %g", hs, n, j, got[j], want[j])
				}
			}
			p := randVec(r, n)
			o1, o2 := randVec(r, hs), make([]float32, hs)
			copy(o2, o1)
			im.gemvT(&o1[0], p, &k[0], stride, hs)
			goGemvT(o2, p, k, stride)
			for c := range o1 {
				if math.Abs(float64(o1[c]-o2[c])) > 1e-5*(1+math.Abs(float64(o2[c]))) {
					t.Fatalf("gemvT hs=%d n=%d c=%d: %g want %g", hs, n, c, o1[c], o2[c])
				}
			}
			k2 := append([]float32(nil), k...)
			im.rank1(&k[0], stride, p, &q[0], hs)
			goRank1(k2, stride, p, q)
			for i := range k {
				if math.Abs(float64(k[i]-k2[i])) > 1e-6*(1+math.Abs(float64(k2[i]))) {
					t.Fatalf("rank1 hs=%d n=%d i=%d: %g want %g", hs, n, i, k[i], k2[i])
				}
			}
		}
	}
}

// TestVecAVX2MatchesAVX512 checks that the AVX2 primitives compute bit for
// bit what the AVX-512 ones do (which needs an AVX-512 CPU to run).
func TestVecAVX2MatchesAVX512(t *testing.T) {
	d512 := vecDevice(t, "avx512")
	d2 := vecDevice(t, "avx2")
	r := rand.New(rand.NewPCG(9, 10))
	same := func(what string, a, b []float32) {
		t.Helper()
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s: [%d] avx2 %g (%#x) vs avx512 %g (%#x)", what, i, a[i], math.Float32bits(a[i]), b[i], math.Float32bits(b[i]))
			}
		}
	}
	// exp of a sample of every float32 bit pattern (all exponents, both
	// signs, subnormals, infinities, NaNs) and of a dense sweep of the
	// range where exp is neither 0 nor +Inf.
	var xs []float32
	for b := uint64(0); b < 1<<32; b += 4093 {
		xs = append(xs, math.Float32frombits(uint32(b)))
	}
	for x := float32(-104.5); x < 89; x += 1.0 / 1024 {
		xs = append(xs, x, math.Nextafter32(x, 0))
	}
	e2, e512 := make([]float32, len(xs)), make([]float32, len(xs))
	s2 := expStoreAVX2(e2, xs, 0)
	s512 := expStoreAVX512(e512, xs, 0)
	for i := range xs {
		a, b := e2[i], e512[i]
		if math.Float32bits(a) != math.Float32bits(b) && !(a != a && b != b) {
			t.Fatalf("exp(%g): avx2 %g (%#x), avx512 %g (%#x)", xs[i], a, math.Float32bits(a), b, math.Float32bits(b))
		}
	}
	if s2 != s512 && !(s2 != s2 && s512 != s512) {
		t.Fatalf("exp sum over %d values: avx2 %g, avx512 %g", len(xs), s2, s512)
	}
	// Row primitives through the devices: every length up to 300 and a
	// long one, with and without masked (-Inf) entries.
	for n := 1; n <= 1100; n++ {
		if n > 300 && n != 1100 {
			continue
		}
		x := randVec(r, n)
		for i := range x {
			x[i] *= 4
			if n%3 == 0 && i%5 == 1 {
				x[i] = float32(math.Inf(-1))
			}
		}
		m2, m512 := d2.rowMax(x), d512.rowMax(x)
		if m2 != m512 {
			t.Fatalf("n=%d max %g vs %g", n, m2, m512)
		}
		if a, b := d2.rowExpSum(x, m2), d512.rowExpSum(x, m2); a != b {
			t.Fatalf("n=%d expsum %g vs %g", n, a, b)
		}
		y2, y512 := make([]float32, n), make([]float32, n)
		a, b := d2.rowExpStore(y2, x, m2), d512.rowExpStore(y512, x, m2)
		if a != b {
			t.Fatalf("n=%d expstore sum %g vs %g", n, a, b)
		}
		same("expstore", y2, y512)
		d2.rowScale(y2, float32(1/a))
		d512.rowScale(y512, float32(1/b))
		same("scale", y2, y512)
	}
	for _, hs := range []int{16, 32, 48, 64, 80, 128, 144, 256} {
		for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 13, 64, 67} {
			stride, ld := hs+16, n+3
			q := randVec(r, 3*(hs+5)+hs)
			k := randVec(r, (n-1)*stride+hs)
			p := randVec(r, 3*ld+n)
			a2, a512 := make([]float32, 3*ld+n), make([]float32, 3*ld+n)
			d2.dots(a2[:n], q[:hs], k, stride)
			d512.dots(a512[:n], q[:hs], k, stride)
			same("dots", a2, a512)
			d2.dots4(a2, ld, q, hs+5, k, stride, n, hs)
			d512.dots4(a512, ld, q, hs+5, k, stride, n, hs)
			same("dots4", a2, a512)
			o2 := randVec(r, 3*(hs+7)+hs)
			o512 := append([]float32(nil), o2...)
			d2.gemvT(o2[:hs], p[:n], k, stride)
			d512.gemvT(o512[:hs], p[:n], k, stride)
			same("gemvT", o2, o512)
			d2.gemvT4(o2, hs+7, p, ld, k, stride, n, hs)
			d512.gemvT4(o512, hs+7, p, ld, k, stride, n, hs)
			same("gemvT4", o2, o512)
			k2 := append([]float32(nil), k...)
			d2.rank1(k2, stride, p[:n], q[:hs])
			d512.rank1(k, stride, p[:n], q[:hs])
			same("rank1", k2, k)
			d2.rank4(k2, stride, p, ld, q, hs+5, n, hs)
			d512.rank4(k, stride, p, ld, q, hs+5, n, hs)
			same("rank4", k2, k)
		}
	}
}

// TestVecISAsAgree runs the kernels built on the vector primitives on the
// AVX2 and AVX-512 paths and wants bit-identical results.
func TestVecISAsAgree(t *testing.T) {
	d512 := vecDevice(t, "avx512")
	d2 := vecDevice(t, "avx2")
	r := rand.New(rand.NewPCG(11, 12))
	same := func(what string, a, b F32) {
		t.Helper()
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s: [%d] avx2 %g vs avx512 %g", what, i, a[i], b[i])
			}
		}
	}
	randF := func(n int, scale float32) F32 {
		x := F32(randVec(r, n))
		for i := range x {
			x[i] *= scale
		}
		return x
	}
	for _, hs := range []int{64, 48, 24} {
		const b, T, nh = 2, 37, 2
		c := nh * hs
		qkv, dout := randF(b*T*3*c, 1), randF(b*T*c, 1)
		mask := make(I32, b*T)
		for i := range mask {
			mask[i] = int32(min(1, i%T/3))
		}
		var outs [2][3]F32
		for i, d := range []*Device{d2, d512} {
			out, att, dqkv := make(F32, b*T*c), make(F32, b*nh*T*T), make(F32, len(qkv))
			d.AttentionForward(out, att, qkv, mask, b, T, nh, hs)
			d.AttentionBackward(dqkv, dout, qkv, att, mask, b, T, nh, hs)
			outs[i] = [3]F32{out, att, dqkv}
		}
		for j, what := range []string{"attention out", "attention probs", "attention dqkv"} {
			same(fmt.Sprintf("hs=%d %s", hs, what), outs[0][j], outs[1][j])
		}
	}
	const n, v = 7, 1003
	logits := randF(n*v, 3)
	targets := make(I32, n)
	for i := range targets {
		targets[i] = int32(r.IntN(v))
	}
	dl := randF(n, 1)
	var res [2][3]F32
	for i, d := range []*Device{d2, d512} {
		sm, loss, dlog := make(F32, n*v), make(F32, n), make(F32, n*v)
		d.SoftmaxForward(sm, logits, n, v)
		d.CrossEntropyForward(loss, logits, targets, n, v, -100)
		d.CrossEntropyBackward(dlog, dl, logits, targets, n, v, -100)
		res[i] = [3]F32{sm, loss, dlog}
	}
	for j, what := range []string{"softmax", "cross-entropy loss", "cross-entropy grad"} {
		same(what, res[0][j], res[1][j])
	}
}

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// TestVec4Bitwise pins the promise the attention kernels rely on: the
// four-row primitives give bit-identical results to the one-row ones, and
// (within tolerance) to the portable Go code, for every head size shape.
func TestVec4Bitwise(t *testing.T) {
	for _, isa := range []string{"avx512", "avx2"} {
		t.Run(isa, func(t *testing.T) { testVec4Bitwise(t, vecDevice(t, isa)) })
	}
}

func testVec4Bitwise(t *testing.T, d *Device) {
	r := rand.New(rand.NewPCG(5, 6))
	same := func(what string, a, b []float32) {
		t.Helper()
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s: [%d] %g vs %g", what, i, a[i], b[i])
			}
		}
	}
	for _, hs := range []int{16, 32, 48, 64, 80, 128, 144} {
		for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 13, 64} {
			stride, ld := hs+16, n+3
			q := randVec(r, 3*(hs+5)+hs)
			k := randVec(r, (n-1)*stride+hs)
			// dots4 vs dots
			got := make([]float32, 3*ld+n)
			d.dots4(got, ld, q, hs+5, k, stride, n, hs)
			for row := range 4 {
				want := make([]float32, n)
				d.dots(want, q[row*(hs+5):row*(hs+5)+hs], k, stride)
				same("dots4", got[row*ld:row*ld+n], want)
				gw := make([]float32, n)
				goDots(gw, q[row*(hs+5):row*(hs+5)+hs], k, stride)
				for j := range gw {
					if math.Abs(float64(gw[j]-want[j])) > 1e-5*(1+math.Abs(float64(gw[j]))) {
						t.Fatalf("dots vs Go: hs=%d n=%d", hs, n)
					}
				}
			}
			// gemvT4 vs gemvT
			p := randVec(r, 3*ld+n)
			out := randVec(r, 3*(hs+7)+hs)
			ref := append([]float32(nil), out...)
			d.gemvT4(out, hs+7, p, ld, k, stride, n, hs)
			for row := range 4 {
				d.gemvT(ref[row*(hs+7):row*(hs+7)+hs], p[row*ld:row*ld+n], k, stride)
			}
			same("gemvT4", out, ref)
			// rank4 vs four rank1
			dst := randVec(r, (n-1)*stride+hs)
			dref := append([]float32(nil), dst...)
			d.rank4(dst, stride, p, ld, q, hs+5, n, hs)
			for row := range 4 {
				d.rank1(dref, stride, p[row*ld:row*ld+n], q[row*(hs+5):row*(hs+5)+hs])
			}
			same("rank4", dst, dref)
		}
	}
}

// BenchmarkVecExpSum compares the exp-sum of one vocabulary-sized row (as
// in cross-entropy) and one attention row on each code path.
func BenchmarkVecExpSum(b *testing.B) {
	for _, n := range []int{50272, 1000} {
		x := randVec(rand.New(rand.NewPCG(1, uint64(n))), n)
		m := goMax(x)
		for _, isa := range []string{"avx512", "avx2", "generic"} {
			b.Run(fmt.Sprintf("n=%d/%s", n, isa), func(b *testing.B) {
				d := vecDevice(b, isa)
				var s float64
				for b.Loop() {
					s += d.rowExpSum(x, m)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gexp/s")
				_ = s
			})
		}
	}
}

// TestReLUAsmBitwise: the branch-free ReLU kernels give, bit for bit, what
// the portable loops give: -0 and NaN pass forward, a NaN or zero output
// passes no gradient, every length's tail, and dx aliasing dy.
func TestReLUAsmBitwise(t *testing.T) {
	if !haveVecAsm {
		t.Skip("no assembly on this architecture")
	}
	asm, gen := vecDevice(t, "avx2"), vecDevice(t, "generic")
	r := rand.New(rand.NewPCG(21, 22))
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), -float32(math.NaN()),
		float32(math.Inf(1)), float32(math.Inf(-1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32}
	for _, n := range []int{1, 7, 8, 9, 31, 32, 33, 77, 1000, elemGrain + 13} {
		x, dy := make(F32, n), make(F32, n)
		for i := range x {
			x[i], dy[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			if r.IntN(4) == 0 {
				x[i] = specials[r.IntN(len(specials))]
			}
			if r.IntN(8) == 0 {
				dy[i] = specials[r.IntN(len(specials))]
			}
		}
		var ys, dxs, alias [2]F32
		for k, d := range []*Device{gen, asm} {
			ys[k], dxs[k] = make(F32, n), make(F32, n)
			d.ReLUForward(ys[k], x, n)
			d.ReLUBackward(dxs[k], dy, ys[k], n)
			alias[k] = slices.Clone(dy)
			d.ReLUBackward(alias[k], alias[k], ys[k], n)
		}
		for _, c := range []struct {
			what string
			a, b F32
		}{{"forward", ys[0], ys[1]}, {"backward", dxs[0], dxs[1]}, {"backward in place", alias[0], alias[1]}} {
			for i := range c.a {
				if math.Float32bits(c.a[i]) != math.Float32bits(c.b[i]) {
					t.Fatalf("n=%d %s [%d]: asm %#x, Go %#x (x %g, dy %g)", n, c.what, i,
						math.Float32bits(c.b[i]), math.Float32bits(c.a[i]), x[i], dy[i])
				}
			}
		}
	}
}

// TestLayerNormAsmBitwise: LayerNorm's AVX-512 loops give, bit for bit,
// what the portable loops give: output, saved moments, and the accumulated
// input, weight and bias gradients, over widths with and without a tail.
func TestLayerNormAsmBitwise(t *testing.T) {
	asm, gen := vecDevice(t, "avx512"), vecDevice(t, "generic")
	r := rand.New(rand.NewPCG(23, 24))
	randF := func(n int, scale, shift float64) F32 {
		x := make(F32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64()*scale + shift)
		}
		return x
	}
	for _, c := range []int{1, 7, 8, 13, 64, 200, 773} {
		n := 5
		x, w, b, dy := randF(n*c, 3, 1), randF(c, 1, 1), randF(c, 0.5, 0), randF(n*c, 1, 0)
		dx0, dw0, db0 := randF(n*c, 1, 0), randF(c, 1, 0), randF(c, 1, 0)
		var outs [2][6]F32
		for k, d := range []*Device{gen, asm} {
			out, mean, rstd := make(F32, n*c), make(F32, n), make(F32, n)
			d.LayerNormForward(out, mean, rstd, x, w, b, n, c, 1e-5)
			dx, dw, db := slices.Clone(dx0), slices.Clone(dw0), slices.Clone(db0)
			d.LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd, n, c)
			outs[k] = [6]F32{out, mean, rstd, dx, dw, db}
		}
		for j, what := range []string{"out", "mean", "rstd", "dinp", "dweight", "dbias"} {
			for i := range outs[0][j] {
				if math.Float32bits(outs[0][j][i]) != math.Float32bits(outs[1][j][i]) {
					t.Fatalf("c=%d %s[%d]: asm %g, Go %g", c, what, i, outs[1][j][i], outs[0][j][i])
				}
			}
		}
	}
}
