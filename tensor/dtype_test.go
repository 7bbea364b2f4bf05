package tensor

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

func TestF16ToF32Exhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		got := F16ToF32(h)
		want := float16.Frombits(h).Float32()
		if !sameF32(got, want) {
			t.Fatalf("F16ToF32(%#04x) = %v (%#08x), want %v (%#08x)", h, got, math.Float32bits(got),
				want, math.Float32bits(want))
		}
		back := F32ToF16(got)
		switch {
		case got != got: // NaN stays NaN; a quiet NaN keeps its bits
			if b := back; b&0x7c00 != 0x7c00 || b&0x3ff == 0 || b&0x8000 != h&0x8000 {
				t.Fatalf("F32ToF16(F16ToF32(NaN %#04x)) = %#04x, not a NaN of the same sign", h, b)
			}
			if h&0x200 != 0 && back != h {
				t.Fatalf("quiet NaN %#04x came back as %#04x", h, back)
			}
		case back != h:
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestBF16Exhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		got := BF16ToF32(h)
		if math.Float32bits(got) != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) = %#08x", h, math.Float32bits(got))
		}
		back := F32ToBF16(got)
		switch {
		case got != got:
			if back&0x7f80 != 0x7f80 || back&0x7f == 0 || back&0x8000 != h&0x8000 {
				t.Fatalf("F32ToBF16(NaN %#04x) = %#04x, not a NaN of the same sign", h, back)
			}
		case back != h:
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", h, back)
		}
	}
}

