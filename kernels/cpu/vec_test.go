package cpu

import (
	"math"
	"math/rand/v2"
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

func TestVecAVX512(t *testing.T) {
	if !haveVecAsm || bestISA() != isaAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(1, 2))
	// exp accuracy over the whole useful range through expStoreAVX512.
	var xs []float32
	for x := float32(-103.9); x < 88.7; x += 1e-3 {
		xs = append(xs, x)
	}
	ys := make([]float32, len(xs))
	expStoreAVX512(ys, xs, 0)
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
		t.Fatalf("exp AVX-512: worst error %.2f ulp", worst)
	}
	t.Logf("exp AVX-512 worst error %.2f ulp", worst)
	sp := []float32{float32(math.Inf(-1)), -1000, -104, 0, 89, float32(math.NaN())}
	spo := make([]float32, len(sp))
	expStoreAVX512(spo, sp, 0)
	if spo[0] != 0 || spo[1] != 0 || spo[2] != 0 || spo[3] != 1 || !math.IsInf(float64(spo[4]), 1) || !math.IsNaN(float64(spo[5])) {
		t.Fatalf("exp special values: %v", spo)
	}

	for _, n := range []int{1, 3, 15, 16, 17, 31, 63, 64, 65, 100, 129, 1000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
		}
		if got, want := maxAVX512(x), goMax(x); got != want {
			t.Fatalf("n=%d max %g want %g", n, got, want)
		}
		m := goMax(x)
		s1 := float64(expSumAVX512(x, m))
		s2 := goExpSum(x, m)
		if math.Abs(s1-s2) > 1e-6*s2 {
			t.Fatalf("n=%d expsum %g want %g", n, s1, s2)
		}
		d1 := make([]float32, n+1)
		d1[n] = 42
		s3 := float64(expStoreAVX512(d1, x, m))
		if math.Abs(s3-s2) > 1e-6*s2 || d1[n] != 42 {
			t.Fatalf("n=%d expstore sum %g want %g (guard %g)", n, s3, s2, d1[n])
		}
		for i := range x {
			if u := ulps(d1[i], math.Exp(float64(x[i]-m))); u > 2 && d1[i] > 1e-37 {
				t.Fatalf("n=%d expstore[%d]=%g", n, i, d1[i])
			}
		}
		y := append([]float32(nil), x...)
		y = append(y, 7)
		scaleAVX512(y[:n], 0.5)
		for i := range x {
			if y[i] != x[i]*0.5 {
				t.Fatalf("scale")
			}
		}
		if y[n] != 7 {
			t.Fatal("scale guard")
		}
	}

	for _, hs := range []int{16, 32, 48, 64, 80, 128} {
		for _, n := range []int{1, 2, 3, 4, 5, 8, 9, 33} {
			stride := 3*hs + 16
			q := randVec(r, hs)
			k := randVec(r, (n-1)*stride+hs)
			got, want := make([]float32, n), make([]float32, n)
			dotsAVX512(got, &q[0], &k[0], stride, hs)
			goDots(want, q, k, stride)
			for j := range got {
				if math.Abs(float64(got[j]-want[j])) > 1e-5*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("dots hs=%d n=%d j=%d: %g want %g", hs, n, j, got[j], want[j])
				}
			}
			p := randVec(r, n)
			o1, o2 := randVec(r, hs), make([]float32, hs)
			copy(o2, o1)
			gemvTAVX512(&o1[0], p, &k[0], stride, hs)
			goGemvT(o2, p, k, stride)
			for c := range o1 {
				if math.Abs(float64(o1[c]-o2[c])) > 1e-5*(1+math.Abs(float64(o2[c]))) {
					t.Fatalf("gemvT hs=%d n=%d c=%d: %g want %g", hs, n, c, o1[c], o2[c])
				}
			}
			k2 := append([]float32(nil), k...)
			rank1AVX512(&k[0], stride, p, &q[0], hs)
			goRank1(k2, stride, p, q)
			for i := range k {
				if math.Abs(float64(k[i]-k2[i])) > 1e-6*(1+math.Abs(float64(k2[i]))) {
					t.Fatalf("rank1 hs=%d n=%d i=%d: %g want %g", hs, n, i, k[i], k2[i])
				}
			}
		}
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
	if !haveVecAsm || bestISA() != isaAVX512 {
		t.Skip("no AVX-512")
	}
	d, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !d.useAVX512() {
		t.Skip("no AVX-512VL")
	}
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
