package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bf16ConvInputs returns float32 bit patterns that exercise rounding to
// bf16: every upper half (sign, exponent, 7 mantissa bits) with the low
// halves below, which cover ties (0x8000: rounds to even), just below and
// above them, exact values, and the extremes. That includes ±0, ±Inf,
// quiet and signalling NaNs of both signs with many payloads, every
// denormal upper half, and the largest finite floats (which round up to
// Inf).
func bf16ConvInputs() []float32 {
	lows := []uint32{0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4321}
	out := make([]float32, 0, 65536*len(lows))
	for hi := range uint32(65536) {
		for _, lo := range lows {
			out = append(out, math.Float32frombits(hi<<16|lo))
		}
	}
	return out
}

// bf16RoundImpls are the vector roundings this CPU runs.
func bf16RoundImpls() map[string]func(dst []uint16, src []float32) {
	out := map[string]func(dst []uint16, src []float32){"roundSliceBF16": roundSliceBF16}
	bf16AddRoundImpls(out)
	return out
}

// TestRoundSliceBF16 compares the vector roundings with ToBF16 bit for bit
// on bf16ConvInputs (in a shuffled order, so that blocks mix denormals
// with other values), and at every length up to 100 and odd offsets so
// that every tail and mask is used.
func TestRoundSliceBF16(t *testing.T) {
	in := bf16ConvInputs()
	r := rand.New(rand.NewPCG(31, 32))
	r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
	for name, round := range bf16RoundImpls() {
		got := make([]uint16, len(in))
		round(got, in)
		for i, f := range in {
			if want := ToBF16(f); got[i] != want {
				t.Fatalf("%s: %#08x → %#04x, want %#04x", name, math.Float32bits(f), got[i], want)
			}
		}
		// Runs of denormals only (the exact path for whole blocks), and
		// short slices at odd offsets.
		den := make([]float32, 100)
		for i := range den {
			den[i] = math.Float32frombits(uint32(r.IntN(0x800000)) | uint32(i%2)<<31)
		}
		for n := range 100 {
			for _, src := range [][]float32{in[7 : 7+n], den[:n]} {
				dst := make([]uint16, n+3)
				for i := range dst {
					dst[i] = 0xbeef
				}
				round(dst[1:1+n], src)
				if dst[0] != 0xbeef || dst[n+1] != 0xbeef {
					t.Fatalf("%s: n=%d wrote outside dst", name, n)
				}
				for i, f := range src {
					if want := ToBF16(f); dst[1+i] != want {
						t.Fatalf("%s: n=%d: %#08x → %#04x, want %#04x", name, n, math.Float32bits(f), dst[1+i], want)
					}
				}
			}
		}
	}
}

// TestWidenSliceBF16 checks widenSliceBF16 against FromBF16 on every bf16
// value and at every length up to 100.
func TestWidenSliceBF16(t *testing.T) {
	in := make([]uint16, 65536)
	for i := range in {
		in[i] = uint16(i)
	}
	got := make([]float32, len(in))
	widenSliceBF16(got, in)
	for i, h := range in {
		if math.Float32bits(got[i]) != math.Float32bits(FromBF16(h)) {
			t.Fatalf("%#04x → %#08x, want %#08x", h, math.Float32bits(got[i]), math.Float32bits(FromBF16(h)))
		}
	}
	for n := range 100 {
		dst := make([]float32, n+2)
		dst[0], dst[n+1] = 7, 7
		widenSliceBF16(dst[1:1+n], in[300:300+n])
		if dst[0] != 7 || dst[n+1] != 7 {
			t.Fatalf("n=%d: wrote outside dst", n)
		}
		for i := range n {
			if dst[1+i] != FromBF16(in[300+i]) {
				t.Fatalf("n=%d: element %d wrong", n, i)
			}
		}
	}
}

// BenchmarkRoundSliceBF16 times the rounding of 4M floats (16 MiB in,
// 8 MiB out), and the widening back.
func BenchmarkRoundSliceBF16(b *testing.B) {
	src := gemmRand(rand.New(rand.NewPCG(1, 2)), 4<<20)
	dst := make([]uint16, len(src))
	for name, round := range bf16RoundImpls() {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(src)) * 6)
			for b.Loop() {
				round(dst, src)
			}
		})
	}
	b.Run("go", func(b *testing.B) {
		b.SetBytes(int64(len(src)) * 6)
		for b.Loop() {
			for i, f := range src {
				dst[i] = ToBF16(f)
			}
		}
	})
	b.Run("widen", func(b *testing.B) {
		b.SetBytes(int64(len(src)) * 6)
		for b.Loop() {
			widenSliceBF16(src, dst)
		}
	})
}

// TestRoundF32BF16 checks roundF32BF16Vec (one pass from float32 to the
// bf16 value as float32) against FromBF16(ToBF16(x)) bit for bit on
// bf16ConvInputs, at every length up to 100 with odd offsets (every tail
// mask), and in place.
func TestRoundF32BF16(t *testing.T) {
	in := bf16ConvInputs()
	want := func(f float32) uint32 { return math.Float32bits(FromBF16(ToBF16(f))) }
	got := make([]float32, len(in))
	if !roundF32BF16Vec(got, in) {
		t.Skip("no vector routine on this CPU")
	}
	for i, f := range in {
		if math.Float32bits(got[i]) != want(f) {
			t.Fatalf("%#08x → %#08x, want %#08x", math.Float32bits(f), math.Float32bits(got[i]), want(f))
		}
	}
	guard := math.Float32frombits(0xdeadbeef)
	for n := range 100 {
		src := in[7+n*13 : 7+n*13+n]
		dst := make([]float32, n+2)
		dst[0], dst[n+1] = guard, guard
		roundF32BF16Vec(dst[1:1+n], src)
		if math.Float32bits(dst[0]) != 0xdeadbeef || math.Float32bits(dst[n+1]) != 0xdeadbeef {
			t.Fatalf("n=%d wrote outside dst", n)
		}
		inPlace := append([]float32(nil), src...)
		roundF32BF16Vec(inPlace, inPlace)
		for i, f := range src {
			if math.Float32bits(dst[1+i]) != want(f) || math.Float32bits(inPlace[i]) != want(f) {
				t.Fatalf("n=%d: %#08x → %#08x (in place %#08x), want %#08x", n, math.Float32bits(f), math.Float32bits(dst[1+i]), math.Float32bits(inPlace[i]), want(f))
			}
		}
	}
}
