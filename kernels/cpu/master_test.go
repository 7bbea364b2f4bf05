package cpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gochat-ai/gochat/kernels/cpu"
)

// TestSplitJoinMaster: the halves of an fp32 master weight give it back
// exactly, but for a tie rounded up, which comes back one ulp further from
// zero and still rounds to the same bf16; the high half is always the
// weight rounded to nearest even. Every low half is tried under high
// halves of both signs, odd and even, around the exponent's corners, and
// a million random patterns besides.
func TestSplitJoinMaster(t *testing.T) {
	check := func(bits uint32) {
		w := math.Float32frombits(bits)
		if w != w {
			return // NaN: no master weight is one
		}
		hi, lo := cpu.SplitMaster(w)
		if hi != cpu.ToBF16(w) {
			t.Fatalf("%#08x: high half %#04x, want ToBF16 %#04x", bits, hi, cpu.ToBF16(w))
		}
		got := math.Float32bits(cpu.JoinMaster(hi, lo))
		tieUp := bits&0xffff == 0x8000 && uint32(hi) != bits>>16
		switch {
		case tieUp && got != bits+1:
			t.Fatalf("%#08x (a tie rounded up): joined %#08x, want %#08x", bits, got, bits+1)
		case !tieUp && got != bits:
			t.Fatalf("%#08x: joined %#08x", bits, got)
		}
		if hi2, lo2 := cpu.SplitMaster(math.Float32frombits(got)); hi2 != hi || lo2 != lo {
			t.Fatalf("%#08x: splitting the joined value again gives %#04x %#04x, not %#04x %#04x", bits, hi2, lo2, hi, lo)
		}
	}
	for _, h := range []uint32{0x0000, 0x0001, 0x3f80, 0x3f81, 0x7f7f, 0x7f80, 0x8000, 0x8001, 0xbf80, 0xbf81, 0xff7f, 0x0080, 0x007f} {
		for l := range uint32(1 << 16) {
			check(h<<16 | l)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		check(r.Uint32())
	}
}