// nearest16 is a slow reference for round-to-nearest-even into a 16-bit float format whose
// positive values are monotone in their bit patterns 0..inf, decoded by toF32. above is the
// value one step beyond the largest finite one (where rounding to infinity starts).
func nearest16(x float32, inf uint16, above float64, toF32 func(uint16) float32) uint16 {
	sign := uint16(0)
	if math.Signbit(float64(x)) {
		sign = 0x8000
	}
	a := math.Abs(float64(x))
	val := func(h uint16) float64 {
		if h == inf {
			return above
		}
		return float64(toF32(h))
	}
	// Largest h in [0, inf] with val(h) <= a.
	lo, hi := uint16(0), inf
	if a >= above {
		return sign | inf
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if val(mid) <= a {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if val(lo) == a {
		return sign | lo
	}
	dlo, dhi := a-val(lo), val(lo+1)-a
	if dhi < dlo || dhi == dlo && lo&1 == 1 {
		lo++
	}
	return sign | lo
}

func TestF32ToHalfAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(x float32) {
		if x != x {
			return
		}
		if got, want := F32ToF16(x), nearest16(x, 0x7c00, 65536, F16ToF32); got != want {
			t.Fatalf("F32ToF16(%v = %#08x) = %#04x, want %#04x", x, math.Float32bits(x), got, want)
		}
		if got, want := F32ToBF16(x), nearest16(x, 0x7f80, math.Ldexp(1, 128), BF16ToF32); got != want {
			t.Fatalf("F32ToBF16(%v = %#08x) = %#04x, want %#04x", x, math.Float32bits(x), got, want)
		}
		if got, want := F32ToF16(x), float16.Fromfloat32(x).Bits(); got != want {
			t.Fatalf("F32ToF16(%v) = %#04x, x448/float16 says %#04x", x, got, want)
		}
	}
	// Every tie and its neighbours: midpoints between adjacent halves and bfloat16s, ±1 ulp.
	for i := range 0x7f80 {
		for _, toF32 := range []func(uint16) float32{F16ToF32, BF16ToF32} {
			lo, hi := float64(toF32(uint16(i))), float64(toF32(uint16(i+1)))
			if math.IsInf(hi, 0) || math.IsNaN(hi) || math.IsNaN(lo) {
				continue
			}
			m := float32((lo + hi) / 2)
			for _, x := range []float32{m, math.Nextafter32(m, 0), math.Nextafter32(m, float32(math.Inf(1)))} {
				check(x)
				check(-x)
			}
		}
	}
	// The overflow boundaries.
	for _, x := range []float32{65504, 65519.996, 65520, 65536, math.MaxFloat32, 3.3961775e38, 3.3961778e38} {
		check(x)
		check(-x)
	}
	// Random bit patterns, and random values concentrated in the half range.
	for range 200000 {
		check(math.Float32frombits(r.Uint32()))
		check(float32(r.NormFloat64() * math.Ldexp(1, r.IntN(40)-25)))
	}
}

// TestConversionsMatchTorch checks F32ToF16 and F32ToBF16 against PyTorch's own roundings
// (tensor.half() and tensor.bfloat16()) of random values and hand-picked ties.
func TestConversionsMatchTorch(t *testing.T) {
	c := expected(t).Convert
	if len(c.F32) == 0 || len(c.F16) != len(c.F32) || len(c.BF16) != len(c.F32) {
		t.Fatalf("expected.json convert: %d/%d/%d values", len(c.F32), len(c.F16), len(c.BF16))
	}
	for i, b := range c.F32 {
		x := math.Float32frombits(b)
		if got := F32ToF16(x); got != c.F16[i] {
			t.Errorf("F32ToF16(%v = %#08x) = %#04x, torch says %#04x", x, b, got, c.F16[i])
		}
		if got := F32ToBF16(x); got != c.BF16[i] {
			t.Errorf("F32ToBF16(%v = %#08x) = %#04x, torch says %#04x", x, b, got, c.BF16[i])
		}
	}
}

func TestSliceConversions(t *testing.T) {
	src := []float32{0, -1.5, 65504, 1e-8, float32(math.Inf(-1)), 3.14159}
	h := make([]uint16, len(src))
	b := make([]uint16, len(src))
	F32ToF16Slice(h, src)
	F32ToBF16Slice(b, src)
	back := make([]float32, len(src))
	F16ToF32Slice(back, h)
	for i := range src {
		if h[i] != F32ToF16(src[i]) || back[i] != F16ToF32(h[i]) {
			t.Errorf("f16 slice %d: %#04x %v", i, h[i], back[i])
		}
	}
	BF16ToF32Slice(back, b)
	for i := range src {
		if b[i] != F32ToBF16(src[i]) || back[i] != BF16ToF32(b[i]) {
			t.Errorf("bf16 slice %d: %#04x %v", i, b[i], back[i])
		}
	}
	if F32ToBF16(float32(math.NaN())) != 0x7fc0 {
		t.Errorf("F32ToBF16(NaN) = %#04x, want 0x7fc0", F32ToBF16(float32(math.NaN())))
	}
}

func TestFloat8(t *testing.T) {
	for _, c := range []struct {
		b    byte
		e4m3 float32
	}{
		{0x00, 0}, {0x80, float32(math.Copysign(0, -1))}, {0x38, 1}, {0xb8, -1}, {0x7e, 448},
		{0x01, 1.0 / 512}, {0x07, 7.0 / 512}, {0x08, 1.0 / 64}, {0x40, 2}, {0x3c, 1.5},
	} {
		if got := f8e4m3ToF32(c.b); !sameF32(got, c.e4m3) {
			t.Errorf("f8e4m3ToF32(%#02x) = %v, want %v", c.b, got, c.e4m3)
		}
	}
	if x := f8e4m3ToF32(0x7f); x == x {
		t.Errorf("f8e4m3ToF32(0x7f) = %v, want NaN", x)
	}
	var dst [3]float32
	decodeF32(dst[:], []byte{0x3c, 0x7c, 0xc0}, F8E5M2)
	if dst[0] != 1 || !math.IsInf(float64(dst[1]), 1) || dst[2] != -2 {
		t.Errorf("F8_E5M2 0x3c 0x7c 0xc0 = %v, want [1 +Inf -2]", dst)
	}
}

func TestDTypes(t *testing.T) {
	for dt, want := range map[DType]int{F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1,
		U8: 1, BOOL: 1, U16: 2, U32: 4, U64: 8, F8E4M3: 1, F8E5M2: 1, "F17": 0} {
		if dt.Size() != want {
			t.Errorf("%s.Size() = %d, want %d", dt, dt.Size(), want)
		}
	}
	if !BF16.IsFloat() || I64.IsFloat() || BOOL.IsFloat() {
		t.Error("IsFloat wrong")
	}
}

func BenchmarkF32ToF16(b *testing.B) {
	src := make([]float32, 1<<16)
	for i := range src {
		src[i] = float32(i) * 0.37
	}
	dst := make([]uint16, len(src))
	b.SetBytes(int64(4 * len(src)))
	for b.Loop() {
		F32ToF16Slice(dst, src)
	}
}

func BenchmarkF16ToF32(b *testing.B) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]float32, len(src))
	b.SetBytes(int64(2 * len(src)))
	for b.Loop() {
		F16ToF32Slice(dst, src)
	}
}
